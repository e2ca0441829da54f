"""GRPO's ``trl`` engine: TRL's ``GRPOTrainer`` with an Orchestrion ``rollout_func``.

**Shape.** TRL trains on one completion per sample and normalises rewards over the
``num_generations`` consecutive samples of one prompt. Here a dataset row is a task; TRL's
sampler repeats it ``group`` times, and :func:`rollout` runs one Orchestrion *episode* per
row (``collect_groups``: distinct seeds, the current policy, the real tools and workers).
Each episode becomes one sample, its decisions packed into one multi-turn completion:
the first decision's prompt ids are the prompt; its output ids start the completion; a later
decision whose prompt extends everything so far (repairs after an invalid output, strategies
that keep one growing conversation) adds the new context tokens with ``env_mask`` 0 and its
own output with ``env_mask`` 1, so the loss covers exactly the tokens the orchestrator
sampled. A decision whose prompt was rebuilt (para writes a fresh prompt every round) cannot
join without the wrong context, so it and the decisions after it are left out and counted
(``decisions_left_out`` in the step log); the ``loop`` engine trains on them instead. All
ids and log-probs are the recorded ones (llama.cpp's); only backends that give no ids
(scripted, some servers) are tokenized here, and the step log counts those.

**Reward.** One TRL reward function per component of :mod:`orchestrion.train.rewards`
(outcome = the scorer's success, protocol, invalid, diversity, efficiency on tokens and on
cost units, ...), each reading its value off the stored episode, with the reward config's
weights as TRL's ``reward_weights``: TRL's weighted sum is :func:`rewards.combine`. Without
a reward config the reward is the score alone.

**Weights to the rollouts.** Before each step's rollouts the LoRA being trained is saved,
converted to GGUF and loaded into a copy of the pool's llama.cpp orchestrator
(:func:`orchestrion.train.grpo.rollout_pool`), as the ``loop`` engine does.

**Checkpoints.** TRL's own: ``out/checkpoints/checkpoint-N`` (adapter, optimizer, scheduler,
RNG, step) after every step; a rerun resumes from the last one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .._errors import ConfigError
from ..runtime.types import Task
from ._grpo_steps import GRPORun, StepLog, attempts, check_vocab, rollout_pool
from ._policy import Policy
from ._types import TrainSample
from .rollouts import DecisionAttempt, collect_groups, decision_rows

CHECKPOINTS = "checkpoints"


@dataclass
class Packed:
    """One episode as one TRL sample."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    decisions: int = 0  # decisions in the completion
    left_out: int = 0  # decisions that could not join it
    retokenized: bool = False


def pack(rows: Sequence[DecisionAttempt], policy: Policy, max_length: int) -> Packed:
    """The episode's sampled decisions (``decision_rows``) as one multi-turn completion; see the module docstring."""
    rows = [r for r in rows if not r.replayed]
    out = Packed([policy.eos_id], [policy.eos_id], [0.0], [0])  # nothing to train on: one masked token
    for n, row in enumerate(rows):
        prompt, output, logprobs, retok = _ids(row, policy)
        if n == 0:
            if not output or len(prompt) + len(output) > max_length:
                out.left_out = len(rows)
                return out
            out = Packed(prompt, list(output), logprobs, [1] * len(output), 1, 0, retok)
            continue
        so_far = out.prompt_ids + out.completion_ids
        if not output or prompt[:len(so_far)] != so_far or len(prompt) + len(output) > max_length:
            out.left_out = len(rows) - n
            break
        context = prompt[len(so_far):]
        out.completion_ids += context + output
        out.logprobs += [0.0] * len(context) + logprobs
        out.env_mask += [0] * len(context) + [1] * len(output)
        out.decisions += 1
        out.retokenized |= retok
    return out


def _ids(row: DecisionAttempt, policy: Policy) -> tuple[list[int], list[int], list[float], bool]:
    if row.token_ids and row.prompt_token_ids is not None:
        output = [int(t) for t in row.token_ids]
        logprobs = row.logprobs if row.logprobs and len(row.logprobs) == len(output) else None
        return [int(t) for t in row.prompt_token_ids], output, list(logprobs or [0.0] * len(output)), False
    output = policy.text_ids(row.output or "") + [policy.eos_id]  # a backend without ids: tokenized here
    return policy.prompt_ids(row.messages or []), output, [0.0] * len(output), True


