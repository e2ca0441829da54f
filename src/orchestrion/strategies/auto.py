"""``auto``: learned meta-orchestration. For a new task, pick the strategy and model to run
from scored past episodes of similar tasks in the trace store, then run it.

An *arm* is a strategy, optionally on one pool model: ``direct:qwen2.5-coder-1.5b``,
``cot:smollm2-135m``, ``program``, ``para``. History is every finished, scored episode whose
task is on the ``@train`` side of the split (option ``history_split``): the filter runs in the
database, so no ``@test`` episode is ever read. An episode's arm is its strategy and the model
it answered on (``meta.result.model``, for strategies that take a ``model`` option), or, for an
``auto`` episode, the arm it ran.

Choice (pure, in :func:`choose_arm`):

1. past task prompts are ranked by similarity to the new one (TF-IDF cosine over the words
   at least two past prompts share, numbers as one token, :func:`orchestrion.tools.nearest`:
   the words of one list to sort say nothing about the kind of task); those under ``relative_similarity`` times the
   nearest one's similarity are no neighbours (a task of another kind). Each arm is judged on
   the ``k`` nearest neighbours that *it* ran, so arms tried on different past tasks are each
   judged on their most similar ones;
2. history is thin when there are no neighbours, or a candidate arm has fewer than
   ``min_trials`` neighbours: then ``auto`` explores, running the least-tried candidate (ties:
   the candidates' order, whose first is ``direct`` on the orchestrator);
3. otherwise each arm is scored on its neighbours (one mean score per past prompt, so a prompt
   tried twice counts once): its mean, a standard error, its mean compute units per episode, and a
   *pulled* mean, shrunk towards the arm's mean over all history by ``prior_weight`` pseudo
   episodes, so that a weak arm that was lucky on a few neighbours does not look strong. The best
   arm has the highest pulled mean. An arm is *as good as the best* when its pulled mean is below
   the best's by at most one standard error of the difference (``hypot`` of the two errors), and,
   on the neighbours both ran, its mean difference from the best is not below minus one standard
   error of that paired difference (arms that agree example by example have a small paired error;
   an arm that loses examples the best wins has not). The cheapest arm that is as good as the best
   is chosen (ties: the candidates' order).
4. with ``safe_z`` set, the first candidate (``direct`` on the orchestrator) is a guarded baseline:
   an arm replaces it only when its paired difference from it is ``safe_z`` standard errors above
   zero, or zero on every example and the arm is cheaper (a tie buys nothing at a higher cost);
   with no arm left, the baseline runs. The guard pairs them on *every* neighbour both ran, not
   only the ``k`` nearest: the ``k`` nearest tell arms apart within a kind of task (three or five
   objects to order), while replacing the strongest model must hold over the whole kind. A gap
   inside the noise of a few dozen past examples can turn around on new ones, and this guard
   trades some of the mean for never paying that.

The defaults (``k`` = 12, ``prior_weight`` = 6, ``relative_similarity`` = 0.5) were chosen by a
leave-one-out over the local pool's ``@train`` history (``bench/auto_loo.py``): an arm needs more
than a few lucky neighbours to beat its record elsewhere, and a tighter similarity cutoff leaves
some prompts too few neighbours per arm to tell the arms apart. ``safe_z`` = 2 gives up some of
that leave-one-out's mean on purpose: the promise is a floor per kind of task, so only gaps that
hold over the whole kind replace the strongest model. The measurements behind these choices are
on the handbook's local-pool results page (docs/results/local-pool.md).

The choice, the reason, the neighbours and every arm's numbers are written on the episode (event
``auto_choice``, and ``meta.result.auto``), so ``orchestrion trace show`` explains it. This gives
``router`` (models only, ``direct`` only) and ``uno``'s solve-or-decompose choice their intended
behaviour, learned from outcomes.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import Field, field_validator

from .._errors import ConfigError
from ..models.pool import Pool
from ..runtime.context import RunContext
from ..runtime.options import StrategyOptions, as_options, validate_options
from ..tools import nearest
from .base import _REGISTRY, Answer, Strategy, Task, register

MODEL_ARMS = ("direct", "cot", "program")  # strategies whose arm names a model (their ``model`` option)


class ScoredRow(Protocol):
    """What auto reads of a past episode (the trace store's episode row; strategies do not import
    the trace package)."""

    @property
    def id(self) -> str: ...
    @property
    def strategy(self) -> str: ...
    @property
    def cost_units(self) -> float: ...
    def task_value(self) -> Any: ...
    def meta_value(self) -> Any: ...


@dataclass(frozen=True)
class Outcome:
    """One scored past episode: its task prompt, arm, score and compute units."""

    prompt: str
    arm: str
    score: float
    cost_units: float


@dataclass
class ArmStats:
    """An arm's record on the neighbours: episodes, mean score, standard error, mean cost units."""

    n: int
    mean: float
    se: float
    cost_units: float
    pulled: float  # the mean shrunk towards the arm's mean over all history
    vs_best: tuple[float, float] = (0.0, 0.0)  # paired mean difference from the best arm, and its se

    def as_dict(self) -> dict[str, float | None]:
        diff, se = self.vs_best  # se is infinite when the two arms share no neighbour: written as null
        return {"n": self.n, "mean": round(self.mean, 4), "se": round(self.se, 4),
                "cost_units": round(self.cost_units, 4), "pulled": round(self.pulled, 4),
                "vs_best": round(diff, 4), "vs_best_se": round(se, 4) if math.isfinite(se) else None}


