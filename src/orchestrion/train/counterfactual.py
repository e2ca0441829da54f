"""Counterfactual credit (LEMON): edit one field of a spec, run it again, credit the edited span.

For an episode of the ``spec`` strategy, :func:`spec_edits` takes the orchestrator's raw
spec output and makes every edit that changes exactly one field of one agent while
keeping the spec valid:

- ``role``: the agent tool that plays the role (``primitive``) becomes another allowed one;
- ``capacity``: one level up or down (low <-> medium <-> high);
- ``dependency``: one dependency removed, or one other role added (no cycle, at most 4).

An edit replaces only the characters of that value in the raw text, so everything else
(including the model's own formatting) stays as it was. :func:`counterfactuals` re-runs
the episode with the edited output replayed through the ``replay_decisions`` hook (same
task, options and budget; earlier invalid attempts replayed too, so the context is the
same) and records the reward contrast ``original - edited``: positive when the original
choice was better. The original reward is the recorded episode's, so the contrast also
carries the noise of re-executing the agents.

:func:`counterfactual_samples` turns each contrast into a :class:`TrainSample` on the
original decision's exact token ids with ``token_weights`` 1 only on the tokens whose
text overlaps the edited value (the string inside its quotes, or the whole dependency
list), 0 elsewhere. Token positions come from decoding the ids one prefix at a time with
the orchestrator's tokenizer; a token that ends inside a multi-byte character counts as
covering that character.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError
from .._text import locate_json
from ..models.pool import Pool
from ..models.structured import parse_as
from ..models.types import Usage
from ..runtime.budget import Budget
from ..runtime.episode import EpisodeResult, run_episode
from ..runtime.types import Task
from ..status import EpisodeStatus
from ..strategies.registry import get_strategy
from ..strategies.spec import (
    LEVELS,
    OrchestrationSpec,
    available_primitives,
    checked_spec,
)
from ..tools.defaults import default_tools
from ..tools.registry import ToolRegistry
from ..trace.rows import EpisodeRow
from ..trace.store import TraceStore
from ._types import TrainSample
from .rollouts import DecisionAttempt, RewardFn, decision_rows

FIELDS = ("role", "capacity", "dependency")
_FIELD_KEY = {"role": "primitive", "capacity": "capacity", "dependency": "depends_on"}
MAX_DEPS = 4


@dataclass(frozen=True)
class SpecEdit:
    """One changed field of one agent, and where its value sits in the original output."""

    kind: str  # role | capacity | dependency
    role: str  # the agent edited
    field: str  # primitive | capacity | depends_on
    old: Any
    new: Any
    span: tuple[int, int]  # characters [start, end) of the original output holding the edited value
    output: str  # the original output with only that value replaced


@dataclass
class Counterfactual:
    """An edit, re-executed: the two rewards and the edited episode."""

    episode_id: str
    decision_id: str
    edit: SpecEdit
    original_reward: float
    edited_reward: float
    edited: EpisodeResult
    applied: bool  # the re-executed episode ran the edited spec

    @property
    def contrast(self) -> float:
        return self.original_reward - self.edited_reward


def spec_edits(output: str, primitives: Sequence[str], fields: Sequence[str] = FIELDS) -> list[SpecEdit]:
    """Every single-field edit of the spec in ``output`` that keeps it valid, grouped by ``fields`` order."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ConfigError(f"unknown counterfactual field(s) {', '.join(sorted(unknown))}; use {', '.join(FIELDS)}")
    schema = checked_spec(primitives)
    original = OrchestrationSpec.model_validate(parse_as(schema, output).model_dump())
    root = locate_json(output)
    roles = root.get("roles") if root is not None else None
    if roles is None or len(roles.items) != len(original.roles):
        return []
    names = [r.name for r in original.roles]
    edits: list[SpecEdit] = []
    for kind in fields:
        for i, role in enumerate(original.roles):
            node = roles.items[i].get(_FIELD_KEY[kind])
            if node is None:  # the field was left to its default: no text to edit or credit
                continue
            if kind == "dependency":
                deps = list(role.depends_on)
                options = [[d for d in deps if d != gone] for gone in deps]
                if len(deps) < MAX_DEPS:
                    options += [[*deps, n] for n in names if n != role.name and n not in deps]
                span, texts = (node.start, node.end), [json.dumps(o) for o in options]
                news: list[Any] = options
            else:
                current = getattr(role, _FIELD_KEY[kind])
                if kind == "role":
                    news = [p for p in primitives if p != current]
                else:
                    at = LEVELS.index(current)
                    news = [LEVELS[j] for j in (at - 1, at + 1) if 0 <= j < len(LEVELS)]
                span, texts = (node.start + 1, node.end - 1), list(news)  # inside the quotes
            for new, text in zip(news, texts):
                edited = output[: span[0]] + text + output[span[1]:]
                expected = original.model_copy(deep=True)
                setattr(expected.roles[i], _FIELD_KEY[kind], new)
                try:
                    got = OrchestrationSpec.model_validate(parse_as(schema, edited).model_dump())
                except ValueError:
                    continue  # e.g. a dependency that closes a cycle
                if got == expected:
                    old = list(role.depends_on) if kind == "dependency" else getattr(role, _FIELD_KEY[kind])
                    edits.append(SpecEdit(kind, role.name, _FIELD_KEY[kind], old, new, span, edited))
    return edits


