"""Decision records: every stored orchestrator decision attempt, joined with its episode's outcome.

A decision is one model call that had to produce a schema-valid action
(:meth:`orchestrion.runtime.context.RunContext.decide`). Every attempt is a row of
the ``decisions`` table; attempts of one decision share its span (``span_id``), and
``seq`` numbers attempts in the order they were made within the episode.
:func:`load_records` reads them back with the episode's status and score, and
:func:`filter_records` picks the ones worth training on (ParaManager's SFT data:
successful trajectories, recoverable-error trajectories kept, no tool dominating).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..runtime.types import EpisodeStatus
from ..status import ended_badly
from ..trace.rows import EpisodeRow, SpanRow
from ..trace.store import TraceStore


@dataclass
class DecisionRecord:
    """One orchestrator decision attempt with the context it saw and how its episode ended."""

    decision_id: str
    episode_id: str
    run_id: str | None
    task_id: str | None
    strategy: str
    seq: int
    attempt: int
    model: str
    schema_name: str
    messages: list[dict[str, str]]
    output: str
    prompt_token_ids: list[int] | None
    token_ids: list[int] | None
    logprobs: list[float] | None
    action: dict[str, Any] | None
    error: str | None
    valid: bool
    episode_status: str
    score: float | None
    correct: bool | None
    repaired: bool
    tools_used: list[str] = field(default_factory=list)
    span_id: str | None = None
    epoch: int = 0
    task_prompt: str = ""
    task_answer: str | None = None
    dataset: str | None = None
    episode_tool_failures: int = 0  # tool/agent calls of the episode that did not end ok
    replayed: bool = False  # copied from an earlier episode by a tree/counterfactual rollout, not sampled
    evidence_correct: bool | None = None  # a tool/agent result of the episode, scored as the answer, was correct
    label: str | None = None  # the episode's annotation label (meta.annotation.label, e.g. set in the viewer)

    @property
    def grounded(self) -> bool:
        """Its episode's answer rests on a result of its own trajectory: the episode succeeded and
        some tool or agent result of it was itself a correct answer (eval's grounding measure,
        ``evidence_correct`` in the episode meta; not computed for code tasks)."""
        return self.evidence_correct is True and self.successful

    @property
    def successful(self) -> bool:
        """Its episode succeeded: ``correct`` is true, or it ended ok with a score of at least 0.5."""
        if self.correct is not None:
            return self.correct
        return self.episode_status == EpisodeStatus.OK and self.score is not None and self.score >= 0.5


def _json(value: Any) -> Any:
    if value is None or value == "":
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


def _episodes(store: TraceStore, run_id: str | None, episode_ids: Sequence[str] | None) -> list[EpisodeRow]:
    return store.episodes(run_id=run_id, ids=episode_ids)


def _action_tools(action: Any) -> list[str]:
    """Tool names an action names: ``tool`` fields, ``tools``/``add_tools`` lists, uno/spec ``primitive``."""
    from ..strategies.uno import PRIMITIVE_TOOLS

    found: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "tool" and isinstance(value, str) and value:
                    found.append(value)
                elif key in ("tools", "add_tools") and isinstance(value, list):
                    found.extend(v for v in value if isinstance(v, str) and v)
                elif key == "primitive" and isinstance(value, str) and value:
                    found.append(PRIMITIVE_TOOLS.get(value, value))
                else:
                    visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(action)
    return found


def _span_tools(spans: list[SpanRow]) -> dict[str, list[str]]:
    """For each decision span: tools called under it, or right after it under the same parent
    (a para round: its calls run next to the decision, before the next decision starts)."""
    by_parent: dict[str | None, list[SpanRow]] = defaultdict(list)
    for s in spans:
        by_parent[s.parent_id].append(s)
    out: dict[str, list[str]] = {}
    for siblings in by_parent.values():
        siblings.sort(key=lambda s: (s.started or 0.0))
        for i, s in enumerate(siblings):
            if s.kind != "decision":
                continue
            names = [_tool_name(c) for c in by_parent.get(s.id, []) if c.kind in ("tool", "agent")]
            for later in siblings[i + 1:]:
                if later.kind == "decision":
                    break
                if later.kind in ("tool", "agent"):
                    names.append(_tool_name(later))
            out[s.id] = [n for n in names if n]
    return out


def _tool_name(span: SpanRow) -> str:
    attrs = _json(span.attrs) or {}
    name = attrs.get("tool") if isinstance(attrs, dict) else None
    return str(name or span.name or "")


def _replayed_attempts(span: SpanRow) -> list[int]:
    attrs = _json(span.attrs)
    found = attrs.get("replayed_attempts") if isinstance(attrs, dict) else None
    return [int(a) for a in found] if isinstance(found, list) else []


def _dedupe(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def load_records(
    store: TraceStore, *, run_id: str | None = None, episode_ids: list[str] | None = None
) -> list[DecisionRecord]:
    """Every decision attempt of the selected episodes (a run, a list of ids, or the whole store),
    in episode order then attempt order. Episodes still running are left out."""
    records: list[DecisionRecord] = []
    for ep in _episodes(store, run_id, episode_ids):
        if not ep.finished:
            continue
        records.extend(_episode_records(store, ep))
    return records


def _episode_records(store: TraceStore, ep: EpisodeRow) -> list[DecisionRecord]:
    rows = store.decisions(ep.id)
    if not rows:
        return []
    spans = store.spans(ep.id, kinds=("decision", "tool", "agent"))
    span_tools = _span_tools(spans)
    replayed = {s.id: set(_replayed_attempts(s)) for s in spans if s.kind == "decision"}
    failures = sum(1 for s in spans if s.kind in ("tool", "agent") and ended_badly(s.status))
    meta = _json(ep.meta) or {}
    task = _json(ep.task) or {}
    score = meta.get("score")
    correct = meta.get("correct")
    evidence = meta.get("evidence_correct")
    annotation = meta.get("annotation")
    label = annotation.get("label") if isinstance(annotation, dict) else None
    ended_valid: dict[str, bool] = defaultdict(bool)
    had_invalid: dict[str, bool] = defaultdict(bool)
    for r in rows:
        ended_valid[r.span_id] |= bool(r.valid)
        had_invalid[r.span_id] |= not r.valid
    out: list[DecisionRecord] = []
    for r in rows:
        action = _json(r.action)
        sid = r.span_id
        tools = _action_tools(action) if r.valid else []
        if r.valid:
            tools += span_tools.get(sid, [])
        out.append(DecisionRecord(
            decision_id=r.id, episode_id=ep.id, run_id=ep.run_id, task_id=ep.task_id,
            strategy=ep.strategy or "", seq=int(r.seq), attempt=int(r.attempt or 0),
            model=r.model or "", schema_name=r.schema_name or "",
            messages=_json(r.messages) or [], output=r.output or "",
            prompt_token_ids=_json(r.prompt_token_ids), token_ids=_json(r.token_ids),
            logprobs=_json(r.logprobs), action=action if isinstance(action, dict) else None,
            error=r.error, valid=bool(r.valid), episode_status=ep.status or "",
            score=float(score) if isinstance(score, (int, float)) else None,
            correct=bool(correct) if isinstance(correct, bool) else None,
            repaired=ended_valid[sid] and had_invalid[sid],
            tools_used=_dedupe(tools), span_id=sid, epoch=int(ep.epoch or 0),
            task_prompt=str(task.get("prompt") or ""),
            task_answer=task.get("answer") if isinstance(task.get("answer"), str) else None,
            dataset=(task.get("metadata") or {}).get("dataset") if isinstance(task.get("metadata"), dict) else None,
            episode_tool_failures=failures, replayed=int(r.attempt or 0) in replayed.get(sid, set()),
            evidence_correct=evidence if isinstance(evidence, bool) else None,
            label=label if isinstance(label, str) else None,
        ))
    return out


@dataclass
class RecordFilter:
    """Which decision records to train on.

    ``successful_only``: episodes with ``correct`` true (or status ok and score >= 0.5).
    ``keep_recoverable``: keep trajectories that hit an invalid action or a failed tool call
    and still went on (ParaManager keeps these so the model learns to repair); when false
    such episodes are dropped whole. ``max_tool_share``: no single tool appears in more
    than this share of the kept records (records are dropped, latest first, until it holds).
    ``dedupe``: identical (messages, output) pairs are kept once. ``one_per_task``: at most one
    episode per task (the best scored, then the one with fewest invalid attempts, then the
    first). ``valid_only``: only schema-valid outputs (a repair turn is valid, and its context
    shows the error it repairs). ``sampled_only``: leave out decisions that a tree or
    counterfactual rollout replayed from an earlier episode (copies without token ids).
    ``grounded_only``: only episodes whose answer is grounded on a result of their own
    trajectory (:attr:`DecisionRecord.grounded`): a correct answer that no call of the
    episode contributed to teaches the orchestrator calls that did nothing. ``labels``: only
    episodes a person annotated with one of these labels (:meth:`TraceStore.annotate_episode`,
    e.g. from the viewer); empty: no label filter.
    """

    successful_only: bool = True
    keep_recoverable: bool = True
    max_tool_share: float | None = 0.5
    dedupe: bool = True
    one_per_task: bool = False
    valid_only: bool = True
    sampled_only: bool = True
    grounded_only: bool = False
    labels: tuple[str, ...] = ()


def filter_steps(records: Sequence[DecisionRecord], flt: RecordFilter) -> list[tuple[str, list[DecisionRecord]]]:
    """Apply the filters one after another; return ``(step name, records kept)`` after each step."""
    steps: list[tuple[str, list[DecisionRecord]]] = []
    kept = list(records)
    if flt.sampled_only and any(r.replayed for r in kept):
        kept = [r for r in kept if not r.replayed]
        steps.append(("sampled (not replayed) decisions", kept))
    if flt.labels:
        kept = [r for r in kept if r.label in flt.labels]
        steps.append((f"labelled {' or '.join(flt.labels)}", kept))
    if flt.successful_only:
        kept = [r for r in kept if r.successful]
        steps.append(("successful episodes", kept))
    if flt.grounded_only:
        kept = [r for r in kept if r.grounded]
        steps.append(("answer grounded on a result", kept))
    if not flt.keep_recoverable:
        troubled = {r.episode_id for r in kept if not r.valid or r.episode_tool_failures}
        kept = [r for r in kept if r.episode_id not in troubled]
        steps.append(("no invalid action or tool failure", kept))
    if flt.one_per_task:
        kept = _one_per_task(kept)
        steps.append(("one episode per task", kept))
    if flt.valid_only:
        kept = [r for r in kept if r.valid]
        steps.append(("valid outputs", kept))
    if flt.dedupe:
        seen: set[bytes] = set()
        unique = []
        for r in kept:
            key = orjson.dumps([r.messages, r.output])
            if key not in seen:
                seen.add(key)
                unique.append(r)
        kept = unique
        steps.append(("distinct (context, output)", kept))
    if flt.max_tool_share is not None and flt.max_tool_share < 1.0:
        kept = cap_tool_share(kept, flt.max_tool_share)
        steps.append((f"no tool above {flt.max_tool_share:g} of records", kept))
    return steps


def filter_records(records: Sequence[DecisionRecord], flt: RecordFilter) -> list[DecisionRecord]:
    """The records that pass every filter of ``flt``, in their original order."""
    steps = filter_steps(records, flt)
    return steps[-1][1] if steps else list(records)


def _one_per_task(records: list[DecisionRecord]) -> list[DecisionRecord]:
    by_episode: dict[str, list[DecisionRecord]] = defaultdict(list)
    for r in records:
        by_episode[r.episode_id].append(r)
    best: dict[str, tuple[tuple[float, int, int], str]] = {}
    for order, (eid, recs) in enumerate(by_episode.items()):
        head = recs[0]
        task = head.task_id if head.task_id is not None else f"episode:{eid}"
        score = head.score if head.score is not None else (1.0 if head.correct else 0.0)
        rank = (-score, sum(1 for r in recs if not r.valid), order)
        if task not in best or rank < best[task][0]:
            best[task] = (rank, eid)
    chosen = {eid for _, eid in best.values()}
    return [r for r in records if r.episode_id in chosen]


def cap_tool_share(records: list[DecisionRecord], share: float) -> list[DecisionRecord]:
    """Drop records (latest first) until no tool is used by more than ``share`` of those kept.

    Removing ``k`` records that use tool ``t`` turns ``c/n`` into ``(c-k)/(n-k)``, so the
    smallest ``k`` with ``c - k <= share * (n - k)`` is ``ceil((c - share*n) / (1 - share))``.
    """
    if not 0.0 < share < 1.0:
        return list(records) if share >= 1.0 else [r for r in records if not r.tools_used]
    kept = list(records)
    while True:
        n = len(kept)
        counts = Counter(t for r in kept for t in r.tools_used)
        over = [(c, t) for t, c in counts.items() if c > share * n + 1e-9]
        if not over:
            return kept
        count, tool = max(over)
        need = math.ceil((count - share * n) / (1.0 - share) - 1e-9)
        drop: set[int] = set()
        for i in range(n - 1, -1, -1):
            if len(drop) >= need:
                break
            if tool in kept[i].tools_used:
                drop.add(i)
        kept = [r for i, r in enumerate(kept) if i not in drop]
