"""Orchestrion strategies as inspect_ai solvers (the optional ``inspect`` extra).

``orchestrion_solver("para")`` returns an inspect_ai solver that hands each
sample's input to :func:`orchestrion.runtime.episode.run_episode`, so any inspect_ai task, dataset
and scorer can evaluate an orchestration strategy::

    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match
    from orchestrion.eval.inspect_bridge import orchestrion_solver

    task = Task(dataset=[Sample(input="What is 2+3?", target="5")],
                solver=orchestrion_solver("cot"), scorer=match())
    eval(task, model="mockllm/model")   # the strategy uses Orchestrion's pool, not inspect's model

The episode is traced in Orchestrion's store as usual; the sample gets the answer
as its output (and an assistant message), token usage on the output, and
``metadata["orchestrion"]`` (also in the sample store) with the strategy, status,
trace id, tokens, dollar cost (``None`` = unknown) and wall time.

The sample's transcript holds the episode as inspect events (:mod:`._inspect_events`): its
spans nested as inspect spans, every model call a ``ModelEvent`` (model
``orchestrion/<pool model>``; counted in the sample's and the eval's ``model_usage``) and every
tool or agent-tool call a ``ToolEvent``, so ``inspect view`` shows the calls, their tokens and
their time. An ``InfoEvent`` names the episode's trace id. The solver's parameters are logged by
value: strategy name, pool source and models, options, budget, tool names, trace store path and
run id. inspect's score of the sample is written back to the episode's meta by the hook that
Orchestrion registers through inspect's entry points (:mod:`._inspect_registry`).

``inspect eval TASK --model orchestrion/para`` runs a strategy as an inspect *model* instead
(:mod:`orchestrion.eval.inspect_provider`), for any task whose solver calls ``generate()``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError
from ..models.pool import Pool, load_pool
from ..runtime.budget import Budget
from ..runtime.episode import run_episode
from ..runtime.types import Task
from ..status import EpisodeStatus
from ..strategies.base import Strategy
from ..strategies.registry import get_strategy
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ._inspect_events import log_episode, remember

if TYPE_CHECKING:
    from inspect_ai.solver import Solver, TaskState

# where inspect_ai keeps a solver's parameters for the log's plan (``params_passed`` and ``params``)
_PARAM_ATTRIBUTES = ("__registry_params__", "__solver_all_params__")
INSTALL_HINT = "the inspect_ai bridge needs inspect_ai; install it with `pip install 'orchestrion[inspect]'`"


def orchestrion_solver(
    strategy: str | Strategy,
    *,
    pool: Pool | str | Path | None = None,
    tools: ToolRegistry | None = None,
    store: TraceStore | str | Path | None = None,
    options: dict[str, Any] | None = None,
    budget: Budget | None = None,
    run_id: str | None = None,
) -> Solver:
    """An inspect_ai solver that solves each sample with ``strategy`` through Orchestrion.

    ``pool`` defaults to the embedded model and ``store`` to the default trace
    database; both are opened once and shared by all samples. ``run_id`` tags the
    episodes (so ``orchestrion report RUN_ID`` can summarise them, once scores are
    in the episodes' meta); inspect_ai's epochs count from 1, Orchestrion's from 0.
    Raises :class:`ConfigError` when inspect_ai is missing.
    """
    factory = _solver_factory()
    the_strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy  # unknown names fail now
    the_store = remember(store if isinstance(store, TraceStore) else TraceStore(store))
    the_pool = load_pool(pool)
    solver: Solver = factory(the_strategy, the_pool, tools, the_store, dict(options or {}), budget, run_id)
    # the eval log's plan shows what the solver was given, by value (not "Pool" / "TraceStore")
    params = {
        "strategy": the_strategy.name, "pool": the_pool.source, "models": the_pool.names,
        "options": dict(options or {}), "budget": None if budget is None else budget.model_dump(exclude_none=True),
        "tools": None if tools is None else tools.names, "store": str(the_store.path), "run_id": run_id,
    }
    for attribute in _PARAM_ATTRIBUTES:
        setattr(solver, attribute, dict(params))
    return solver


@functools.cache
def _solver_factory() -> Any:
    """The registered inspect_ai solver factory, built on first use (inspect_ai is slow to import)."""
    try:
        from inspect_ai.model import ModelOutput, ModelUsage
        from inspect_ai.solver import Generate, solver
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None

    @solver(name="orchestrion")
    def orchestrion(
        strategy: Strategy,
        pool: Pool,
        tools: ToolRegistry | None,
        store: TraceStore,
        options: dict[str, Any],
        budget: Budget | None,
        run_id: str | None,
    ) -> Solver:
        async def run(state: TaskState, generate: Generate) -> TaskState:
            result = await run_episode(
                _task_of(state), strategy, pool=pool, tools=tools, store=store,
                budget=budget, options=options, run_id=run_id, epoch=max(state.epoch - 1, 0),
            )
            state.output = ModelOutput.from_content(
                model=f"orchestrion/{strategy.name}", content=result.answer,
                stop_reason="stop" if result.status == EpisodeStatus.OK else "unknown",
            )
            state.output.usage = ModelUsage(
                input_tokens=result.usage.input_tokens, output_tokens=result.usage.output_tokens,
                total_tokens=result.usage.input_tokens + result.usage.output_tokens,
            )
            state.messages.append(state.output.message)
            record = {
                "strategy": strategy.name, "status": result.status, "trace_id": result.trace_id,
                "error": result.error, "input_tokens": result.usage.input_tokens,
                "output_tokens": result.usage.output_tokens, "cost_usd": result.cost_usd,
                "cost_units": result.usage.cost_units, "wall_s": round(result.wall_s, 3),
            }
            state.metadata["orchestrion"] = record
            state.store.set("orchestrion", record)
            log_episode(store, result.trace_id, strategy.name, count_usage=True)
            return state

        return run

    return orchestrion


def _task_of(state: TaskState) -> Task:
    """An Orchestrion task from an inspect_ai sample's state."""
    targets = list(state.target)
    metadata: dict[str, Any] = {**state.metadata, "inspect_sample_id": state.sample_id}
    metadata.pop("orchestrion", None)
    if len(targets) > 1:
        metadata["targets"] = targets
    choices = [c.value for c in state.choices] or None
    return Task(prompt=state.input_text, id=str(state.sample_id), answer=targets[0] if targets else None,
                choices=choices, metadata=metadata)
