"""``auto``'s history on a user's own dataset: every candidate arm run on the ``@train`` side of a
dataset, resumably, and the arm table learned from it.

Each arm (``direct:MODEL``, ``program:MODEL``, ``para``, ...) is one eval run of its strategy, with
option ``model`` for an arm that names one. A run of the same arm, dataset, sample and pool that is
already in the store is finished (``--resume`` underneath) or, when it is finished, reused, so an
interrupted ``orchestrion auto learn`` started again runs only what is missing. ``auto`` then reads
these scored ``@train`` episodes as its history (its option ``history_split``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .._errors import ConfigError
from ..models.pool import load_pool
from ..status import RunStatus
from ..strategies.auto import default_arms
from ..trace.store import TraceStore
from .runner import EvalConfig, Observer, run_eval
from .summary import summarize


@dataclass(frozen=True)
class ArmRow:
    """What one arm scored on the ``@train`` sample."""

    arm: str
    run_id: str
    episodes: int
    accuracy: float
    stderr: float
    cost_units: float  # per episode
    wall_s: float  # per episode


def check_train_side(dataset: str) -> None:
    """Every part of ``dataset`` ends in ``@train``: auto learns from that side only."""
    parts = [p.strip() for p in dataset.split("+")]
    wrong = [p for p in parts if not p.endswith("@train")]
    if wrong:
        raise ConfigError(f"dataset '{wrong[0]}': auto learns from the @train side only; "
                          f"write it as '{wrong[0].rpartition('@')[0] or wrong[0]}@train'")


def arm_config(arm: str, dataset: str, *, limit: int, seed: int | None, pool: str | None,
               concurrency: int = 1) -> EvalConfig:
    """The eval run of one arm: its strategy, with option ``model`` when the arm names one."""
    strategy, _, model = arm.partition(":")
    return EvalConfig(dataset=dataset, strategies=[strategy], limit=limit, seed=seed, pool=pool,
                      concurrency=concurrency, options={"model": model} if model else {})


def _same_run(store: TraceStore, config: EvalConfig) -> tuple[str, bool] | None:
    """The newest run in ``store`` of the same arm, dataset, sample and pool: its id and whether it finished."""
    keys = ("dataset", "strategies", "limit", "seed", "pool", "options")
    wanted = config.model_dump(include=set(keys))
    for run in store.runs(kind="eval", newest_first=True):
        stored = run.config_value()
        if isinstance(stored, dict) and all(stored.get(k) == wanted[k] for k in keys):
            return run.id, run.status == RunStatus.FINISHED
    return None


async def learn_arms(dataset: str, store: TraceStore, *, pool: str | None, arms: list[str] | None = None,
                     limit: int = 20, seed: int | None = 7, concurrency: int = 1,
                     observer: Callable[[str], Observer] | None = None) -> list[ArmRow]:
    """Run every arm on ``dataset`` (an ``@train`` spec), resuming or reusing runs already in
    ``store``; returns the arm table. ``observer(arm)`` gives each run's progress hooks.
    ``arms`` defaults to auto's own candidates for the pool."""
    check_train_side(dataset)
    if arms is None:
        the_pool = load_pool(pool)
        try:
            arms = default_arms(the_pool)
        finally:
            await the_pool.aclose()
    rows = []
    for arm in arms:
        config = arm_config(arm, dataset, limit=limit, seed=seed, pool=pool, concurrency=concurrency)
        found = _same_run(store, config)
        hooks = observer(arm) if observer is not None else None
        if found is not None and found[1]:
            run_id = found[0]
        else:
            run = await run_eval(config, store, resume=found[0] if found else None, observer=hooks)
            run_id = run.run_id
        [s] = summarize(store, run_id)
        n = max(1, s.episodes)
        rows.append(ArmRow(arm, run_id, s.episodes, s.accuracy, s.stderr, s.cost_units / n, s.mean_wall_s))
    return rows