@dataclass
class AutoChoice:
    """The arm chosen and why."""

    arm: str
    reason: str
    exploring: bool
    stats: dict[str, ArmStats] = field(default_factory=dict)
    neighbours: list[tuple[str, float]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "reason": self.reason, "exploring": self.exploring,
                "arms": {a: s.as_dict() for a, s in self.stats.items()},
                "neighbours": [{"prompt": p[:160], "similarity": round(s, 4)} for p, s in self.neighbours]}


def _stats(per_prompt: Mapping[str, float], costs: list[float], overall: float, prior_weight: float) -> ArmStats:
    scores = list(per_prompt.values())
    n = len(scores)
    smoothed = (sum(scores) + 0.5) / (n + 1)  # never a zero error from a few equal scores
    pulled = (sum(scores) + prior_weight * overall) / (n + prior_weight)
    return ArmStats(n, sum(scores) / n, math.sqrt(smoothed * (1 - smoothed) / n), sum(costs) / len(costs), pulled)


def paired_difference(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[float, float, int]:
    """Mean of ``a - b`` over the prompts both scored, the standard error of that mean, and how many."""
    common = [p for p in a if p in b]
    n = len(common)
    if n == 0:
        return 0.0, math.inf, 0
    d = [a[p] - b[p] for p in common]
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n), n


def _ranked(query: str, history: Sequence[Outcome], candidates: Sequence[str],
            relative_similarity: float) -> list[tuple[str, float]]:
    """Every past prompt a candidate ran that is a neighbour of ``query``, most similar first."""
    prompts = list(dict.fromkeys(h.prompt for h in history if h.arm in candidates))
    found = nearest(query, prompts, len(prompts), min_df=2)  # the kind of task, not its particular words
    return [(prompts[i], s) for i, s in found if s >= relative_similarity * found[0][1]]


