"""Recoverable-failure augmentation (ParaManager): teach the orchestrator to repair format drift.

A teacher that decodes under a grammar never drifts, so its trajectories hold no repairs; a
student decoding freely will drift, and must learn what to do next. For a share of the kept
valid first attempts, :func:`augment_records` adds a copy whose context is what the runtime
shows after a failed attempt (the drifted output and the validation error, through the same
``repair_messages`` the runtime uses) and whose completion is the teacher's valid output.

Drifts (each one fails to parse, checked with the same lenient parser the runtime uses):

- ``truncated``: the JSON cut part-way, as a reply that hit the token limit looks;
- ``prose``: a sentence about the action instead of the action;
- ``fenced``: the JSON inside a code fence with a trailing remark and a missing brace;
- ``length``: the reply ran past the length limit (the runtime then shows no output, only a
  note to reply shorter).

Tool-fault recovery (EXEC_ERR, TIMEOUT, then a retry) comes from real episodes: the export keeps
episodes that recovered from failed calls (``RecordFilter.keep_recoverable``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from .._text import extract_json
from ..models.structured import repair_messages
from .records import DecisionRecord

DRIFTS = ("truncated", "prose", "fenced", "length")


def drifted(output: str, kind: str) -> str:
    """``output`` spoiled the way ``kind`` says (for ``length``, the output itself is not shown)."""
    if kind == "truncated":
        return output[: max(1, int(len(output) * 0.6))]
    if kind == "prose":
        return "I will now decide the next step and send the calls that solve the task."
    if kind == "fenced":
        body = output.rstrip()
        return "```json\n" + (body[:-1] if body.endswith("}") else body) + "\n```\nThat should do it."
    if kind == "length":
        return output
    raise ValueError(f"unknown drift '{kind}'; known: {', '.join(DRIFTS)}")


def _parse_error(text: str) -> str | None:
    try:
        extract_json(text)
    except ValueError as exc:
        return str(exc)
    return None


def repair_record(rec: DecisionRecord, kind: str) -> DecisionRecord | None:
    """A copy of valid ``rec`` that repairs drift ``kind``; None when the drift happens to parse."""
    bad = drifted(rec.output, kind)
    if kind == "length":
        messages = repair_messages(list(rec.messages), bad, "", truncated=True)  # type: ignore[arg-type]
    else:
        error = _parse_error(bad)
        if error is None:
            return None
        messages = repair_messages(list(rec.messages), bad, error)  # type: ignore[arg-type]
    return replace(
        rec,
        decision_id=f"{rec.decision_id}~{kind}",
        attempt=rec.attempt + 1,
        messages=[{"role": m["role"], "content": m["content"]} for m in messages],
        prompt_token_ids=None,  # a new context: tokenized at export
        logprobs=None,
        repaired=True,
    )


def augment_records(records: Sequence[DecisionRecord], share: float, *, seed: int = 0) -> list[DecisionRecord]:
    """``records`` plus a repair copy for about ``share`` of its valid first attempts, drifts in turn."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"augmentation share must be between 0 and 1, got {share}")
    rng = random.Random(seed)
    out = list(records)
    turn = 0
    for rec in records:
        if not rec.valid or rec.attempt != 0 or rng.random() >= share:
            continue
        copy = repair_record(rec, DRIFTS[turn % len(DRIFTS)])
        turn += 1
        if copy is not None:
            out.append(copy)
    return out
