"""Scorers: grade a model's output against a task's reference.

Every scorer is an async callable ``(task, output) -> Score``. Which one a
dataset uses follows from its tasks: options with scores are graded as BIG-bench
grades multiple choice (the score of the chosen option), numeric references by
value, code by running the tests in the sandbox, and anything else by exact match
after normalisation against any accepted target. :class:`AutoScorer` picks per
task from ``task.metadata["scoring"]``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .._text import (
    PYTHON_FENCES,
    code_blocks,
    extract_answer,
    extract_number,
    marked_answer,
    normalize,
    parse_number,
)
from ..runtime.fit import choose_option, option_labels, same_number
from ..runtime.types import Task

__all__ = ["choose_option", "option_labels"]  # re-exported: they live in the runtime, which checks formats

SCORING_MODES = ("multiple_choice", "numeric", "exact", "execution")


@dataclass(frozen=True)
class Score:
    value: float  # in [0, 1]
    correct: bool
    extracted: str | None  # the answer taken from the output
    detail: str = ""

    def to_meta(self) -> dict[str, Any]:
        return {"score": self.value, "correct": self.correct, "extracted": self.extracted, "score_detail": self.detail}


@runtime_checkable
class Scorer(Protocol):
    name: str

    async def __call__(self, task: Task, output: str) -> Score: ...


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` passed: 1 - C(n-c, k) / C(n, k)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def targets_of(task: Task) -> list[str]:
    targets = task.metadata.get("targets")
    if isinstance(targets, list) and targets:
        return [str(t) for t in targets]
    return [task.answer] if task.answer is not None else []


def target_scores_of(task: Task) -> dict[str, float]:
    scores = task.metadata.get("target_scores")
    if isinstance(scores, dict) and scores:
        return {str(k): float(v) for k, v in scores.items()}
    if task.choices:
        return {c: 1.0 if c == task.answer else 0.0 for c in task.choices}
    return {}


class ExactMatch:
    """Correct when the extracted answer equals any target after normalisation."""

    name = "exact_match"

    async def __call__(self, task: Task, output: str) -> Score:
        targets = targets_of(task)
        extracted = extract_answer(output)
        if extracted is None:
            return Score(0.0, False, None, "no answer in the output")
        got = normalize(extracted)
        for target in targets:
            if got == normalize(target):
                return Score(1.0, True, extracted, f"matches target {target!r}")
        return Score(0.0, False, extracted, f"no match among {len(targets)} target(s)")


class NumericMatch:
    """Correct when the final number equals a numeric target ("156.0" == "156", "1,234" == "1234")."""

    name = "numeric"

    async def __call__(self, task: Task, output: str) -> Score:
        targets = targets_of(task)
        marked = marked_answer(output)
        if marked is not None and any(normalize(marked) == normalize(t) for t in targets):
            return Score(1.0, True, marked, "the stated answer matches a target as text")
        token, value = extract_number(output)
        if value is None:
            return Score(0.0, False, marked, "no number in the output")
        numeric = [(t, parse_number(t)) for t in targets]
        for target, number in numeric:
            if number is not None and same_number(value, number):
                return Score(1.0, True, token, f"{value:g} equals target {target!r}")
        return Score(0.0, False, token, f"{value:g} is not a target value")


class MultipleChoice:
    """BIG-bench's multiple_choice_grade: the target score of the chosen option."""

    name = "multiple_choice"

    async def __call__(self, task: Task, output: str) -> Score:
        scores = target_scores_of(task)
        options = list(task.choices or scores)
        if not options:
            return Score(0.0, False, None, "the task has no options to grade against")
        labels = task.metadata.get("labels") or option_labels(len(options))
        index, source = choose_option(output, options, list(labels))
        if index is None:
            return Score(0.0, False, source, "no option chosen")
        chosen = options[index]
        value = min(1.0, max(0.0, scores.get(chosen, 0.0)))
        best = max(scores.values(), default=0.0)
        correct = value > 0 and scores.get(chosen, 0.0) >= best
        return Score(value, correct, chosen, f"chose ({labels[index]}) {chosen!r}, score {value:g}")