def choose_arm(query: str, history: Sequence[Outcome], candidates: Sequence[str], *, k: int = 12,
               min_trials: int = 2, explore: bool = True, relative_similarity: float = 0.5,
               prior_weight: float = 6.0, safe_z: float | None = 2.0) -> AutoChoice:
    """Pick the arm for ``query`` (see the module doc); ``candidates`` in preference order, the first
    the baseline that ``safe_z`` guards."""
    ranked = _ranked(query, history, candidates, relative_similarity)
    ran: dict[str, dict[str, list[Outcome]]] = {}  # arm -> prompt -> its episodes
    overall: dict[str, list[float]] = {}
    for h in history:
        if h.arm in candidates:
            overall.setdefault(h.arm, []).append(h.score)
            ran.setdefault(h.arm, {}).setdefault(h.prompt, []).append(h)
    per_prompt: dict[str, dict[str, float]] = {}
    everywhere: dict[str, dict[str, float]] = {}  # each arm on every neighbour it ran: what safe_z judges on
    costs: dict[str, list[float]] = {}
    for a, by in ran.items():  # each arm on the k nearest prompts that it ran
        mine = [p for p, _ in ranked if p in by]
        if mine:
            everywhere[a] = {p: sum(o.score for o in by[p]) / len(by[p]) for p in mine}
            per_prompt[a] = {p: everywhere[a][p] for p in mine[:k]}
            costs[a] = [o.cost_units for p in mine[:k] for o in by[p]]
    used = {p for scores in per_prompt.values() for p in scores}
    neighbours = [(p, sim) for p, sim in ranked if p in used]
    stats = {a: _stats(per_prompt[a], costs[a], sum(overall[a]) / len(overall[a]), prior_weight)
             for a in candidates if a in per_prompt}
    if not neighbours:
        tried = {a: len(overall.get(a, [])) for a in candidates}
        arm = min(candidates, key=lambda a: (tried[a], candidates.index(a)))
        why = "no history at all" if not history else "no similar past task"
        return AutoChoice(arm, f"exploring: {why}; running the least-tried arm", True, stats, neighbours)
    thin = [a for a in candidates if (stats[a].n if a in stats else 0) < min_trials]
    if explore and thin:
        arm = min(thin, key=lambda a: (stats[a].n if a in stats else 0, candidates.index(a)))
        return AutoChoice(arm, f"exploring: {len(thin)} arm(s) ran fewer than {min_trials} of the "
                               f"{len(neighbours)} similar past tasks", True, stats, neighbours)
    top = max(stats, key=lambda a: (stats[a].pulled, -candidates.index(a)))
    best = stats[top]
    for a, st in stats.items():
        st.vs_best = paired_difference(per_prompt[a], per_prompt[top])[:2] if a != top else (0.0, 0.0)
    good = [a for a, st in stats.items() if a == top or (
        st.pulled >= best.pulled - math.hypot(st.se, best.se) and st.vs_best[0] >= -st.vs_best[1])]
    guarded = ""
    if safe_z is not None:
        good, guarded = _safe(good, candidates[0], everywhere, safe_z,
                              {a: st.cost_units for a, st in stats.items()})
    reason = (f"best on the {len(neighbours)} nearest past tasks: {top} (mean {best.mean:.2f} ± {best.se:.2f} "
              f"over {best.n}, pulled to {best.pulled:.2f} by its record elsewhere)")
    if not good:  # the guard left none: the baseline runs
        return AutoChoice(candidates[0], reason + guarded, False, stats, neighbours)
    reason += "; "
    arm = min(good, key=lambda a: (stats[a].cost_units, candidates.index(a)))
    chosen = stats[arm]
    reason += (f"{arm} is the cheapest as good as it (mean {chosen.mean:.2f}, {chosen.vs_best[0]:+.2f} ± "
               f"{chosen.vs_best[1]:.2f} against it example by example, {chosen.cost_units:.2f} compute units "
               f"per episode)" if arm != top else
               f"no cheaper arm is as good ({best.cost_units:.2f} compute units per episode)")
    return AutoChoice(arm, reason + guarded, False, stats, neighbours)


