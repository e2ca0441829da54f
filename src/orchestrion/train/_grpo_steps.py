"""GRPO's steps, shared by both engines (``_grpo_loop``, ``_grpo_trl``) and the command in
:mod:`.grpo`: the per-step log, the run state, the update on ready samples, and the helpers
every step calls."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .._errors import ConfigError
from ..models.pool import Pool
from ..runtime.types import Task
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ._losses import grpo_loss
from ._policy import Policy
from ._progress import StepBar
from ._types import TrainSample
from .settings import GRPOSettings

Log = Callable[[str], None]


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
    reward_sd: float = 0.0  # spread of the episodes' rewards (population sd)
    decisions: int = 0  # decision attempts of the step's episodes
    trained: int = 0  # of those, the decisions the update trained on (kept groups, within max_length)
    loss: float | None = None
    clip_frac: float | None = None
    ratio: float | None = None
    kl: float | None = None
    rollout_gap: float | None = None  # mean |llama.cpp log-prob - HF log-prob| of the sampled tokens
    rollout_gap_p95: float | None = None  # its 95th percentile over the step's tokens
    rollout_policy: str = "base"
    wall_s: float = 0.0
    note: str = ""


@dataclass
class GRPORun:
    """What an engine is given: the settings, the tasks, the pool, the store, the reward, the policy."""

    settings: GRPOSettings
    tasks: list[Task]
    pool: Pool
    store: TraceStore
    reward_fn: Any
    reward_cfg: Any
    policy: Policy
    run_id: str
    record: dict[str, Any]
    bar: StepBar
    tools: ToolRegistry | None = None
    first_step: int = 0
    history: list[StepLog] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return Path(self.settings.out)

    @property
    def last_step(self) -> int:
        """The step this call stops after (``max_steps_now`` limits it)."""
        s = self.settings
        return s.steps if s.max_steps_now is None else min(s.steps, self.first_step + s.max_steps_now)

    def resume_at(self, step: int, where: Path) -> None:
        """Continue after ``step`` (saved in ``where``): the steps logged so far are kept, the bar starts there."""
        self.first_step = step
        self.history = [e for e in _previous_steps(self.out) if e.step <= step]
        self.bar.set_done(step)
        self.bar.log(f"resuming from {where} after step {step} of {self.settings.steps}")

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            self.bar.log(text)

    def logged(self, entry: StepLog) -> None:
        """Record a finished step: the log line, train_log.json, the bar."""
        self.history.append(entry)
        self.bar.log(describe(entry))
        write_log(self)
        self.bar.advance()


# -- the update, on ready samples ------------------------------------------------------------
def _padded(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    return torch.tensor([list(r) + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32)


def _chunks(samples: Sequence[TrainSample], size: int) -> list[list[TrainSample]]:
    return [list(samples[i:i + size]) for i in range(0, len(samples), max(1, size))]


def _adopt(chunk: Sequence[TrainSample], logp: torch.Tensor) -> list[float]:
    """Make ``logp`` (one row per sample, detached) the chunk's ``old_logprobs``; return the
    per-token gaps to the log-probs the samples were rolled out with, where they carry them."""
    gaps: list[float] = []
    for row, s in enumerate(chunk):
        fresh = logp[row, : len(s.completion_ids)].tolist()
        if s.old_logprobs is not None and len(s.old_logprobs) == len(fresh):
            gaps.extend(abs(a - b) for a, b in zip(s.old_logprobs, fresh))
            s.meta["rollout_logprobs"] = s.old_logprobs
        s.old_logprobs = fresh
    return gaps


def rollout_gap_stats(samples: Sequence[TrainSample]) -> tuple[float, float] | None:
    """The sampler/learner disagreement over ``samples``' tokens, after their old log-probs were
    set (:func:`set_old_logprobs`, or an on-policy :func:`grpo_update`): the mean and the 95th
    percentile (nearest rank) of ``|log p(rollout) - log p(learner)|`` per token, over the samples
    whose rollout backend reported log-probs; None when none did."""
    gaps = sorted(abs(a - b) for s in samples if s.old_logprobs is not None
                  and len(rolled := s.meta.get("rollout_logprobs") or []) == len(s.old_logprobs)
                  for a, b in zip(rolled, s.old_logprobs))
    if not gaps:
        return None
    return sum(gaps) / len(gaps), gaps[max(0, math.ceil(0.95 * len(gaps)) - 1)]


@torch.no_grad()
def set_old_logprobs(policy: Policy, samples: Sequence[TrainSample], *, micro_batch: int = 2) -> float | None:
    """Replace each sample's ``old_logprobs`` with the current HF policy's; return the mean gap to the old values."""
    gaps: list[float] = []
    for chunk in _chunks(samples, micro_batch):
        batch = policy.batch([s.prompt_ids for s in chunk], [s.completion_ids for s in chunk])
        gaps.extend(_adopt(chunk, policy.logprobs(batch)))
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
    on_policy: bool = False,
) -> dict[str, float]:
    """One optimizer step on ``samples`` (which need ``old_logprobs``): the token-level mean loss over
    all of them, accumulated micro-batch by micro-batch. Returns loss, clip_frac, ratio, kl.

    ``on_policy``: the samples were just rolled out from the current weights and this is their only
    update, so the old policy is the current one. Its log-probs are then this step's own forward
    pass, detached, instead of a separate :func:`set_old_logprobs` pass: one no-grad forward
    over every sample saved. Each sample's ``old_logprobs`` is set as
    set_old_logprobs sets it, and ``rollout_gap`` (the mean gap to the rollout's log-probs) joins
    the stats where the samples carried them."""
    total = sum(sum(s.weights()) for s in samples)
    if total <= 0:
        raise ValueError("no sample has a token with non-zero weight")
    optimizer.zero_grad(set_to_none=True)
    agg = {"loss": 0.0, "clip_frac": 0.0, "ratio": 0.0, "kl": 0.0}
    gaps: list[float] = []
    for chunk in _chunks(samples, micro_batch):
        if not on_policy and any(s.old_logprobs is None for s in chunk):
            raise ValueError("grpo_update needs old_logprobs on every sample (call set_old_logprobs first)")
        batch = policy.batch([s.prompt_ids for s in chunk], [s.completion_ids for s in chunk])
        width = batch.completion_len
        weights = _padded([s.weights() for s in chunk], width).to(policy.device)
        adv = torch.tensor([s.advantage for s in chunk], dtype=torch.float32, device=policy.device)
        logp = policy.logprobs(batch)
        if on_policy:
            old = logp.detach()
            gaps.extend(_adopt(chunk, old))
        else:
            old = _padded([s.old_logprobs or [] for s in chunk], width).to(policy.device)
        ref = policy.frozen_logprobs(batch) if kl_beta > 0 else None
        loss, stats = grpo_loss(logp, old, adv, weights, clip_eps=clip_eps, ref_logp=ref, kl_beta=kl_beta)
        share = float(weights.sum()) / total
        (loss * share).backward()  # type: ignore[no-untyped-call]
        agg["loss"] += float(loss.detach()) * share
        for key in ("clip_frac", "ratio", "kl"):
            agg[key] += stats[key] * share
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    if gaps:
        agg["rollout_gap"] = sum(gaps) / len(gaps)
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


# -- shared by the engines ---------------------------------------------------------------------
def rollout_pool(run: GRPORun, step: int, scratch: Path) -> tuple[Pool, str]:
    """The pool whose orchestrator runs the current policy in llama.cpp, or the base pool (and why):
    the policy's LoRA is saved, converted to GGUF and loaded into a copy of the orchestrator."""
    spec = run.pool.spec(run.pool.orchestrator)
    if spec.backend != "llama-cpp":
        run.note(f"rollouts use orchestrator '{spec.name}' ({spec.backend}) as is: only a llama.cpp "
                 "orchestrator can run the adapter being trained")
        return run.pool, "pool"
    if step == 0 and run.policy.init_adapter is None:
        return run.pool, "base"  # a fresh LoRA starts at zero: the base model is the policy
    _, gguf, why = run.policy.save(scratch / f"step{step}")
    if gguf is None:
        run.note(f"rollouts use the base model: {why}")
        return run.pool, "base"
    return run.pool.with_orchestrator_adapter(gguf), "adapter"


def check_vocab(policy: Policy, samples: Sequence[TrainSample]) -> None:
    """Refuse decisions whose token ids the policy cannot have produced: the pool's orchestrator is another model."""
    size = len(policy.tokenizer)
    for sample in samples:
        top = max([*sample.prompt_ids, *sample.completion_ids], default=0)
        if top >= size:
            model = sample.meta.get("model", "the orchestrator")
            raise ConfigError(f"decision of model '{model}' has token id {top}, outside the vocabulary ({size}) of "
                              "the model being trained: the pool's orchestrator must run that model's GGUF "
                              "(e.g. --pool tiny for SmolLM2)")


def describe(e: StepLog) -> str:
    valid = "n/a" if e.valid_rate is None else f"{e.valid_rate:.2f}"
    loss = "-" if e.loss is None else f"{e.loss:.4f}"
    text = (f"step {e.step}: loss={loss} reward={e.mean_reward:.3f}±{e.reward_sd:.3f} valid={valid} "
            f"groups kept={e.groups_kept}/{e.groups} samples={e.samples} decisions trained={e.trained}/{e.decisions} "
            f"rollouts={e.rollout_policy} {e.wall_s:.1f}s")
    return text + (f" ({e.note.strip('; ')})" if e.note else "")


def attempts(store: TraceStore, episode_ids: Sequence[str]) -> tuple[float | None, int]:
    """The valid share of the episodes' decision attempts (None when there are none), and how many."""
    flags = store.decision_validity(episode_ids) if episode_ids else []
    return (sum(flags) / len(flags) if flags else None), len(flags)


def write_log(run: GRPORun) -> None:
    run.out.mkdir(parents=True, exist_ok=True)
    body = {"trainer": "grpo", "engine": run.settings.engine, "run_id": run.run_id, "config": run.record,
            "steps": [asdict(e) for e in run.history], "notes": run.notes}
    (run.out / "train_log.json").write_text(json.dumps(body, indent=2, default=str), encoding="utf-8")


def _previous_steps(out: Path) -> list[StepLog]:
    file = out / "train_log.json"
    if not file.is_file():
        return []
    return [StepLog(**e) for e in json.loads(file.read_text(encoding="utf-8")).get("steps", [])]
