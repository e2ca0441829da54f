"""The rule of the coder's program library: which ``@train`` programs may be shown as worked examples.

A program is a candidate when its episode's answer was what it printed and that answer was correct.
One correct episode is weak evidence, though: a program that prints the same answer whatever its
data is right whenever the reference happens to be that answer, and a worked example is copied.
On a two-option family the 1.5B wrote a bracket check whose comparison was wrong, so it failed at
the first closing bracket; the programs that printed the failing option were right whenever that
was the reference, entered the library, and were copied, bug and all, into later programs (the
numbers are in ``docs/results/heldout.md``).

So programs are grouped by their *shape*: the code with its literal data (strings and numbers)
blanked and its comments and layout dropped, which is what stays the same when a worked program is
copied onto another task's data. A shape is shown only when at least :data:`MIN_SHAPE_PRECISION`
of the ``@train`` episodes whose answer a program of that shape printed were correct.
"""

from __future__ import annotations

import io
import tokenize
from collections import Counter
from collections.abc import Iterable

# the share of a shape's @train runs that must have been correct: right at least twice as often as wrong
MIN_SHAPE_PRECISION = 2 / 3
_DROPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}


def program_shape(code: str) -> str:
    """``code`` with string literals as ``S``, numbers as ``0``, and no comments or layout; code that
    does not tokenize is its own shape (its whitespace collapsed)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return " ".join(code.split())
    out = []
    for tok in tokens:
        if tok.type in _DROPPED:
            continue
        out.append("S" if tok.type == tokenize.STRING else "0" if tok.type == tokenize.NUMBER else tok.string)
    return " ".join(out)


def trusted_programs(runs: Iterable[tuple[str, str, bool]], limit: int) -> list[tuple[str, str]]:
    """Of ``runs`` (task prompt, program, whether the printed answer was correct; newest first), the
    correct ones whose shape was correct in at least :data:`MIN_SHAPE_PRECISION` of its runs: at most
    ``limit`` (prompt, program) pairs, newest first."""
    runs = list(runs)
    used: Counter[str] = Counter()
    right: Counter[str] = Counter()
    for _, code, correct in runs:
        shape = program_shape(code)
        used[shape] += 1
        right[shape] += bool(correct)
    out: list[tuple[str, str]] = []
    for prompt, code, correct in runs:
        shape = program_shape(code)
        if correct and right[shape] >= MIN_SHAPE_PRECISION * used[shape]:
            out.append((prompt, code))
            if len(out) >= limit:
                break
    return out
