"""Whether an answer fits its task's own format: a multiple-choice answer names one of the
options (by letter or by text), a numeric answer holds a number, an exact-match answer has an
answer line. An answer that does not fit is never accepted: the episode records it (event
``answer_out_of_format``) and answers as ``direct`` would (:mod:`.episode`); the coder agent
retries a program whose printed answer does not fit (:mod:`orchestrion.tools.agents`).

The option reading here is the scorers' own (:mod:`orchestrion.eval.scorers` imports it), so
"fits" and "is graded as choosing an option" cannot drift apart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .._text import contains_phrase, extract_answer, extract_number, marked_answer, normalize, parse_number
from .types import Task

_LEAD_LABEL = re.compile(r"\s*(?:option\s+)?(?:\(\s*([A-Za-z]|\d{1,2})\s*\)|([A-Z]|\d{1,2})[.):])(?:\s|$)")
_BARE_LABEL = re.compile(r"\s*(?:option\s+)?([A-Z]|\d{1,2})\s*[.:)]?\s*")
_ANY_LABEL = re.compile(r"\(([A-Z]|\d{1,2})\)")


def option_labels(n: int) -> list[str]:
    """Letters for up to 26 options, numbers beyond that."""
    return [chr(ord("A") + i) for i in range(n)] if n <= 26 else [str(i + 1) for i in range(n)]


def same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _resolve_option(text: str, options: list[str], labels: list[str], *, anywhere: bool) -> int | None:
    """Which option ``text`` names: a leading "(X)", its text, its number, or (``anywhere``) a mention."""
    lead = _LEAD_LABEL.match(text + " ") or _BARE_LABEL.fullmatch(text)
    if lead is not None:
        label = next(g for g in lead.groups() if g).upper()
        if label in labels:
            return labels.index(label)
    got = normalize(text)
    norm = [normalize(o) for o in options]
    if got and got in norm:
        return norm.index(got)
    value = parse_number(text)
    if value is not None:
        hits = [i for i, o in enumerate(options) if (n := parse_number(o)) is not None and same_number(n, value)]
        if len(hits) == 1:
            return hits[0]
    if anywhere:
        named = [m[1] for m in _ANY_LABEL.finditer(text) if m[1] in labels]
        if named:
            return labels.index(named[-1])
    mentions = [(pos + len(o), len(o), i) for i, o in enumerate(norm) for pos in contains_phrase(got, o)]
    return max(mentions)[2] if mentions else None


def choose_option(output: str, options: list[str], labels: list[str] | None = None) -> tuple[int | None, str | None]:
    """The index of the option the output chose (and the text it was read from).

    A marked final answer decides when it names an option (a leading "(X)" label
    outranks the text after it); otherwise the last line that names an option
    does: by label, by its whole text, or by the option it mentions last.
    """
    labels = labels or option_labels(len(options))
    marked = marked_answer(output)
    if marked is not None:
        found = _resolve_option(marked, options, labels, anywhere=False)
        if found is not None:
            return found, marked
    for line in reversed([ln for ln in output.splitlines() if ln.strip()]):
        found = _resolve_option(line, options, labels, anywhere=True)
        if found is not None:
            return found, line.strip()
    return None, marked


@dataclass(frozen=True)
class AnswerFormat:
    """What a task's answer must look like: ``kind`` is ``options``, ``number`` or ``text``."""

    kind: str
    options: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    @classmethod
    def of(cls, task: Task) -> AnswerFormat | None:
        """The format a task states: its options, else its scoring mode (``numeric``, ``exact``);
        None for a task that states none (a user's free question, a code task)."""
        if task.choices:
            labels = task.metadata.get("labels")
            if not isinstance(labels, list) or len(labels) != len(task.choices):
                labels = option_labels(len(task.choices))
            return cls("options", tuple(task.choices), tuple(str(x) for x in labels))
        mode = task.metadata.get("scoring")
        if mode == "numeric":
            return cls("number")
        if mode == "exact":
            return cls("text")
        return None

    def misfit(self, answer: str) -> str | None:
        """Why ``answer`` does not fit (one line), or None when it does."""
        if self.kind == "options":
            index, _ = choose_option(answer, list(self.options), list(self.labels))
            if index is None:
                shown = ", ".join(f"({label})" for label in self.labels[:6])
                return f"it names none of the task's options {shown}"
            return None
        if self.kind == "number":
            return None if extract_number(answer)[1] is not None else "it holds no number"
        return None if (extract_answer(answer) or "").strip() else "it is empty"

    def describe(self) -> str:
        """The format in words, for a prompt that asks for it."""
        if self.kind == "options":
            return "exactly one of the task's options, as '(X) option text'"
        return "a number" if self.kind == "number" else "only the answer"
