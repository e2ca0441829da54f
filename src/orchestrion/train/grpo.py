"""GRPO on the orchestrator, as ParaManager trains it: groups of episodes, group-normalised credit.

Each step: solve every task ``group`` times with the current policy (whole episodes through
the runtime, its tools and sub-agents; :func:`orchestrion.train.rollouts.collect_groups`),
score them, normalise rewards within each group (groups whose rewards are all equal are
dropped), turn every orchestrator decision into a :class:`TrainSample` carrying its
episode's advantage, recompute the samples' log-probs under the HF policy (the old
policy of the ratio: llama.cpp's quantized log-probs are not the trained weights'), and
take ``updates`` optimizer steps on the clipped surrogate (:func:`grpo_loss`), each one
accumulated over micro-batches. The policy is a LoRA (peft) on the float32 weights; the
rollouts run the same adapter in llama.cpp (converted to GGUF each step) when the pool's
orchestrator is a llama.cpp model, and the pool's orchestrator as is otherwise.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from .._errors import ConfigError
from ..api import load_pool
from ..models.pool import Pool
from ..runtime.types import Task
from ..strategies.base import Strategy
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ..trace.tracer import new_id
from ._losses import grpo_loss
from ._policy import Policy
from ._types import TrainSample

Log = Callable[[str], None]


class _DatasetLike(Protocol):
    name: str
    tasks: list[Task]
    scorer: Any


@dataclass
class StepLog:
    """What one GRPO step did."""

    step: int
    episodes: int
    groups: int
    groups_kept: int
    samples: int
    mean_reward: float
    valid_rate: float | None
    loss: float | None = None
    clip_frac: float | None = None
    ratio: float | None = None
    kl: float | None = None
    rollout_gap: float | None = None  # mean |llama.cpp log-prob - HF log-prob| of the sampled tokens
    rollout_policy: str = "base"
    wall_s: float = 0.0
    note: str = ""


@dataclass
class GRPOResult:
    adapter_dir: Path
    gguf_path: Path | None
    run_id: str
    steps: list[StepLog] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- the update, on ready samples ------------------------------------------------------------
def _padded(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    return torch.tensor([list(r) + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32)


def _chunks(samples: Sequence[TrainSample], size: int) -> list[list[TrainSample]]:
    return [list(samples[i:i + size]) for i in range(0, len(samples), max(1, size))]


@torch.no_grad()
def set_old_logprobs(policy: Policy, samples: Sequence[TrainSample], *, micro_batch: int = 2) -> float | None:
    """Replace each sample's ``old_logprobs`` with the current HF policy's; return the mean gap to the old values."""
    gaps: list[float] = []
    for chunk in _chunks(samples, micro_batch):
        batch = policy.batch([s.prompt_ids for s in chunk], [s.completion_ids for s in chunk])
        logp = policy.logprobs(batch)
        for row, s in enumerate(chunk):
            fresh = logp[row, : len(s.completion_ids)].tolist()
            if s.old_logprobs is not None and len(s.old_logprobs) == len(fresh):
                gaps.extend(abs(a - b) for a, b in zip(s.old_logprobs, fresh))
                s.meta["rollout_logprobs"] = s.old_logprobs
            s.old_logprobs = fresh
    return sum(gaps) / len(gaps) if gaps else None


def grpo_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[TrainSample],
    *,
    clip_eps: float = 0.2,
    kl_beta: float = 0.0,
    micro_batch: int = 2,
    max_grad_norm: float = 1.0,
) -> dict[str, float]:
    """One optimizer step on ``samples`` (which need ``old_logprobs``): the token-level mean loss over
    all of them, accumulated micro-batch by micro-batch. Returns loss, clip_frac, ratio, kl."""
    total = sum(sum(s.weights()) for s in samples)
    if total <= 0:
        raise ValueError("no sample has a token with non-zero weight")
    optimizer.zero_grad(set_to_none=True)
    agg = {"loss": 0.0, "clip_frac": 0.0, "ratio": 0.0, "kl": 0.0}
    for chunk in _chunks(samples, micro_batch):
        if any(s.old_logprobs is None for s in chunk):
            raise ValueError("grpo_update needs old_logprobs on every sample (call set_old_logprobs first)")
        batch = policy.batch([s.prompt_ids for s in chunk], [s.completion_ids for s in chunk])
        width = batch.completion_len
        weights = _padded([s.weights() for s in chunk], width).to(policy.device)
        old = _padded([s.old_logprobs or [] for s in chunk], width).to(policy.device)
        adv = torch.tensor([s.advantage for s in chunk], dtype=torch.float32, device=policy.device)
        logp = policy.logprobs(batch)
        ref = policy.frozen_logprobs(batch) if kl_beta > 0 else None
        loss, stats = grpo_loss(logp, old, adv, weights, clip_eps=clip_eps, ref_logp=ref, kl_beta=kl_beta)
        share = float(weights.sum()) / total
        (loss * share).backward()  # type: ignore[no-untyped-call]
        agg["loss"] += float(loss.detach()) * share
        for key in ("clip_frac", "ratio", "kl"):
            agg[key] += stats[key] * share
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    return agg


# -- samples from episodes ---------------------------------------------------------------------
def retokenized_samples(policy: Policy, store: TraceStore,
                        episodes: Sequence[tuple[str, float, float]]) -> list[TrainSample]:
    """Samples for decisions a backend gave no token ids for (scripted, some servers): the chat
    template applied to the stored messages, the stored output tokenized. ``episodes`` holds
    ``(episode_id, reward, advantage)``."""
    from .records import load_records

    credit = {eid: (reward, adv) for eid, reward, adv in episodes}
    samples = []
    for rec in load_records(store, episode_ids=list(credit)):
        reward, adv = credit[rec.episode_id]
        prompt = rec.prompt_token_ids or policy.prompt_ids(rec.messages)
        completion = rec.token_ids or policy.text_ids(rec.output)
        samples.append(TrainSample(prompt_ids=list(prompt), completion_ids=list(completion), advantage=adv,
                                   reward=reward, episode_id=rec.episode_id, decision_id=rec.decision_id,
                                   meta={"retokenized": True, "valid": rec.valid}))
    return samples


def scoring_reward(scorer: Any, store: TraceStore, cfg: Any = None) -> Any:
    """The rollouts' reward function: the scorer's score (or the ``cfg`` combination of reward
    components around it, :func:`orchestrion.train.rollouts.scored_reward`), with the score
    written into the episode's meta (``score``, ``correct``, ...) as ``orchestrion eval`` does,
    so a training run can be exported or distilled (``train opod``) like an eval run."""
    from .rollouts import scored_reward

    async def reward(result: Any, task: Task) -> float:
        score = await scorer(task, result.answer)
        meta = score.to_meta() if hasattr(score, "to_meta") else {"score": float(score.value)}
        store.patch_episode_meta(result.trace_id, meta)
        await store.aflush()

        async def known(_task: Task, _output: str) -> Any:
            return score

        return await scored_reward(known, store=store if cfg is not None else None, cfg=cfg)(result, task)

    return reward


def _valid_rate(store: TraceStore, episode_ids: Sequence[str]) -> float | None:
    if not episode_ids:
        return None
    flags = store.decision_validity(episode_ids)
    return sum(flags) / len(flags) if flags else None


# -- the loop ----------------------------------------------------------------------------------
class _Trainer:
    def __init__(self, policy: Policy, pool: Pool, store: TraceStore, out: Path, log: Log,
                 settings: dict[str, Any]) -> None:
        self.policy, self.pool, self.store, self.out, self.log = policy, pool, store, out, log
        self.s = settings
        self.notes: list[str] = []
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=float(settings["lr"]))
        self.scratch = Path(tempfile.mkdtemp(prefix="orchestrion-grpo-"))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            self.log(text)

    def rollout_pool(self, step: int) -> tuple[Pool, str]:
        """The pool whose orchestrator runs the current policy in llama.cpp, or the base pool (and why)."""
        spec = self.pool.spec(self.pool.orchestrator)
        if spec.backend != "llama-cpp":
            self.note(f"rollouts use orchestrator '{spec.name}' ({spec.backend}) as is: only a llama.cpp "
                      "orchestrator can run the adapter being trained")
            return self.pool, "pool"
        if step == 0 and self.policy.init_adapter is None:
            return self.pool, "base"  # a fresh LoRA starts at zero: the base model is the policy
        attach = getattr(self.pool, "with_orchestrator_adapter", None)
        if attach is None:
            self.note("rollouts use the base model: Pool.with_orchestrator_adapter is not available")
            return self.pool, "base"
        _, gguf, why = self.policy.save(self.scratch / f"step{step}")
        if gguf is None:
            self.note(f"rollouts use the base model: {why}")
            return self.pool, "base"
        adapted: Pool = attach(gguf)
        return adapted, "adapter"

    async def step(self, step: int, tasks: list[Task], reward_fn: Any, run_id: str) -> StepLog:
        from .rollouts import collect_groups, group_samples

        start = time.perf_counter()
        pool, how = self.rollout_pool(step)
        group = int(self.s["group"])
        total = len(tasks) * group

        def progress(done: int, _total: int) -> None:
            self.log(f"step {step + 1}: episode {done}/{total}")

        try:
            groups = await collect_groups(
                tasks, strategy=self.s["strategy"], pool=pool, store=self.store, group=group, reward_fn=reward_fn,
                options=self.s["options"], run_id=run_id, tools=self.s.get("tools"),
                seed=int(self.s["seed"]) + step * total,
                concurrency=int(self.s["concurrency"]), progress=progress)
        finally:
            if pool is not self.pool:
                await pool.get(pool.orchestrator).aclose()
        episodes = [e.trace_id for g in groups for e in g.episodes]
        rewards = [r for g in groups for r in g.rewards]
        samples: list[TrainSample] = []
        for g in groups:
            for i, (e, r) in enumerate(zip(g.episodes, g.rewards)):
                credit = {"step": step + 1, "reward": r, "advantage": None if g.advantages is None else g.advantages[i]}
                self.store.patch_episode_meta(e.trace_id, {"grpo": credit})
            if g.advantages is None:
                continue
            found = group_samples(g, self.store)
            if not found:
                found = retokenized_samples(self.policy, self.store,
                                            [(e.trace_id, r, a) for e, r, a in zip(g.episodes, g.rewards,
                                                                                   g.advantages)])
            samples.extend(found)
        limit = int(self.s["max_length"])
        usable = [s for s in samples if s.completion_ids and len(s.prompt_ids) + len(s.completion_ids) <= limit]
        entry = StepLog(step=step + 1, episodes=len(episodes), groups=len(groups),
                        groups_kept=sum(1 for g in groups if g.advantages is not None), samples=len(usable),
                        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
                        valid_rate=_valid_rate(self.store, episodes), rollout_policy=how)
        if len(usable) < len(samples):
            entry.note = f"{len(samples) - len(usable)} samples longer than {limit} tokens left out; "
        if not entry.groups_kept:
            entry.note += f"all {len(groups)} groups had equal rewards: no update this step"
        elif not usable:
            entry.note += "no decision with tokens to train on: no update this step"
        else:
            micro = int(self.s["micro_batch"])
            entry.rollout_gap = set_old_logprobs(self.policy, usable, micro_batch=micro)
            stats: dict[str, float] = {}
            for _ in range(int(self.s["updates"])):
                stats = grpo_update(self.policy, self.optimizer, usable, clip_eps=float(self.s["clip"]),
                                    kl_beta=float(self.s["kl_beta"]), micro_batch=micro)
            entry.loss, entry.clip_frac, entry.ratio, entry.kl = (
                stats["loss"],
                stats["clip_frac"],
                stats["ratio"],
                stats["kl"],
            )
        entry.wall_s = time.perf_counter() - start
        return entry


def _describe(e: StepLog) -> str:
    valid = "n/a" if e.valid_rate is None else f"{e.valid_rate:.2f}"
    loss = "-" if e.loss is None else f"{e.loss:.4f}"
    text = (f"step {e.step}: loss={loss} reward={e.mean_reward:.3f} valid={valid} "
            f"groups kept={e.groups_kept}/{e.groups} samples={e.samples} rollouts={e.rollout_policy} {e.wall_s:.1f}s")
    return text + (f" ({e.note.strip('; ')})" if e.note else "")


async def atrain_grpo(
    dataset: str | _DatasetLike,
    *,
    out: str | Path = "grpo-adapter",
    limit: int | None = 4,
    group: int = 4,
    steps: int = 2,
    strategy: str | Strategy = "para",
    pool: Pool | str | Path | None = None,
    adapter: str | Path | None = None,
    lr: float = 1e-4,
    clip: float = 0.2,
    kl_beta: float = 0.0,
    rewards: str | Path | None = None,
    seed: int = 0,
    store: TraceStore | str | Path | None = None,
    options: dict[str, Any] | None = None,
    tools: ToolRegistry | None = None,
    updates: int = 1,
    micro_batch: int = 2,
    concurrency: int = 1,
    max_length: int = 2048,
    lora_r: int = 8,
    lora_alpha: int = 16,
    gguf_path: str | Path | None = None,
    progress: Log | None = None,
) -> GRPOResult:
    """Train the orchestrator with GRPO; see the module docstring. Writes the adapter, adapter.gguf
    and train_log.json to ``out``; the rollouts are episodes of a run (kind ``grpo``) in ``store``."""
    if group < 2:
        raise ConfigError(f"--group {group}: GRPO compares episodes within a group; use 2 or more")
    if steps < 1 or updates < 1 or micro_batch < 1:
        raise ConfigError("--steps, --updates and --micro-batch must be at least 1")
    log: Log = progress or (lambda _text: None)
    data = _load_dataset(dataset, limit, seed)
    the_store = store if isinstance(store, TraceStore) else TraceStore(store)
    the_pool = load_pool(pool)
    reward_cfg = None
    if rewards is not None:
        from .rewards import load_reward_config

        reward_cfg = load_reward_config(rewards)
    reward_fn = scoring_reward(data.scorer, the_store, reward_cfg)
    out_dir = Path(out)
    log(f"loading the policy ({'adapter ' + str(adapter) if adapter else 'fresh LoRA'}) ...")
    policy = Policy.load(Path(adapter) if adapter else None, lora_r=lora_r, lora_alpha=lora_alpha,
                         gguf_path=Path(gguf_path) if gguf_path else None, seed=seed)
    settings: dict[str, Any] = {"dataset": data.name, "tasks": len(data.tasks), "group": group, "steps": steps,
                                "strategy": strategy if isinstance(strategy, str) else strategy.name,
                                "pool": the_pool.source, "adapter": str(adapter) if adapter else None,
                                "lr": lr, "clip": clip, "kl_beta": kl_beta,
                                "rewards": str(rewards) if rewards else None,
                                "seed": seed, "options": dict(options or {}), "updates": updates,
                                "micro_batch": micro_batch, "concurrency": concurrency, "max_length": max_length,
                                "lora_r": lora_r, "lora_alpha": lora_alpha, "out": str(out_dir)}
    run_id = new_id()
    the_store.create_run(run_id, "grpo", settings)
    log(f"run {run_id}: {len(data.tasks)} tasks x group {group}, {steps} steps, strategy {settings['strategy']}")
    trainer = _Trainer(policy, the_pool, the_store, out_dir, log, {**settings, "strategy": strategy, "tools": tools})
    history: list[StepLog] = []
    status = "interrupted"
    try:
        for step in range(steps):
            entry = await trainer.step(step, data.tasks, reward_fn, run_id)
            history.append(entry)
            log(_describe(entry))
            _write_log(out_dir, settings, run_id, history, trainer.notes)
        adapter_dir, gguf, why = policy.save(out_dir)
        if why:
            trainer.note(why)
        _write_log(out_dir, settings, run_id, history, trainer.notes)
        status = "finished"
    finally:
        shutil.rmtree(trainer.scratch, ignore_errors=True)
        the_store.set_run_status(run_id, status)
        await the_store.aflush()
    return GRPOResult(adapter_dir, gguf, run_id, history, trainer.notes)


def train_grpo(dataset: str | _DatasetLike, **kwargs: Any) -> GRPOResult:
    """:func:`atrain_grpo` with its own event loop."""
    return asyncio.run(atrain_grpo(dataset, **kwargs))


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


def _write_log(out: Path, settings: dict[str, Any], run_id: str, history: list[StepLog], notes: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    body = {"trainer": "grpo", "run_id": run_id, "config": settings, "steps": [asdict(e) for e in history],
            "notes": notes}
    (out / "train_log.json").write_text(json.dumps(body, indent=2, default=str), encoding="utf-8")


__all__ = ["GRPOResult", "StepLog", "atrain_grpo", "grpo_update", "retokenized_samples", "set_old_logprobs",
           "train_grpo"]
