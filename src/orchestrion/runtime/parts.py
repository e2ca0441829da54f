"""Multi-part answers: a task whose ``metadata["scoring"]`` is ``"multipart"`` (the
``bigbench-mix:K`` dataset kind) asks several questions at once, and its answer ends with one
labelled line per question (``1: ...``, ``2: ...``). Shrinking such an answer to one line (a marked
answer, the last line) keeps only one part, so every strategy takes a model's answer through
:func:`task_answer`: a multi-part task's answer is the text from the first of its final run of
labelled lines, any other task's what :func:`~orchestrion._text.extract_answer` reads.

The labelled lines are read here, once, for strategies and the multi-part scorer
(:mod:`orchestrion.eval.datasets.multipart`) alike, so what a strategy keeps is what is graded.
Only ``metadata["scoring"]`` is read: the runtime knows nothing else of the dataset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .._text import extract_answer, marked_answer
from .types import Task

MULTIPART = "multipart"  # the value of metadata["scoring"] that marks a multi-part task

_LABEL = re.compile(
    r"^[ \t>*_#-]*(?:"
    r"(?P<word>part|question|problem|answer|q)[ \t]*(?:no\.?|#)?[ \t]*\(?(?P<wn>\d{1,2})(?!\d)\)?[ \t]*[:.)\]-]?"
    r"|\((?P<pn>\d{1,2})\)"
    r"|(?P<bn>\d{1,2})(?:[ \t]*[:)]|\.(?=[\s*_]|$)))"
    r"(?P<rest>.*)$", re.IGNORECASE)

_Label = tuple[int, int, bool, str]  # line index, part number, labelled with a word, text after the label


def is_multipart(task: Task | Mapping[str, Any]) -> bool:
    """Whether a task (or its metadata) is multi-part: ``metadata["scoring"] == "multipart"``."""
    meta = task.metadata if isinstance(task, Task) else task
    return meta.get("scoring") == MULTIPART


def _final_labels(lines: list[str], k: int | None) -> list[_Label]:
    """The last run of labelled lines in increasing order: among all labels, or among those
    labelled the way the last one is ("Part 2:" or a bare "2:") when that run is longer (then
    numbered steps inside a part's working do not cut it short). Parts above ``k`` are no labels."""
    found = []
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m is not None and 1 <= (n := int(m["wn"] or m["pn"] or m["bn"])) <= (k or 99):
            found.append((i, n, m["word"] is not None, m["rest"]))
    if not found:
        return []
    return max(_last_run(found), _last_run([f for f in found if f[2] == found[-1][2]]), key=len)


def _last_run(found: list[_Label]) -> list[_Label]:
    """The last labels whose numbers increase, read back from the last one."""
    run = [found[-1]]
    for f in reversed(found[:-1]):
        if f[1] >= run[0][1]:
            break
        run.insert(0, f)
    return run


def parse_parts(output: str, k: int | None = None) -> dict[int, str]:
    """Each part's answer text, by part number (1 to ``k``; any up to 99 when None), from the
    final run of labelled lines (:func:`_final_labels`). A part's text is what follows its label,
    unless the lines under it mark an answer ("Answer: x") or the label stands alone (then the
    lines under it)."""
    lines = output.splitlines()
    block = _final_labels(lines, k)
    out = {}
    for j, (i, n, _, rest) in enumerate(block):
        end = block[j + 1][0] if j + 1 < len(block) else len(lines)
        under = "\n".join(lines[i + 1:end]).strip()
        text = (marked_answer(under) if under else None) or rest.strip().strip("*_`").strip() or under
        if text:
            out[n] = text
    return out


def parts_block(text: str) -> str | None:
    """``text`` from the first line of its final run of labelled lines; None when it has none."""
    lines = text.splitlines()
    block = _final_labels(lines, None)
    return "\n".join(lines[block[0][0]:]).strip() if block else None


def answer_text(text: str, *, multipart: bool) -> str | None:
    """The answer in a model's final ``text``: for a multi-part task its labelled lines on (the
    whole text when it has none), else the marked answer or last line; None for blank text."""
    if not multipart:
        return extract_answer(text)
    return parts_block(text) or text.strip() or None


def task_answer(task: Task, text: str) -> str | None:
    """:func:`answer_text` for ``task``."""
    return answer_text(text, multipart=is_multipart(task))