def _interleave(edits: list[SpecEdit], limit: int | None) -> list[SpecEdit]:
    """Round-robin over edit kinds, so a limit keeps every kind represented."""
    by_kind: dict[str, list[SpecEdit]] = {}
    for e in edits:
        by_kind.setdefault(e.kind, []).append(e)
    out: list[SpecEdit] = []
    queues = list(by_kind.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out if limit is None else out[:limit]


def _recorded(row: EpisodeRow, meta: dict[str, Any]) -> EpisodeResult:
    usage = Usage(input_tokens=row.input_tokens or 0, output_tokens=row.output_tokens or 0,
                  cost_usd=row.cost_usd, cost_units=row.cost_units or 0.0)
    wall = (row.ended or row.started) - row.started
    return EpisodeResult(row.answer or "", EpisodeStatus(row.status), row.strategy, usage, wall, row.id, row.error,
                         meta.get("result") or {})


async def counterfactuals(
    episode_id: str,
    *,
    store: TraceStore,
    pool: Pool,
    reward_fn: RewardFn,
    fields: Sequence[str] = FIELDS,
    tools: ToolRegistry | None = None,
    options: dict[str, Any] | None = None,
    max_edits: int | None = None,
    run_id: str | None = None,
    concurrency: int = 1,
    original_reward: float | None = None,
) -> list[Counterfactual]:
    """Edit the episode's spec one field at a time, re-execute each edit, and contrast the rewards."""
    row = store.episode(episode_id)
    if row is None:
        raise ConfigError(f"episode {episode_id} is not in the trace store; check the id and --db")
    if row.strategy != "spec":
        raise ConfigError(f"episode {episode_id} used strategy '{row.strategy}'; counterfactual edits need 'spec'")
    meta = json.loads(row.meta or "{}")
    rows = [r for r in decision_rows(store, episode_id)]
    spec_rows = [i for i, r in enumerate(rows) if r.schema_name == "OrchestrationSpec" and r.valid]
    if not spec_rows:
        raise ConfigError(f"episode {episode_id} has no valid orchestration spec to edit")
    at = spec_rows[0]
    the_tools = tools or default_tools()
    edits = _interleave(spec_edits(rows[at].output, available_primitives(the_tools), fields), max_edits)
    task = Task.model_validate(json.loads(row.task))
    base = original_reward if original_reward is not None else float(await reward_fn(_recorded(row, meta), task))
    opts = {**(meta.get("options") or {}), **(options or {})}
    budget = Budget.model_validate(meta["budget"]) if meta.get("budget") else None
    prefix = [r.output for r in rows[:at]]
    gate = asyncio.Semaphore(max(1, concurrency))

    async def run(edit: SpecEdit) -> Counterfactual:
        async with gate:
            res = await run_episode(task, get_strategy("spec"), pool=pool, tools=the_tools, store=store, budget=budget,
                                    options={**opts, "replay_decisions": [*prefix, edit.output]}, run_id=run_id)
            reward = float(await reward_fn(res, task))
        ran = res.meta.get("spec")
        applied = ran is not None and OrchestrationSpec.model_validate(ran) == OrchestrationSpec.model_validate(
            parse_as(OrchestrationSpec, edit.output).model_dump())
        return Counterfactual(episode_id, rows[at].id, edit, base, reward, res, applied)

    return list(await asyncio.gather(*(run(e) for e in edits)))


Decode = Callable[[list[int]], str]


def _decoder(tokenizer: Any) -> Decode:
    if tokenizer is None:
        from .hf import load_tokenizer

        tokenizer = load_tokenizer()
    if hasattr(tokenizer, "convert_ids_to_tokens"):  # Hugging Face: decode the ids exactly as they are
        return lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    if hasattr(tokenizer, "decode"):
        return lambda ids: str(tokenizer.decode(ids))
    if callable(tokenizer):
        return lambda ids: str(tokenizer(ids))
    raise ConfigError("tokenizer must have decode(ids) or be a function from token ids to text")


def token_char_spans(token_ids: Sequence[int], decode: Decode) -> list[tuple[int, int]]:
    """The characters [start, end) each token adds to the decoded text, by decoding one prefix at a time.

    A token that stops inside a multi-byte character (the prefix ends in U+FFFD) covers that character.
    """
    spans: list[tuple[int, int]] = []
    stable = 0
    for i in range(len(token_ids)):
        text = decode(list(token_ids[: i + 1]))
        if text.endswith("\ufffd") and i + 1 < len(token_ids):
            end = len(text.rstrip("\ufffd"))
            spans.append((stable, max(end, stable) + 1))
            stable = max(end, stable)
        else:
            spans.append((stable, len(text)))
            stable = len(text)
    return spans


def span_weights(spans: Sequence[tuple[int, int]], target: tuple[int, int]) -> list[float]:
    """1.0 for each token whose characters overlap ``target``, else 0.0."""
    return [1.0 if s < target[1] and e > target[0] else 0.0 for s, e in spans]


def counterfactual_samples(cfs: Sequence[Counterfactual], store: TraceStore,
                           tokenizer: Any = None) -> list[TrainSample]:
    """One sample per applied edit: advantage = contrast, weights only on the edited value's tokens.

    Edits whose decision has no token ids (scripted models) give no sample.
    """
    decode: Decode | None = None
    rows: dict[str, DecisionAttempt] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    samples = []
    for cf in cfs:
        if not cf.applied:
            continue
        if cf.decision_id not in rows:
            rows.update((r.id, r) for r in decision_rows(store, cf.episode_id))
        row = rows[cf.decision_id]
        if not row.token_ids or row.prompt_token_ids is None:
            continue
        if cf.decision_id not in spans:
            decode = decode or _decoder(tokenizer)
            if decode(list(row.token_ids)) != row.output:
                raise ConfigError(f"decision {cf.decision_id}: its token ids do not decode to the stored output; "
                                  "pass the orchestrator's tokenizer")
            spans[cf.decision_id] = token_char_spans(row.token_ids, decode)
        weights = span_weights(spans[cf.decision_id], cf.edit.span)
        if not any(weights):
            continue
        logprobs = row.logprobs
        samples.append(TrainSample(
            prompt_ids=list(row.prompt_token_ids), completion_ids=list(row.token_ids), advantage=cf.contrast,
            reward=cf.original_reward, token_weights=weights,
            old_logprobs=list(logprobs) if logprobs and len(logprobs) == len(row.token_ids) else None,
            episode_id=cf.episode_id, decision_id=cf.decision_id,
            meta={"kind": "counterfactual", "edit": cf.edit.kind, "role": cf.edit.role, "field": cf.edit.field,
                  "old": cf.edit.old, "new": cf.edit.new, "edited_reward": cf.edited_reward,
                  "edited_episode": cf.edited.trace_id},
        ))
    return samples
