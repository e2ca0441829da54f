"""Whether a result supports an answer: the grounding check behind :func:`settle_answer` and the
synthesis's fallback to ``direct`` (see :mod:`orchestrion.runtime.synthesis`).

An answer's *keys* are its marked answer ("Answer: X"), else its last line; for a multiple-choice
answer ``(B) 03/06/1973`` also the letter ``(B)`` and the option's text. A result supports the
answer when one key occurs in it as a phrase (case, commas and runs of spaces aside), or when the
answer is a number that the result writes (``97,180`` and ``97180.0`` alike).

A multi-part answer (:mod:`.parts`) is supported when one of its parts is, by the same rule: the
results then decided something, and the parts they did not decide are the synthesizer's own, as
``direct``'s all are; an answer with no labelled lines is read as a single answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .._text import contains_phrase, extract_answer, numbers_in, parse_number
from .parts import parse_parts

_OPTION = re.compile(r"^\(([A-Za-z])\)\s*(.*)$", re.DOTALL)


def _norm(text: str) -> str:
    return " ".join(text.lower().replace(",", " ").split()).rstrip(".")


def answer_keys(answer: str) -> list[str]:
    """The normalised phrases that a supporting result must contain one of."""
    key = (extract_answer(answer) or "").strip()
    keys = [key]
    if option := _OPTION.match(key):
        keys += [f"({option[1]})", option[2]]
    return [k for k in dict.fromkeys(_norm(k) for k in keys) if k]


def supported(answer: str, outputs: Sequence[str], *, multipart: bool = False) -> bool:
    """Whether one of ``outputs`` supports ``answer``, or one of its parts for a multi-part task
    (module doc)."""
    if multipart and (parts := parse_parts(answer)):
        return any(supported(part, outputs) for part in parts.values())
    keys = answer_keys(answer)
    if not keys:
        return False
    number = parse_number((extract_answer(answer) or "").strip())
    for out in outputs:
        text = _norm(out)
        if any(contains_phrase(text, k) for k in keys):
            return True
        if number is not None and any(abs(n - number) < 1e-9 for n in numbers_in(out)):
            return True
    return False