def reward_functions(cfg: Any) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """One TRL reward function per reward component (name = component), and their weights."""
    from .rewards import COMPONENTS

    names = list(COMPONENTS) if cfg is not None else ["outcome"]
    weights = [float(cfg.weights.get(n, 0.0)) if cfg is not None else 1.0 for n in names]

    def make(name: str) -> Callable[..., list[float | None]]:
        def component(completions: list[Any], reward_parts: list[dict[str, float]], **_: Any) -> list[float | None]:
            return [parts.get(name) for parts in reward_parts]

        component.__name__ = name
        return component

    return [make(n) for n in names], weights


@dataclass
class _Round:
    """What the rollout of the current step found, for its step log."""

    step: int = 0
    started: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)


class _Engine:
    def __init__(self, run: GRPORun, loop: asyncio.AbstractEventLoop, scratch: Path) -> None:
        self.run, self.loop, self.scratch = run, loop, scratch
        self.current = _Round()

    # -- the rollout (called by TRL in its thread; the episodes run on the caller's event loop) ----
    def rollout(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        step = int(trainer.state.global_step) // self.run.settings.updates
        self.current = _Round(step=step, started=time.perf_counter())
        future = asyncio.run_coroutine_threadsafe(self._episodes(prompts, step), self.loop)
        return future.result()

    async def _episodes(self, prompts: list[Any], step: int) -> dict[str, list[Any]]:
        run, s = self.run, self.run.settings
        tasks = _groups(prompts, run.tasks, s.group)
        pool, how = rollout_pool(run, step, self.scratch)
        total = len(prompts)

        def progress(done: int, _total: int) -> None:
            run.bar.status(f"episode {done}/{total}")

        try:
            groups = await collect_groups(tasks, s.model_copy(update={"seed": s.seed + step * total}), pool=pool,
                                          store=run.store, reward_fn=run.reward_fn, run_id=run.run_id,
                                          tools=run.tools, progress=progress)
        finally:
            if pool is not run.pool:
                await pool.get(pool.orchestrator).aclose()
        return self._samples(groups, step, how)

    def _samples(self, groups: list[Any], step: int, how: str) -> dict[str, list[Any]]:
        from .rewards import episode_rewards

        run = self.run
        batch: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                       "reward_parts")}
        packed_all: list[Packed] = []
        trained = 0  # decisions of groups whose rewards differ (the others get no advantage)
        for g in groups:
            for episode, reward in zip(g.episodes, g.rewards):
                run.store.patch_episode_meta(episode.trace_id, {"grpo": {"step": step + 1, "reward": reward}})
                rows = decision_rows(run.store, episode.trace_id)
                packed = pack(rows, run.policy, run.settings.max_length)
                check_vocab(run.policy, [TrainSample(packed.prompt_ids, packed.completion_ids, 0.0,
                                                     meta={"model": rows[0].model if rows else None})])
                packed_all.append(packed)
                trained += packed.decisions if g.kept else 0
                parts = ({"outcome": reward} if run.reward_cfg is None
                         else episode_rewards(run.store, episode.trace_id, run.reward_cfg))
                for key, value in (("prompt_ids", packed.prompt_ids), ("completion_ids", packed.completion_ids),
                                   ("logprobs", packed.logprobs), ("env_mask", packed.env_mask),
                                   ("reward_parts", parts)):
                    batch[key].append(value)
        episodes = [e.trace_id for g in groups for e in g.episodes]
        rewards = [r for g in groups for r in g.rewards]
        valid, decisions = attempts(run.store, episodes)
        self.current.stats = {
            "episodes": len(episodes), "groups": len(groups), "groups_kept": sum(1 for g in groups if g.kept),
            "samples": sum(1 for p in packed_all if p.decisions), "mean_reward": sum(rewards) / len(rewards),
            "reward_sd": statistics.pstdev(rewards) if rewards else 0.0, "attempts": decisions, "trained": trained,
            "valid_rate": valid, "rollout_policy": how,
            "decisions": sum(p.decisions for p in packed_all), "left_out": sum(p.left_out for p in packed_all),
            "retokenized": sum(1 for p in packed_all if p.retokenized)}
        run.bar.status("update")
        return batch

    # -- the step log (TRL callback) ---------------------------------------------------------------
    def step_log(self, logs: dict[str, Any]) -> StepLog:
        st = self.current.stats
        entry = StepLog(step=self.current.step + 1, episodes=st["episodes"], groups=st["groups"],
                        groups_kept=st["groups_kept"], samples=st["samples"], mean_reward=st["mean_reward"],
                        valid_rate=st["valid_rate"], rollout_policy=st["rollout_policy"],
                        reward_sd=st["reward_sd"], decisions=st["attempts"], trained=st["trained"],
                        loss=_num(logs.get("loss")), clip_frac=_num(logs.get("clip_ratio/region_mean")),
                        kl=_num(logs.get("kl")), wall_s=time.perf_counter() - self.current.started)
        notes = []
        if st["left_out"]:
            notes.append(f"{st['decisions']} decisions packed, {st['left_out']} left out (their prompt does not "
                         "extend the episode's conversation; --engine loop trains on them)")
        if st["retokenized"]:
            notes.append(f"{st['retokenized']} episodes tokenized here (their backend gave no token ids)")
        if not st["groups_kept"]:
            notes.append(f"all {st['groups']} groups had equal rewards: zero advantage this step")
        entry.note = "; ".join(notes)
        return entry


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _groups(prompts: list[Any], tasks: list[Task], group: int) -> list[Task]:
    """The tasks of TRL's prompts, which come as ``group`` consecutive copies of ``"[i] prompt"``."""
    if len(prompts) % group:
        raise ConfigError(f"TRL passed {len(prompts)} prompts, not a multiple of group={group}")
    out = []
    for j in range(0, len(prompts), group):
        indices = {str(p).split("]", 1)[0].lstrip("[") for p in prompts[j:j + group]}
        if len(indices) != 1:
            raise ConfigError(f"TRL's prompts {j}..{j + group - 1} are not one task repeated group={group} times")
        out.append(tasks[int(indices.pop())])
    return out