def _safe(good: list[str], baseline: str, per_prompt: Mapping[str, Mapping[str, float]],
          z: float, cost: Mapping[str, float]) -> tuple[list[str], str]:
    """The arms of ``good`` that may replace ``baseline``: those whose paired difference from it, on
    the neighbours both ran, is at least ``z`` standard errors above zero, and those that tie it on
    every one of them at a lower cost (``cost``: compute units per episode). With none left the
    baseline runs. Returns them and a note for the reason."""
    if baseline not in per_prompt:
        return good, "; the baseline has no neighbours to guard with"
    kept, dropped = [], []
    for a in good:
        if a == baseline:
            kept.append(a)
            continue
        diff, se, _ = paired_difference(per_prompt[a], per_prompt[baseline])
        tie = abs(diff) < 1e-12 and se < 1e-12
        if (diff > 1e-12 and diff - z * se >= -1e-12) or (tie and cost[a] < cost[baseline]):
            kept.append(a)
        elif tie:
            dropped.append(f"{a} ties it at more compute")
        else:
            dropped.append(f"{a} {diff:+.2f} ± {se:.2f}")
    if not dropped:
        return kept, ""
    return kept, (f"; not clear of {baseline} by {z:g} se (paired): {', '.join(dropped)}"
                  + ("" if kept else f", so {baseline} runs"))


def parse_outcomes(rows: Iterable[ScoredRow]) -> list[Outcome]:
    """Scored outcomes from episode rows (task prompt, ``meta.score``, the arm they ran)."""
    out: list[Outcome] = []
    for row in rows:
        task, meta = row.task_value(), row.meta_value()
        if not isinstance(task, dict) or not isinstance(meta, dict):
            continue
        nested = meta.get("result")
        result: Mapping[str, Any] = nested if isinstance(nested, dict) else {}
        score = meta.get("score")
        prompt = task.get("prompt")
        arm = arm_of(row.strategy, result)
        if arm and isinstance(prompt, str) and isinstance(score, (int, float)) and not isinstance(score, bool) \
                and math.isfinite(score):
            out.append(Outcome(prompt, arm, float(score), float(row.cost_units or 0.0)))
    return out


def arm_of(strategy: str, result: Mapping[str, Any]) -> str | None:
    """The arm an episode ran: ``auto``'s recorded arm; a model-taking strategy with its model."""
    if strategy == Auto.name:
        arm = result.get("arm")
        return arm if isinstance(arm, str) else None
    model = result.get("model")
    if strategy in MODEL_ARMS and isinstance(model, str) and model:
        return f"{strategy}:{model}"
    return strategy or None


def default_arms(pool: Pool) -> list[str]:
    """``direct`` on the orchestrator, ``program``, ``para``, ``cot`` on the orchestrator, then
    ``direct`` on every other pool model."""
    head = pool.orchestrator
    return [f"direct:{head}", f"program:{pool.executor}", "para", f"cot:{head}",
            *(f"direct:{m}" for m in pool.names if m != head)]


def _usable() -> list[str]:
    """The strategies an arm may run: every registered one but ``auto`` and ``router`` (which choose themselves)."""
    return sorted(n for n in _REGISTRY if n not in (Auto.name, "router"))


