"""OPOD's attribution step: a judge model reads each decision with what followed it in its
episode and says whether it needs repair, with a hint (``prompts/opod_judge.md``). Unparseable
or failed judge output counts as ``needs_repair: false``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from .._errors import ModelError
from .._prompts import render
from ..models.pool import Pool
from ..models.structured import parse_as
from ..models.types import GenerateConfig, Message, msg
from ..trace.store import TraceStore

Log = Callable[[str], None]
JUDGE_CONFIG = GenerateConfig(max_tokens=160, temperature=0.0)


class Verdict(BaseModel):
    needs_repair: bool
    hint: str = ""


@dataclass
class Judgment:
    decision_id: str
    episode_id: str
    needs_repair: bool
    hint: str
    raw: str
    error: str | None = None
    hindsight: str = ""  # the evidence from other episodes of the task the judge was shown, if any


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [...] {text[-half:]}"


def _loads(value: Any) -> Any:
    try:
        return json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return None


def followup(store: TraceStore, episode_id: str, seq: int, *, limit: int = 1600) -> tuple[str, str]:
    """``(trace, outcome)``: what happened after decision ``seq`` of the episode, in time order, and how it ended."""
    decisions = store.decisions(episode_id)
    mine = [d for d in decisions if d.seq == seq]
    since = mine[0].ts if mine else 0.0
    events: list[tuple[float, str]] = []
    for d in decisions:
        if d.seq > seq:
            label = "next decision" if d.valid else "next decision (invalid)"
            events.append((d.ts, f"- {label}: {_clip(d.output or '', 240)}"))
    for s in store.spans(episode_id, kinds=("tool", "agent", "subagent"), since=since):
        attrs = _loads(s.attrs) or {}
        result = attrs.get("output") or attrs.get("error") or ""
        events.append((s.started,
                       f"- {s.kind} {attrs.get('tool') or s.name} [{s.status}]: {_clip(str(result), 200)}"))
    events.sort(key=lambda e: e[0])
    trace = _clip("\n".join(e for _, e in events), limit) if events else "(nothing: this was the last step)"
    ep = store.episode(episode_id)
    meta = (_loads(ep.meta) if ep is not None else None) or {}
    graded = ""
    if meta.get("correct") is not None or meta.get("score") is not None:
        graded = f"; graded correct={meta.get('correct')} score={meta.get('score')}"
    status, answer = (ep.status, ep.answer) if ep is not None else (None, None)
    outcome = f"status {status}{graded}; final answer: {_clip(str(answer or ''), 300)!r}"
    return trace, outcome


def judge_messages(rec: Any, trace: str, outcome: str, *, context_chars: int = 1400) -> list[Message]:
    """The judge's prompt for one decision record (a :class:`DecisionRecord`)."""
    shown = [m for m in rec.messages if m.get("role") != "system"] or list(rec.messages)
    context = _clip("\n\n".join(f"[{m['role']}] {m['content']}" for m in shown), context_chars)
    body = render("opod_judge_input", context=context, decision=_clip(rec.output, 700), trace=trace, outcome=outcome)
    return [msg("system", render("opod_judge")), msg("user", body)]


async def judge_records(records: Sequence[Any], *, pool: Pool, store: TraceStore, judge: str | None = None,
                        log: Log | None = None, evidence: Mapping[str, str] | None = None) -> list[Judgment]:
    """One judgment per record; bad or failed judge output counts as ``needs_repair: false``.
    ``evidence``: per episode id, hindsight from other episodes of its task, shown with the outcome."""
    model = judge or pool.synthesizer
    pool.spec(model)  # fail early, naming the pool's models
    schema = Verdict.model_json_schema()
    done = 0

    async def one(rec: Any) -> Judgment:
        nonlocal done
        trace, outcome = followup(store, rec.episode_id, rec.seq)
        note = (evidence or {}).get(rec.episode_id, "")
        if note:
            outcome += f"\nHindsight from other episodes of the same task: {note}"
        raw, error, verdict = "", None, Verdict(needs_repair=False)
        try:
            completion = await pool.complete(model, judge_messages(rec, trace, outcome),
                                             replace(JUDGE_CONFIG, json_schema=schema))
            raw = completion.text
            verdict = parse_as(Verdict, raw)
        except ValueError as exc:
            error = f"unparseable judge output: {exc}"
        except ModelError as exc:
            error = f"judge call failed: {exc}"
        hint = verdict.hint.strip()
        done += 1
        if log is not None:
            log(f"judged {done}/{len(records)}: {'repair' if verdict.needs_repair and hint else 'ok'}")
        return Judgment(rec.decision_id, rec.episode_id, verdict.needs_repair and bool(hint), hint, raw, error, note)

    return list(await asyncio.gather(*(one(r) for r in records)))