def _callback(engine: _Engine) -> Any:
    from transformers import TrainerCallback

    run, updates = engine.run, engine.run.settings.updates

    class _Steps(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step % updates == 0 and state.global_step // updates >= run.last_step:
                control.should_training_stop = True
                control.should_save = True

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kw: Any) -> None:
            if logs and "loss" in logs and state.global_step % updates == 0 and state.is_world_process_zero:
                run.logged(engine.step_log(logs))

    return _Steps()


def _config(run: GRPORun, rows: int) -> Any:
    from trl.trainer.grpo_config import GRPOConfig

    s = run.settings
    micro = max(d for d in range(1, min(s.micro_batch, rows) + 1) if rows % d == 0)
    cuda = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=str(run.out / CHECKPOINTS), max_steps=s.steps * s.updates, learning_rate=s.lr,
        lr_scheduler_type="constant", per_device_train_batch_size=micro, gradient_accumulation_steps=rows // micro,
        steps_per_generation=rows // micro, num_generations=s.group, num_iterations=s.updates, epsilon=s.clip,
        beta=s.kl_beta, loss_type="dapo", scale_rewards="group", max_completion_length=s.max_length, seed=s.seed,
        logging_steps=1, save_strategy="steps", save_steps=s.updates, save_total_limit=1, report_to="none",
        disable_tqdm=True, activation_checkpointing=cuda, bf16=bool(cuda and torch.cuda.is_bf16_supported()),
        dataloader_pin_memory=cuda, log_completions=False,
    )


async def train(run: GRPORun) -> None:
    """TRL's GRPOTrainer from the last checkpoint (if any) up to ``run.last_step``."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from transformers.trainer_utils import get_last_checkpoint
    from trl.trainer.grpo_trainer import GRPOTrainer

    s = run.settings
    per_step = min(s.tasks_per_step or len(run.tasks), len(run.tasks))
    rows = [{"prompt": f"[{i}] {t.prompt}"} for i, t in enumerate(run.tasks)]
    folder = run.out / CHECKPOINTS
    last = get_last_checkpoint(str(folder)) if folder.is_dir() else None  # type: ignore[no-untyped-call]
    if last is not None:
        run.resume_at(int(Path(last).name.rsplit("-", 1)[1]) // s.updates, Path(last))
    if run.first_step >= run.last_step:
        return
    scratch = Path(tempfile.mkdtemp(prefix="orchestrion-grpo-"))
    engine = _Engine(run, asyncio.get_running_loop(), scratch)
    funcs, weights = reward_functions(run.reward_cfg)
    config = _config(run, per_step * s.group)
    config.reward_weights = weights
    trainer = GRPOTrainer(model=run.policy.model, reward_funcs=list[Any](funcs), args=config,
                          train_dataset=Dataset.from_list(rows), processing_class=run.policy.tokenizer,
                          rollout_func=engine.rollout, callbacks=[_callback(engine)])
    trainer.remove_callback(PrinterCallback)
    try:
        await asyncio.to_thread(trainer.train, resume_from_checkpoint=last)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
