"""One episode, from start to finish: build its context, run the strategy, conform the answer,
finish the record.

:func:`run_episode` is the one place an episode is opened and closed: the episode row is
written first (status ``running``), the strategy runs inside the root span, and the closing
update (with ``finished = 1``) is committed before it returns, whatever happened: an answer, a
budget stop, an error or a cancellation. What the caller wants of the answer (streaming, a JSON
format) comes in as an explicit :class:`AnswerChannel`; what the caller adds to the record once
the answer is known (eval's score and grounding) comes in as a :data:`Review`, whose fields are
merged into that same closing update, so a reviewed episode is never half-written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict, Unpack

from .._errors import BudgetExceededError, OrchestrionError
from ..models.pool import Pool, load_pool
from ..models.types import Usage
from ..status import EpisodeStatus
from ..tools.defaults import default_tools
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ..trace.tracer import Tracer, new_id, reset_current, set_current
from .answer import AnswerChannel
from .budget import Budget, BudgetTracker
from .client_tools import ClientTools, ClientToolsTimeout
from .context import RunContext
from .fit import AnswerFormat
from .options import StrategyOptions, episode_options
from .parts import is_multipart
from .synthesis import asked_as_written, conform_answer, direct_fallback, fallback_model
from .types import Answer, Task

# what the caller adds to the record once the answer is known: (task, answer, the outputs of the
# episode's successful tool and agent calls) -> fields merged into the episode's meta
Review = Callable[[Task, str, list[str]], Awaitable[dict[str, Any]]]


class EpisodeArgs(TypedDict, total=False):
    """Where and how an episode runs; every key is optional (see :func:`run_episode`)."""

    pool: Pool | str | Path | None  # a Pool, a pool.yaml, a preset name; None = the default
    tools: ToolRegistry | None  # None = the default tools
    store: TraceStore | str | Path | None  # a TraceStore or a database path; None = the default
    budget: Budget | None
    options: dict[str, Any] | None  # strategy options, over the pool's strategy YAML
    run_id: str | None
    epoch: int  # default 0
    episode_id: str | None  # None = a new id
    answer: AnswerChannel | None  # what the caller wants of the final answer
    review: Review | None  # fields added to the closing update once the answer is known
    client_tools: ClientTools | None  # functions the caller runs itself (serve's client tools)


class EpisodeStrategy(Protocol):
    """What the runtime needs of a strategy (:class:`orchestrion.strategies.base.Strategy`)."""

    @property
    def name(self) -> str: ...

    @property
    def Options(self) -> type[StrategyOptions]: ...  # noqa: N802 - the strategies' class attribute

    def check_options(self, options: StrategyOptions, pool: Pool) -> None: ...  # raises ConfigError

    async def solve(self, task: Task, ctx: RunContext) -> Answer: ...


@dataclass
class EpisodeResult:
    """The outcome of one episode."""

    answer: str
    status: EpisodeStatus
    strategy: str
    usage: Usage
    wall_s: float
    trace_id: str
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    client_wait_s: float = 0.0  # of wall_s, the time paused for the client's tool results (not the episode's work)

    @property
    def cost_usd(self) -> float | None:
        return self.usage.cost_usd

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "status": self.status,
            "strategy": self.strategy,
            "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens},
            "cost_usd": self.usage.cost_usd,
            "cost_units": self.usage.cost_units,
            "wall_s": round(self.wall_s, 3),
            "client_wait_s": round(self.client_wait_s, 3),
            "trace_id": self.trace_id,
            "error": self.error,
            "meta": self.meta,
        }


@dataclass
class _Episode:
    """An opened episode: what :func:`_build` made and :func:`_finish` closes."""

    task: Task
    strategy: EpisodeStrategy
    pool: Pool
    store: TraceStore
    ctx: RunContext
    id: str
    started: float
    own_pool: bool  # built here from a name: closed here
    own_store: bool


@dataclass
class _Ending:
    answer: str = ""
    status: EpisodeStatus = EpisodeStatus.OK
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


async def run_episode(task: str | Task, strategy: EpisodeStrategy, **args: Unpack[EpisodeArgs]) -> EpisodeResult:
    """Solve one task with one strategy; the episode is fully traced (see the module doc).

    A pool or store given by name (or left to the default) is opened here and closed before
    returning; pass :class:`Pool` / :class:`TraceStore` objects to reuse them. ``episode_id``
    (default: a new id) lets a caller subscribe to the episode's trace events
    (``store.bus.subscribe(episode_id)``) before it starts. ``review`` is not awaited for a
    cancelled episode.
    """
    ep = _build(task, strategy, args)
    end = _Ending()
    try:
        await _run(ep, end)
    finally:
        ended = await _finish(ep, end, args.get("review"))
    return EpisodeResult(end.answer, end.status, ep.strategy.name, ep.ctx.budget.usage, ended - ep.started, ep.id,
                         end.error, end.meta, _client_wait_s(ep))


def checked_options(strategy: EpisodeStrategy, pool: Pool, options: dict[str, Any] | None) -> StrategyOptions:
    """The episode's options: the CLI/API ``options`` over the pool's strategy YAML, validated as the
    strategy's ``Options`` and checked against the pool (its model names, say); a ConfigError
    otherwise. An eval calls it once before its run starts, so no episode is refused mid-run."""
    settings = episode_options(strategy.Options, strategy.name, pool.config.strategies.get(strategy.name, {}),
                               pool.source, options)
    strategy.check_options(settings, pool)  # what only the pool can tell
    return settings


def _build(task: str | Task, strategy: EpisodeStrategy, args: EpisodeArgs) -> _Episode:
    """The episode's context, and its opening row in the store."""
    the_task = task if isinstance(task, Task) else Task(prompt=task)
    pool, store = args.get("pool"), args.get("store")
    the_pool = load_pool(pool)
    # validated before the episode starts: a bad option is a ConfigError, not a half-written episode
    settings = checked_options(strategy, the_pool, args.get("options"))
    opts = settings.model_dump(mode="json", exclude_unset=True)
    the_store = store if isinstance(store, TraceStore) else TraceStore(store)
    the_id = args.get("episode_id") or new_id()
    tracker = BudgetTracker(args.get("budget"))
    ctx = RunContext(the_pool, args.get("tools") or default_tools(), Tracer(the_store, the_id), tracker, settings,
                     answer=args.get("answer"), task=the_task.prompt, answer_format=AnswerFormat.of(the_task),
                     client_tools=args.get("client_tools"), multipart=is_multipart(the_task),
                     as_written=asked_as_written(the_task))
    started = time.time()
    the_store.start_episode(
        the_id, run_id=args.get("run_id"), task_id=the_task.id, epoch=args.get("epoch", 0), strategy=strategy.name,
        task=the_task.model_dump(), started=started,
        meta={"pool": the_pool.source, "options": opts, "budget": tracker.budget.model_dump()},
    )
    return _Episode(the_task, strategy, the_pool, the_store, ctx, the_id, started,
                    own_pool=not isinstance(pool, Pool), own_store=not isinstance(store, TraceStore))


