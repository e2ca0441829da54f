"""Static router (the ``Router`` baseline of ParaManager, after RouteLLM's kNN router).

Per task, one pool model is picked from how the models scored on the most similar
past tasks in the trace store, and the task is answered directly on that model.

History: finished episodes of any strategy whose meta records a numeric ``score``
and the ``model`` that produced the answer. Both keys are read at the top level of
``episodes.meta`` first (where an eval harness writes them) and then under
``meta["result"]`` (where the episode runner stores ``Answer.meta``). Router
episodes write ``meta["model"]`` themselves, so once scored they are history too.

Choice (pure, in :func:`choose_model`):

1. keep history rows whose model is in the pool, group them by task prompt;
2. rank the distinct past prompts by TF-IDF cosine similarity to the new prompt
   (:func:`~orchestrion.tools._ranking.nearest`; numbers count as one token ``<num>``, so tasks of one kind
   match whatever their numbers) and keep the ``k`` nearest with similarity > 0;
3. score each model by the mean, over those neighbours, of its mean score on each;
   models never run on a neighbour are not candidates;
4. pick the best; ties (within 1e-9) go to the cheaper model: known price before
   unknown, then lower input+output price, then lower tier, then pool order.

With history but no similar past prompt, step 3 runs over all past prompts (the
best model overall). With no usable history at all, the answer runs on option
``fallback``, by default the pool's orchestrator: the model the pool's author made
the default, rather than the highest tier, which is the costliest guess.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import Field

from .._prompts import render
from ..models.spec import ModelSpec
from ..models.types import GenerateConfig, msg
from ..runtime.context import RunContext
from ..runtime.options import POOL_MODEL, StrategyOptions
from ..tools import nearest
from .base import Answer, Strategy, Task, register

_TIE = 1e-9


@dataclass(frozen=True)
class Scored:
    """One scored past episode: its task prompt, the model that answered, the score."""

    prompt: str
    model: str
    score: float


@dataclass
class Choice:
    """The routing decision and why it was made."""

    model: str
    reason: str  # "knn", "no_similar_task" or "no_history"
    scores: dict[str, float] = field(default_factory=dict)
    neighbours: list[tuple[str, float]] = field(default_factory=list)


def cheapest_first(specs: Iterable[ModelSpec]) -> list[str]:
    """Model names, cheapest first: known price before unknown, then price, tier, pool order."""
    indexed = list(enumerate(specs))

    def key(item: tuple[int, ModelSpec]) -> tuple[int, float, int, int]:
        i, s = item
        price = math.inf if s.price is None else s.price.input_per_mtok + s.price.output_per_mtok
        return (s.price is None, price, s.tier, i)

    return [s.name for _, s in sorted(indexed, key=key)]


def choose_model(query: str, history: Sequence[Scored], models: Sequence[str], *, k: int = 5,
                 fallback: str) -> Choice:
    """Pick a model for ``query`` from scored history; ``models`` is the pool, cheapest first."""
    allowed = set(models)
    by_task: dict[str, dict[str, list[float]]] = {}
    for h in history:
        if h.model in allowed:
            by_task.setdefault(h.prompt, {}).setdefault(h.model, []).append(h.score)
    if not by_task:
        return Choice(fallback, "no_history")
    prompts = list(by_task)
    found = nearest(query, prompts, k)
    reason = "knn" if found else "no_similar_task"
    picked = found or [(i, 0.0) for i in range(len(prompts))]
    per_model: dict[str, list[float]] = {}
    for i, _ in picked:
        for model, scores in by_task[prompts[i]].items():
            per_model.setdefault(model, []).append(sum(scores) / len(scores))
    means = {m: sum(v) / len(v) for m, v in per_model.items()}
    best = max(means.values())
    chosen = next(m for m in models if m in means and means[m] >= best - _TIE)
    return Choice(chosen, reason, means, [(prompts[i], round(s, 4)) for i, s in found])


class EpisodeText(Protocol):
    """What the router reads of a past episode: its ``task`` and ``meta`` columns as stored (JSON
    text; the trace store's episode row has them, and strategies do not import the trace)."""

    @property
    def task(self) -> str: ...
    @property
    def meta(self) -> str: ...


def parse_history(rows: Iterable[EpisodeText]) -> list[Scored]:
    """Scored episodes from episode rows (``task`` and ``meta`` JSON); others are skipped."""
    out: list[Scored] = []
    for row in rows:
        task, meta = _loads(row.task), _loads(row.meta)
        if not isinstance(task, dict) or not isinstance(meta, dict):
            continue
        nested = meta.get("result")
        result: dict[str, Any] = nested if isinstance(nested, dict) else {}
        score = _number(meta.get("score"))
        if score is None:
            score = _number(result.get("score"))
        model = meta.get("model") or result.get("model")
        prompt = task.get("prompt")
        if score is not None and isinstance(model, str) and model and isinstance(prompt, str) and prompt:
            out.append(Scored(prompt, model, score))
    return out


def _loads(value: Any) -> Any:
    if not isinstance(value, (str, bytes)):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@register
class Router(Strategy):
    name = "router"
    summary = "static kNN router: pick the model that scored best on the most similar past tasks, answer directly"
    paper = "baselines of ParaManager: Small Model as Master Orchestrator"

    class Options(StrategyOptions):
        k: int = Field(default=5, ge=1, description="nearest past prompts the model scores are averaged over")
        fallback: str | None = Field(
            default=None, json_schema_extra=POOL_MODEL,
            description="model used with no usable history (default: the pool's orchestrator)")
        history_limit: int = Field(default=10000, ge=1, description="most recent scored episodes read as history")
        temperature: float | None = Field(
            default=None, ge=0,
            description="sampling temperature of the answer call (default: the agent temperature)")

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        k = opts.k
        fallback = opts.fallback or ctx.pool.orchestrator
        ctx.pool.spec(fallback)
        limit = opts.history_limit
        rows = await asyncio.to_thread(ctx.tracer.store.scored_history, limit)
        history = parse_history(r for r in rows if r.id != ctx.tracer.episode_id)
        choice = choose_model(task.prompt, history, cheapest_first(ctx.pool.specs.values()), k=k, fallback=fallback)
        route = {"model": choice.model, "route": choice.reason, "model_scores": choice.scores,
                 "neighbours": [{"prompt": p[:200], "similarity": s} for p, s in choice.neighbours],
                 "history": len(history)}
        ctx.tracer.event("route", route)
        out = await ctx.generate(
            [msg("user", render("direct", task=task.prompt))],
            model=choice.model,
            config=GenerateConfig(
                max_tokens=opts.max_tokens,
                temperature=ctx.temperature("agent") if opts.temperature is None else opts.temperature,
            ),
            name="answer",
        )
        return Answer(out.text.strip(), meta=route)