def build_program(output: str, task: Task) -> str:
    """The code to test: a fenced block (or the raw output), completed with the code prompt."""
    entry = str(task.metadata.get("entry_point", ""))
    prompt = str(task.metadata.get("code_prompt", ""))
    blocks = [code for lang, code in code_blocks(output) if lang in PYTHON_FENCES]
    defines = re.compile(rf"^\s*def\s+{re.escape(entry)}\s*\(", re.MULTILINE) if entry else None
    if blocks:
        code = next((b for b in blocks if defines and defines.search(b)), max(blocks, key=len))
    else:  # raw output: drop any prose before the first top-level statement
        start = re.search(r"^(?:def|import|from|class|@)\b", output, re.MULTILINE)
        code = output[start.start() :] if start and defines and defines.search(output) else output
    if defines is not None and defines.search(code):
        return f"{prompt}\n    pass\n\n{code}" if prompt else code  # prompt first: imports, helpers
    lines = code.strip("\n").splitlines()
    if lines and not lines[0].startswith((" ", "\t")):
        lines = ["    " + ln if ln.strip() else ln for ln in lines]
    return prompt + "\n".join(lines) + "\n"


class CodeExecution:
    """Runs the extracted code and the task's tests in the sandbox; passing is 1.0."""

    name = "execution"

    def __init__(self, *, timeout_s: float = 15.0, memory_mb: int = 1024) -> None:
        self.timeout_s, self.memory_mb = timeout_s, memory_mb

    async def __call__(self, task: Task, output: str) -> Score:
        from ..tools.python_exec import run_sandboxed

        entry = str(task.metadata.get("entry_point", ""))
        program = build_program(output, task)
        test = str(task.metadata.get("test", ""))
        full = f"{program}\n\n{test}\n\ncheck({entry})\n"
        res = await run_sandboxed(full, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        if res.timed_out:
            return Score(0.0, False, program, f"timed out after {self.timeout_s:g}s")
        if res.exit_code == 0:
            return Score(1.0, True, program, "tests passed")
        tail = res.stderr.strip().splitlines()[-1:] or [f"exit code {res.exit_code}"]
        return Score(0.0, False, program, f"tests failed: {tail[0][:300]}")


def scoring_mode(task: Task) -> str:
    """How a task is graded: its ``metadata["scoring"]``, else judged from its reference."""
    mode = task.metadata.get("scoring")
    if mode in SCORING_MODES:
        return str(mode)
    if "test" in task.metadata and "entry_point" in task.metadata:
        return "execution"
    if task.metadata.get("target_scores") or task.choices:
        return "multiple_choice"
    targets = targets_of(task)
    if targets and any(parse_number(t) is not None for t in targets):
        return "numeric"
    return "exact"


class AutoScorer:
    """Grades each task with the scorer its :func:`scoring_mode` names."""

    name = "auto"

    def __init__(self, *, execution: CodeExecution | None = None) -> None:
        self.by_mode: dict[str, Scorer] = {
            "multiple_choice": MultipleChoice(),
            "numeric": NumericMatch(),
            "exact": ExactMatch(),
            "execution": execution or CodeExecution(),
        }

    async def __call__(self, task: Task, output: str) -> Score:
        score = await self.by_mode[scoring_mode(task)](task, output)
        if task.metadata.get("grader") == "reasoning-gym" and not score.correct:  # datasets.rgym.GRADER
            return family_checked(task, output, score)
        return score


def family_checked(task: Task, output: str, score: Score) -> Score:
    """A reasoning-gym task's score: right when its family's own checker gives the stated answer full
    marks (it accepts every valid answer where a family has several), else ``score``. Partial marks
    (some checkers give 0.01 to any well-formed answer) are not counted."""
    from ._rgym import family_score

    value, stated = family_score(task, output)
    if value < 1.0:
        return score
    return Score(1.0, True, stated, "the family's own checker accepts it")