async def _run(ep: _Episode, end: _Ending) -> None:
    """The strategy inside the root span and the wall-time budget, then the answer in the format
    the answer channel asks; how it ended goes into ``end``."""
    root = ep.ctx.tracer.start("episode", ep.strategy.name, task=ep.task.prompt)
    token = set_current(root)
    wall_s = ep.ctx.budget.budget.wall_s
    try:
        async with asyncio.timeout(wall_s) as deadline:
            ep.ctx.budget.deadline = deadline  # stands still while the episode waits for its client
            result = await ep.strategy.solve(ep.task, ep.ctx)
            end.answer, end.status, end.meta = result.text, result.status, result.meta
            end.answer = await _fitted(ep, end)
            end.answer = await conform_answer(ep.task.prompt, end.answer, ep.ctx)
    except BudgetExceededError as exc:
        end.status, end.error = EpisodeStatus.BUDGET_EXCEEDED, str(exc)
    except TimeoutError:
        end.status, end.error = EpisodeStatus.BUDGET_EXCEEDED, f"budget exceeded: wall_s {wall_s:g}s reached"
    except ClientToolsTimeout as exc:  # the client never sent its tools' results: the trace is kept
        end.status, end.error = EpisodeStatus.INTERRUPTED, str(exc)
    except OrchestrionError as exc:
        end.status, end.error = EpisodeStatus.ERROR, str(exc)
    except asyncio.CancelledError:
        end.status, end.error = EpisodeStatus.CANCELLED, "cancelled"
        raise
    except Exception as exc:
        end.status, end.error = EpisodeStatus.ERROR, f"{type(exc).__name__}: {exc}"
        raise
    finally:
        ep.ctx.budget.deadline = None
        reset_current(token)
        root.set(answer=end.answer, error=end.error)
        root.end(end.status)


async def _fitted(ep: _Episode, end: _Ending) -> str:
    """``answer`` when it fits the task's format (:mod:`.fit`); else, recorded as event
    ``answer_out_of_format``, the answer ``direct`` gives, unless the strategy's answer already is
    direct's (the strategy ``answers_directly``, or the fallback's model gave this very answer) or
    was streamed to the caller already. The record also goes to ``meta.result.out_of_format``."""
    answer = end.answer
    why = ep.ctx.answer_misfit(answer)
    channel = ep.ctx.answer
    if why is None or (channel is not None and (channel.claimed or channel.json_schema is not None)):
        return answer
    own = bool(getattr(ep.strategy, "answers_directly", False)) or \
        (fallback_model(ep.ctx), answer.strip()) in ep.ctx.direct_answers
    record: dict[str, Any] = {"answer": answer[:500], "reason": why, "replaced": not own}
    end.meta = {**end.meta, "out_of_format": record}
    if own:
        ep.ctx.tracer.event("answer_out_of_format", record)
        return answer
    text = await direct_fallback(ep.task.prompt, ep.ctx, f"the answer does not fit the task's format: {why}")
    record["fallback_fits"] = ep.ctx.answer_misfit(text) is None
    ep.ctx.tracer.event("answer_out_of_format", record)
    return text


async def _finish(ep: _Episode, end: _Ending, review: Review | None) -> float:
    """The review's fields and the closing update, committed; what was opened here is closed.
    Returns the end time."""
    ended = time.time()
    reviewed: dict[str, Any] = {}
    if review is not None and end.status != EpisodeStatus.CANCELLED:
        reviewed = await review(ep.task, end.answer, ep.ctx.results)
    waited = {} if ep.ctx.client_tools is None else {"client_wait_s": round(_client_wait_s(ep), 3)}
    ep.store.finish_episode(ep.id, status=end.status, answer=end.answer, error=end.error, ended=ended,
                            usage=ep.ctx.budget.usage, meta_patch={**reviewed, **waited, "result": end.meta})
    await asyncio.shield(ep.store.aflush())
    if ep.own_pool:  # HTTP sessions, model handles
        await ep.pool.aclose()
    if ep.own_store:  # everything is committed above
        await asyncio.to_thread(ep.store.close)
    return ended


def _client_wait_s(ep: _Episode) -> float:
    """How long the episode waited for its client's tool results (0 without client tools)."""
    return 0.0 if ep.ctx.client_tools is None else ep.ctx.client_tools.waited_s
