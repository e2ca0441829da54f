"""Group rollouts for GRPO: the same task solved G times, rewards turned into advantages.

``collect_group`` runs ``settings.group`` episodes of one task through :func:`orchestrion.runtime.episode.run_episode`
with the option ``seed`` set to a distinct value per episode (each orchestrator decision
call then samples with its own seed derived from it, see
:func:`orchestrion.runtime.context.decision_seed`) at a temperature above zero, and
scores each with ``reward_fn``. :func:`group_advantages` normalises the rewards within
the group, ``(r - mean) / (std + eps)`` with the population standard deviation; a group
whose rewards are all equal carries no learning signal and gets ``None`` (it is dropped).
:func:`group_samples` then emits one :class:`TrainSample` per orchestrator decision
attempt that has exact token ids (llama.cpp gives them; scripted models do not), each
carrying its episode's advantage, with llama.cpp's log-probs as ``old_logprobs``.

A reward function takes the finished :class:`EpisodeResult` and its :class:`Task`;
:func:`scored_reward` builds one from an evaluation scorer.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._errors import ConfigError
from ..models.pool import Pool
from ..runtime.budget import Budget
from ..runtime.episode import EpisodeResult, run_episode
from ..runtime.types import Task
from ..strategies.registry import as_strategy
from ..tools.registry import ToolRegistry
from ..trace.rows import DecisionSpanRow
from ..trace.store import TraceStore
from ._types import TrainSample
from .settings import RolloutSettings

RewardFn = Callable[[EpisodeResult, Task], Awaitable[float]]
Progress = Callable[[int, int], None]


class _ScoreLike(Protocol):
    @property
    def value(self) -> float: ...


class _ScorerLike(Protocol):
    def __call__(self, task: Task, output: str, /) -> Awaitable[_ScoreLike]: ...


@dataclass
class Group:
    """G episodes of one task, their rewards, and the group-normalised advantages (None: dropped)."""

    task: Task
    episodes: list[EpisodeResult]
    rewards: list[float]
    advantages: list[float] | None

    @property
    def kept(self) -> bool:
        return self.advantages is not None


def group_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float] | None:
    """``(r - mean) / (std + eps)`` over the group; ``None`` when all rewards are equal (or fewer than 2)."""
    if len(rewards) < 2:
        return None
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std <= 1e-12:
        return None
    return [(r - mean) / (std + eps) for r in rewards]


ROLLOUT_TEMPERATURE = 1.0  # decisions of a rollout, unless option decision_temperature says otherwise


def check_sampling(options: dict[str, Any] | None) -> dict[str, Any]:
    """The rollout's options, with decisions sampled: at temperature 0 every episode of a group
    decides the same (the pool's decisions are greedy by default), so a group would carry no signal.
    ``decision_temperature`` defaults to :data:`ROLLOUT_TEMPERATURE`; 0 or below is refused."""
    value = (options or {}).get("decision_temperature")
    if value is not None and float(value) <= 0:
        raise ConfigError(f"option decision_temperature={value}: rollouts need a temperature above 0 "
                          "to sample different decisions")
    return {"decision_temperature": ROLLOUT_TEMPERATURE, **(options or {})}


async def collect_group(
    task: Task,
    settings: RolloutSettings,
    *,
    pool: Pool,
    store: TraceStore,
    reward_fn: RewardFn,
    run_id: str | None = None,
    tools: ToolRegistry | None = None,
    budget: Budget | None = None,
) -> Group:
    """Run ``settings.group`` episodes of ``task`` (seeds ``settings.seed`` onwards), score them, normalise."""
    groups = await collect_groups([task], settings, pool=pool, store=store, reward_fn=reward_fn, run_id=run_id,
                                  tools=tools, budget=budget)
    return groups[0]


async def collect_groups(
    tasks: Sequence[Task],
    settings: RolloutSettings,
    *,
    pool: Pool,
    store: TraceStore,
    reward_fn: RewardFn,
    run_id: str | None = None,
    tools: ToolRegistry | None = None,
    budget: Budget | None = None,
    progress: Progress | None = None,
) -> list[Group]:
    """One group per task, at most ``settings.concurrency`` episodes at once; ``progress(done, total)`` after
    each episode. Task ``j`` uses seeds ``seed + j * group`` onwards, so every episode has its own seed."""
    options = check_sampling(settings.options)
    group, seed = settings.group, settings.seed
    run = _Runner(settings.strategy, pool, store, reward_fn, options, run_id, tools, budget,
                  asyncio.Semaphore(settings.concurrency), progress, len(tasks) * group)
    return list(await asyncio.gather(*(run.group(t, group, seed + j * group) for j, t in enumerate(tasks))))


@dataclass
class _Runner:
    """What every episode of a collection shares: the solve arguments, one concurrency gate, progress."""

    strategy: Any  # a strategy name or a Strategy object
    pool: Pool
    store: TraceStore
    reward_fn: RewardFn
    options: dict[str, Any] | None
    run_id: str | None
    tools: ToolRegistry | None
    budget: Budget | None
    gate: asyncio.Semaphore
    progress: Progress | None = None
    total: int = 0
    done: int = 0

    async def episode(self, task: Task, seed: int, epoch: int) -> tuple[EpisodeResult, float]:
        async with self.gate:
            options = {**(self.options or {}), "seed": seed}
            res = await run_episode(task, as_strategy(self.strategy), pool=self.pool, tools=self.tools,
                                    store=self.store, budget=self.budget, options=options, run_id=self.run_id,
                                    epoch=epoch)
            reward = float(await self.reward_fn(res, task))
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)
        return res, reward

    async def group(self, task: Task, size: int, seed: int) -> Group:
        if size < 1:
            raise ConfigError(f"group={size}: a group needs at least one episode (GRPO uses 2 or more)")
        done = await asyncio.gather(*(self.episode(task, seed + i, i) for i in range(size)))
        rewards = [r for _, r in done]
        return Group(task, [e for e, _ in done], rewards, group_advantages(rewards))


@dataclass(frozen=True)
class DecisionAttempt:
    """One orchestrator decision attempt as training reads it: its stored row with the JSON
    columns decoded, ``valid`` as a bool, and ``replayed``: whether its attempt number is in its
    decision span's ``replayed_attempts`` (replayed text, not sampled by the policy)."""

    id: str
    episode_id: str
    span_id: str
    seq: int
    attempt: int
    model: str | None
    schema_name: str | None
    messages: list[dict[str, Any]] | None
    prompt_token_ids: list[int] | None  # None: the backend gave no token ids
    output: str
    token_ids: list[int] | None
    logprobs: list[float] | None
    action: Any
    error: str | None
    valid: bool
    ts: float
    replayed: bool

    @classmethod
    def of(cls, row: DecisionSpanRow) -> DecisionAttempt:
        replayed = row.attempt in (row.span_attrs_value().get("replayed_attempts") or [])
        return cls(row.id, row.episode_id, row.span_id, row.seq, row.attempt, row.model, row.schema_name,
                   row.messages_value(), row.prompt_token_ids_value(), row.output, row.token_ids_value(),
                   row.logprobs_value(), row.action_value(), row.error, bool(row.valid), row.ts, replayed)


def decision_rows(store: TraceStore, episode_id: str) -> list[DecisionAttempt]:
    """The episode's decision attempts in call order, JSON decoded, each with ``replayed``."""
    return [DecisionAttempt.of(row) for row in store.decisions(episode_id, span_attrs=True)]


def sample_from_row(row: DecisionAttempt, advantage: float, reward: float, **meta: Any) -> TrainSample | None:
    """A sample for one sampled decision attempt with token ids; ``None`` for replayed or id-less ones."""
    if row.replayed or not row.token_ids or row.prompt_token_ids is None:
        return None
    logprobs = row.logprobs
    return TrainSample(
        prompt_ids=list(row.prompt_token_ids), completion_ids=list(row.token_ids), advantage=advantage,
        reward=reward, old_logprobs=list(logprobs) if logprobs and len(logprobs) == len(row.token_ids) else None,
        episode_id=row.episode_id, decision_id=row.id,
        meta={"model": row.model, "schema": row.schema_name, "attempt": row.attempt, "valid": row.valid, **meta},
    )


def group_samples(group: Group, store: TraceStore, *, models: Collection[str] | None = None) -> list[TrainSample]:
    """One sample per decision attempt with token ids, advantage = its episode's; none for a dropped group.

    ``models`` keeps only decisions made by those pool models (default: every decision).
    """
    if group.advantages is None:
        return []
    samples = []
    for episode, reward, adv in zip(group.episodes, group.rewards, group.advantages):
        for row in decision_rows(store, episode.trace_id):
            if models is not None and row.model not in models:
                continue
            sample = sample_from_row(row, adv, reward, task_id=group.task.id, kind="group")
            if sample is not None:
                samples.append(sample)
    return samples


def scored_reward(scorer: _ScorerLike, store: TraceStore | None = None, cfg: Any = None) -> RewardFn:
    """A reward function from an evaluation scorer: its score of the answer in [0, 1].

    With ``store`` and a reward config ``cfg`` (``orchestrion.train.rewards.RewardConfig``),
    the reward is the configured combination of every component of the stored episode,
    with the scorer's value as the ``outcome`` component.
    """
    if cfg is not None and store is None:
        raise ConfigError("scored_reward: a reward config needs the trace store the episodes are written to")

    async def reward(result: EpisodeResult, task: Task) -> float:
        score = await scorer(task, result.answer)
        if cfg is None or store is None:
            return float(score.value)
        from . import rewards  # type: ignore[attr-defined,unused-ignore]

        components: dict[str, float] = dict(rewards.episode_rewards(store, result.trace_id, cfg))
        components["outcome"] = float(score.value)
        return float(rewards.combine(components, cfg))

    return reward
