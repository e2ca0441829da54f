"""GRPO's ``loop`` engine: the hand-written step, one training sample per orchestrator decision.

It earns its place next to TRL's ``GRPOTrainer`` (:mod:`._grpo_trl`) where TRL's shape - one
completion per sample - loses credit: para rebuilds its prompt every round, so an episode's
decisions do not extend one conversation and cannot be packed into one completion; here every
decision becomes its own :class:`TrainSample` with its episode's advantage, and a sample may
carry per-token weights (tree and counterfactual credit). Each step: roll out groups
(:func:`collect_groups`), drop groups with equal rewards, recompute the samples' log-probs
under the HF policy (the ratio's old policy: llama.cpp's quantized log-probs are not the
trained weights; with one update, inside that update's own forward pass), and take ``updates``
optimizer steps on the clipped surrogate (:func:`grpo_update`). After each step the LoRA, the
optimizer and the step counter are saved under ``out/checkpoint`` (:mod:`._checkpoint`).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ..models.pool import Pool
from ..runtime.types import Task
from ._checkpoint import CHECKPOINT, load_checkpoint, read_state, save_checkpoint
from ._grpo_steps import (
    GRPORun,
    StepLog,
    attempts,
    check_vocab,
    grpo_update,
    retokenized_samples,
    rollout_gap_stats,
    rollout_pool,
    set_old_logprobs,
)
from ._types import TrainSample
from .rollouts import collect_groups, group_samples


async def train(run: GRPORun) -> None:
    """Run the steps from the last checkpoint (if any) up to ``run.last_step``."""
    s = run.settings
    optimizer = torch.optim.AdamW(run.policy.parameters(), lr=s.lr)
    state = read_state(run.out, run.record)
    if state is not None:
        load_checkpoint(run.out, run.policy, optimizer)
        run.resume_at(int(state["step"]), run.out / CHECKPOINT)
    scratch = Path(tempfile.mkdtemp(prefix="orchestrion-grpo-"))
    try:
        for step in range(run.first_step, run.last_step):
            entry = await _step(run, optimizer, step, _tasks_of(run, step), scratch)
            save_checkpoint(run.out, run.policy, optimizer, step + 1, {"settings": run.record, "run_id": run.run_id})
            run.logged(entry)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _tasks_of(run: GRPORun, step: int) -> list[Task]:
    n = run.settings.tasks_per_step or len(run.tasks)
    return [run.tasks[(step * n + i) % len(run.tasks)] for i in range(min(n, len(run.tasks)))]


async def _step(run: GRPORun, optimizer: torch.optim.Optimizer, step: int, tasks: list[Task],
                scratch: Path) -> StepLog:
    s = run.settings
    start = time.perf_counter()
    pool, how = rollout_pool(run, step, scratch)
    total = len(tasks) * s.group

    def progress(done: int, _total: int) -> None:
        run.bar.status(f"episode {done}/{total}")

    try:
        groups = await collect_groups(tasks, s.model_copy(update={"seed": s.seed + step * total}), pool=pool,
                                      store=run.store, reward_fn=run.reward_fn, run_id=run.run_id, tools=run.tools,
                                      progress=progress)
    finally:
        if pool is not run.pool:
            await _close_orchestrator(pool)
    episodes = [e.trace_id for g in groups for e in g.episodes]
    rewards = [r for g in groups for r in g.rewards]
    samples: list[TrainSample] = []
    for g in groups:
        for i, (e, r) in enumerate(zip(g.episodes, g.rewards)):
            credit = {"step": step + 1, "reward": r, "advantage": None if g.advantages is None else g.advantages[i]}
            run.store.patch_episode_meta(e.trace_id, {"grpo": credit})
        if g.advantages is None:
            continue
        found = group_samples(g, run.store)
        if not found:
            found = retokenized_samples(run.policy, run.store,
                                        [(e.trace_id, r, a) for e, r, a in zip(g.episodes, g.rewards, g.advantages)])
        check_vocab(run.policy, found)
        samples.extend(found)
    usable = [x for x in samples if x.completion_ids and len(x.prompt_ids) + len(x.completion_ids) <= s.max_length]
    valid, decisions = attempts(run.store, episodes)
    entry = StepLog(step=step + 1, episodes=len(episodes), groups=len(groups),
                    groups_kept=sum(1 for g in groups if g.advantages is not None), samples=len(usable),
                    mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
                    valid_rate=valid, rollout_policy=how, reward_sd=statistics.pstdev(rewards) if rewards else 0.0,
                    decisions=decisions, trained=len(usable))
    if len(usable) < len(samples):
        entry.note = f"{len(samples) - len(usable)} samples longer than {s.max_length} tokens left out; "
    if not entry.groups_kept:
        entry.note += f"all {len(groups)} groups had equal rewards: no update this step"
    elif not usable:
        entry.note += "no decision with tokens to train on: no update this step"
    else:
        run.bar.status("update")
        # one update: its own forward gives the old log-probs (on_policy); several need them fixed first
        on_policy = s.updates == 1
        if not on_policy:
            entry.rollout_gap = set_old_logprobs(run.policy, usable, micro_batch=s.micro_batch)
        stats: dict[str, float] = {}
        for _ in range(s.updates):
            stats = grpo_update(run.policy, optimizer, usable, clip_eps=s.clip, kl_beta=s.kl_beta,
                                micro_batch=s.micro_batch, on_policy=on_policy)
        if on_policy:
            entry.rollout_gap = stats.get("rollout_gap")
        gap = rollout_gap_stats(usable)
        entry.rollout_gap_p95 = gap[1] if gap is not None else None
        entry.loss, entry.clip_frac = stats["loss"], stats["clip_frac"]
        entry.ratio, entry.kl = stats["ratio"], stats["kl"]
    entry.wall_s = time.perf_counter() - start
    return entry


async def _close_orchestrator(pool: Pool) -> None:
    await pool.get(pool.orchestrator).aclose()
