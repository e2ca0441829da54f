"""GRPO on the orchestrator, as ParaManager trains it: groups of episodes, group-normalised credit.

Each step solves ``tasks_per_step`` tasks ``group`` times with the current policy (whole
episodes through the runtime, its tools and sub-agents), scores them, and updates a LoRA
(peft) on the float32 weights with the clipped surrogate. Two engines run that step:

* ``trl`` (default, :mod:`orchestrion.train._grpo_trl`): TRL's ``GRPOTrainer`` with an
  Orchestrion ``rollout_func``. TRL takes one completion per sample, so each *episode* is
  one sample: its decisions packed into one multi-turn completion with ``env_mask``.
  accelerate, DeepSpeed, TRL's loss variants, logging and checkpoints come from TRL.
* ``loop`` (:mod:`orchestrion.train._grpo_loop`): the hand-written loop, one sample per
  *decision* with its episode's advantage, which keeps the credit of decisions whose
  context the strategy rebuilds (para's rounds) and per-token weights (tree, counterfactual).

Both run the rollouts with the adapter being trained: saved and converted to GGUF after each
step and loaded into the pool's llama.cpp orchestrator (:func:`rollout_pool`); an orchestrator
of another backend runs as is. Both checkpoint after every step under ``out`` and continue
from there when called again with the same ``out``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._errors import ConfigError
from ..models.pool import Pool, load_pool
from ..runtime.types import Task
from ..status import RunStatus
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ..trace.tracer import new_id
from ._checkpoint import read_state
from ._grpo_steps import (
    GRPORun,
    StepLog,
    grpo_update,
    retokenized_samples,
    rollout_gap_stats,
    scoring_reward,
    set_old_logprobs,
    write_log,
)
from ._policy import Policy
from ._progress import StepBar, StepDisplay
from .settings import GRPOSettings

Log = Callable[[str], None]


class _DatasetLike(Protocol):
    name: str
    tasks: list[Task]
    scorer: Any


@dataclass
class GRPOResult:
    adapter_dir: Path
    gguf_path: Path | None
    run_id: str
    steps: list[StepLog] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- the command -------------------------------------------------------------------------------
async def atrain_grpo(
    dataset: str | _DatasetLike,
    settings: GRPOSettings | None = None,
    *,
    pool: Pool | str | Path | None = None,
    store: TraceStore | str | Path | None = None,
    tools: ToolRegistry | None = None,
    progress: Log | None = None,
    bar: StepDisplay | None = None,
) -> GRPOResult:
    """Train the orchestrator with GRPO; see the module docstring. Writes the adapter, adapter.gguf
    and train_log.json to ``settings.out``; the rollouts are episodes of a run (kind ``grpo``) in
    ``store``. Called again with the same ``out`` it resumes from the last saved step, in the same
    run. ``bar`` draws a progress bar with an ETA (the CLI passes its rich bar on stderr)."""
    s = settings or GRPOSettings()
    if s.group < 2:
        raise ConfigError(f"GRPOSettings.group={s.group}: GRPO compares episodes within a group; use 2 or more")
    data = _load_dataset(dataset, s.limit, s.seed)
    the_store = store if isinstance(store, TraceStore) else TraceStore(store)
    try:
        the_pool = load_pool(pool)
        try:
            return await _train(s, data, the_pool, the_store, tools, progress, bar)
        finally:
            if not isinstance(pool, Pool):  # opened here by name: its HTTP sessions and models closed here
                await the_pool.aclose()
    finally:
        if not isinstance(store, TraceStore):  # everything is committed by then
            await asyncio.to_thread(the_store.close)


async def _train(s: GRPOSettings, data: _Data, the_pool: Pool, the_store: TraceStore, tools: ToolRegistry | None,
                 progress: Log | None, bar: StepDisplay | None) -> GRPOResult:
    """The run itself, on a pool and a store its caller opened (and closes)."""
    from .rewards import load_reward_config

    reward_cfg = load_reward_config(s.rewards) if s.rewards is not None else None
    record: dict[str, Any] = {"dataset": data.name, "tasks": len(data.tasks), **s.record(), "pool": the_pool.source}
    run_id = _start_run(s, the_store, record)
    status = RunStatus.INTERRUPTED
    try:  # from here on the run ends marked, whatever fails (loading the policy included)
        with StepBar(s.steps, 0, progress, display=bar, label="grpo") as steps_bar:
            steps_bar.log(f"loading the policy ({'adapter ' + str(s.adapter) if s.adapter else 'fresh LoRA'}) ...")
            policy = Policy.load(s.adapter, lora_r=s.lora_r, lora_alpha=s.lora_alpha, gguf_path=s.gguf_path,
                                 seed=s.seed)
            run = GRPORun(s, data.tasks, the_pool, the_store, scoring_reward(data.scorer, the_store, reward_cfg),
                          reward_cfg, policy, run_id, record, steps_bar, tools)
            steps_bar.log(f"run {run_id}: {len(data.tasks)} tasks x group {s.group}, {s.steps} steps, "
                          f"engine {s.engine}, strategy {s.strategy_name}")
            if s.engine == "trl":
                from ._grpo_trl import train as train_engine
            else:
                from ._grpo_loop import train as train_engine
            await train_engine(run)
            status = RunStatus.FINISHED if (run.history and run.history[-1].step >= s.steps) else RunStatus.INTERRUPTED
            if status == RunStatus.INTERRUPTED:
                run.note(f"stopped after step {run.last_step} of {s.steps}; "
                         f"training again into {s.out} continues from there")
            adapter_dir, gguf, why = policy.save(run.out)
            if why:
                run.note(why)
            write_log(run)
    finally:
        the_store.set_run_status(run_id, status)
        await the_store.aflush()
    return GRPOResult(adapter_dir, gguf, run_id, run.history, run.notes)


def _start_run(s: GRPOSettings, store: TraceStore, record: dict[str, Any]) -> str:
    """The run's id: the one saved in ``out`` (marked running again), else a new run, recorded."""
    saved = read_state(Path(s.out), record, file="run.json")
    if saved is not None:
        run_id = str(saved["run_id"])
        store.set_run_status(run_id, RunStatus.RUNNING)
        return run_id
    run_id = new_id()
    store.create_run(run_id, "grpo", record)
    Path(s.out).mkdir(parents=True, exist_ok=True)
    (Path(s.out) / "run.json").write_text(json.dumps({"run_id": run_id, "settings": record}, indent=2),
                                          encoding="utf-8")
    return run_id


def train_grpo(dataset: str | _DatasetLike, settings: GRPOSettings | None = None, **kwargs: Any) -> GRPOResult:
    """:func:`atrain_grpo` with its own event loop."""
    return asyncio.run(atrain_grpo(dataset, settings, **kwargs))


@dataclass
class _Data:
    name: str
    tasks: list[Task]
    scorer: Any


def _load_dataset(dataset: str | _DatasetLike, limit: int | None, seed: int) -> _Data:
    if isinstance(dataset, str):
        from ..eval.datasets import load_dataset

        dataset = load_dataset(dataset, limit=limit, seed=seed)
        limit = None
    tasks = list(dataset.tasks if limit is None else dataset.tasks[:limit])
    if not tasks:
        raise ConfigError(f"dataset '{dataset.name}' has no tasks to train on")
    return _Data(dataset.name, tasks, dataset.scorer)


__all__ = ["GRPOResult", "GRPORun", "StepLog", "atrain_grpo", "grpo_update", "retokenized_samples",
           "rollout_gap_stats", "set_old_logprobs", "train_grpo"]