@register
class Auto(Strategy):
    name = "auto"
    summary = "learned meta-orchestration: runs the strategy and model that scored best on similar past tasks"
    paper = "AdaptOrch's per-task topology choice and ToolOrchestra/ParaManager's outcome-driven delegation"

    class Options(StrategyOptions):
        arms: list[str] | None = Field(
            default=None, min_length=1,
            description="candidate arms, 'strategy' or 'strategy:model', in preference order (at least 1; "
                        "default: direct, program and cot on the pool's models, and para)")
        k: int = Field(default=12, ge=1, description="nearest past task prompts whose episodes are compared")
        relative_similarity: float = Field(
            default=0.5, ge=0, le=1, description="a past prompt less similar than this times the nearest one's "
                                                 "similarity is no neighbour")
        min_trials: int = Field(default=2, ge=1, description="episodes an arm needs on the neighbours before "
                                                             "auto stops exploring it")
        prior_weight: float = Field(
            default=6.0, ge=0, description="pseudo episodes at an arm's mean over all history that its mean on "
                                           "the neighbours is pulled towards (0: no pull)")
        safe_z: float | None = Field(
            default=2.0, ge=0, description="guard the first arm (direct on the orchestrator): another arm runs "
                                           "only when, paired on every neighbour both ran, it beats it by this "
                                           "many standard errors, or ties it on every one and is cheaper "
                                           "(null: no guard)")
        explore: bool = Field(default=True, description="run an arm that has too little history (else choose "
                                                        "among the arms that have some)")
        history_split: Literal["train", "test"] | None = Field(
            default="train", description="learn only from episodes whose task is on this side of the split "
                                         "(train or test; null or none = every scored episode)")
        history_limit: int = Field(default=20000, ge=1, description="most recent scored episodes read")
        arm_options: dict[str, dict[str, Any]] = Field(
            default_factory=dict, description="options per arm strategy, e.g. {para: {max_rounds: 4}}")

        @field_validator("history_split", mode="before")
        @classmethod
        def _none_is_null(cls, value: Any) -> Any:
            """``none`` (``--set history_split=none``, as this option's help says) is null."""
            return None if isinstance(value, str) and value.strip().lower() in ("none", "null") else value

    @classmethod
    def check_options(cls, options: StrategyOptions, pool: Pool) -> None:
        """Every arm names a usable strategy (and a pool model where it takes one), ``arm_options``
        names strategies an arm runs, and each arm's options are valid for its strategy and pool."""
        super().check_options(options, pool)
        opts = as_options(cls.Options, options, where="strategy 'auto'")
        candidates = opts.arms or default_arms(pool)
        twice = sorted({a for a in candidates if candidates.count(a) > 1})
        if twice:
            raise ConfigError(f"auto: arms {', '.join(twice)} are listed more than once")
        running = {arm.partition(":")[0] for arm in candidates}
        for name in opts.arm_options:
            if name not in running:
                raise ConfigError(f"auto: arm_options names '{name}', which no arm runs; "
                                  f"the arms run {', '.join(sorted(running))}")
        for arm in candidates:
            strategy, _, model = arm.partition(":")
            _check_arm(arm)
            settings = _arm_settings(opts, strategy, model)
            try:
                _REGISTRY[strategy].check_options(settings, pool)
            except ConfigError as exc:
                raise ConfigError(f"auto: arm '{arm}': {exc}") from None

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        candidates = opts.arms or default_arms(ctx.pool)  # checked before the episode (check_options)
        rows = await asyncio.to_thread(ctx.tracer.store.scored_history, opts.history_limit, opts.history_split)
        history = parse_outcomes(r for r in rows if r.id != ctx.tracer.episode_id)
        choice = choose_arm(task.prompt, history, candidates, k=opts.k, min_trials=opts.min_trials,
                            explore=opts.explore, relative_similarity=opts.relative_similarity,
                            prior_weight=opts.prior_weight, safe_z=opts.safe_z)
        ctx.tracer.event("auto_choice", {**choice.as_dict(), "history": len(history)})
        strategy, _, model = choice.arm.partition(":")
        child = ctx.with_options(_arm_settings(opts, strategy, model))
        answer = await _REGISTRY[strategy]().solve(task, child)
        meta = {**answer.meta, "arm": choice.arm, "auto": {k: v for k, v in choice.as_dict().items() if k != "arm"}}
        return Answer(answer.text, status=answer.status, meta=meta)


def _check_arm(arm: str) -> None:
    """``arm`` names a strategy an arm may run, with a model only where that strategy takes one."""
    strategy, _, model = arm.partition(":")
    if strategy not in _usable():
        raise ConfigError(f"auto: arm '{arm}' names no usable strategy; use one of {', '.join(_usable())}")
    if model and "model" not in _REGISTRY[strategy].Options.model_fields:
        raise ConfigError(f"auto: arm '{arm}': strategy '{strategy}' runs on the whole pool; "
                          f"write it without ':{model}'")


def _arm_settings(opts: Auto.Options, strategy: str, model: str) -> StrategyOptions:
    """The options an arm runs with: the shared options set on ``auto``, the arm's ``arm_options``,
    and its model; validated against the arm strategy's ``Options``."""
    shared = opts.model_dump(include=set(StrategyOptions.model_fields), exclude_unset=True)
    values = {**shared, **opts.arm_options.get(strategy, {}), **({"model": model} if model else {})}
    return validate_options(_REGISTRY[strategy].Options, values, where=f"auto: options of arm {strategy}")
