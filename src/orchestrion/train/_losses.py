"""Loss functions of the policy trainers, as plain torch functions.

Shapes: a batch of ``B`` decisions, each a prompt (the exact context) and a completion
(the orchestrator's output) of at most ``T`` tokens. Per-token tensors are ``[B, T]``,
padded on the right; a mask (or weights) tensor of the same shape says which entries
are real. Nothing here knows about models beyond "a causal LM called with input ids".

* :func:`token_logprobs` / :func:`completion_logits`: log p (or the logits) of each
  completion token given everything before it, for a padded batch.
* :func:`grpo_loss`: the clipped-ratio policy gradient of GRPO, a token-level mean over
  the weighted tokens, with an optional k3 KL penalty towards a reference policy.
* :func:`reverse_kl`: KL(student || teacher) over the full vocabulary, per token.
* :func:`rwr_loss`: reward-weighted regression (reward times the mean log-likelihood).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class PaddedBatch:
    """Prompts left-padded and completions right-padded, so every completion starts at one column.

    ``input_ids``/``attention_mask``/``position_ids`` are ``[B, P + T]``; the completion of row
    ``i`` occupies columns ``P .. P + len_i``. ``targets``/``mask`` are ``[B, T]``.
    """

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    targets: Tensor
    mask: Tensor

    @property
    def completion_len(self) -> int:
        return int(self.targets.shape[1])

    def to(self, device: torch.device | str) -> PaddedBatch:
        return PaddedBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.position_ids,
                                                    self.targets, self.mask)))


def pad_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], *,
              pad_id: int = 0) -> PaddedBatch:
    """Build a :class:`PaddedBatch`; positions count real tokens only, so padding changes nothing."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(
            f"need as many prompts as completions (got {len(prompts)} and {len(completions)}), at least one"
        )
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    p_len = max(len(p) for p in prompts)
    t_len = max(1, max(len(c) for c in completions))
    rows, attn, targets, mask = [], [], [], []
    for p, c in zip(prompts, completions):
        left, right = p_len - len(p), t_len - len(c)
        rows.append([pad_id] * left + list(p) + list(c) + [pad_id] * right)
        attn.append([0] * left + [1] * (len(p) + len(c)) + [0] * right)
        targets.append(list(c) + [pad_id] * right)
        mask.append([1.0] * len(c) + [0.0] * right)
    attention = torch.tensor(attn, dtype=torch.long)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return PaddedBatch(
        input_ids=torch.tensor(rows, dtype=torch.long),
        attention_mask=attention,
        position_ids=positions,
        targets=torch.tensor(targets, dtype=torch.long),
        mask=torch.tensor(mask, dtype=torch.float32),
    )


def completion_logits(model: Any, batch: PaddedBatch) -> Tensor:
    """Logits ``[B, T, V]`` that predict each completion token (only those positions reach the LM head)."""
    t_len = batch.completion_len
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=t_len + 1,
        use_cache=False,
    )
    logits: Tensor = out.logits[:, :-1, :]
    return logits.float()


def gather_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log softmax(logits)[target] per position, ``[B, T]``."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_logprobs(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    pad_id: int = 0,
) -> Tensor:
    """log p of each completion token given everything before it, ``[B, T]`` (0 on padding).

    Gradients flow when called outside ``torch.no_grad``; :func:`completion_mask` gives the mask.
    """
    batch = pad_batch(prompt_ids, completion_ids, pad_id=pad_id)
    logp = gather_logprobs(completion_logits(model, batch), batch.targets)
    return logp * batch.mask


def completion_mask(completion_ids: Sequence[Sequence[int]]) -> Tensor:
    """1 on real completion tokens, 0 on padding: ``[B, T]`` as :func:`token_logprobs` pads them."""
    t_len = max(1, max((len(c) for c in completion_ids), default=0))
    return torch.tensor([[1.0] * len(c) + [0.0] * (t_len - len(c)) for c in completion_ids])


def _masked_mean(values: Tensor, weights: Tensor) -> Tensor:
    return (values * weights).sum() / weights.sum().clamp(min=1e-8)


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    weights: Tensor,
    *,
    clip_eps: float = 0.2,
    ref_logp: Tensor | None = None,
    kl_beta: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO's clipped surrogate on the weighted (orchestrator) tokens, averaged per token.

    ``advantages`` is ``[B]`` (one per decision) or ``[B, T]``; ``weights`` is ``[B, T]`` (0 on
    padding and on tokens that get no credit). With ``ref_logp`` the k3 estimate of
    KL(policy || reference) is reported, and added with weight ``kl_beta``.
    Returns ``(loss, stats)`` with stats ``clip_frac``, ``ratio``, ``kl``.
    """
    adv = advantages.unsqueeze(-1).expand_as(logp) if advantages.dim() == 1 else advantages
    ratio = torch.exp(logp - old_logp.detach())
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    active = (weights != 0).float()
    stats: dict[str, float] = {}
    with torch.no_grad():
        binds = ((ratio > 1.0 + clip_eps) & (adv > 0)) | ((ratio < 1.0 - clip_eps) & (adv < 0))
        stats["clip_frac"] = float(_masked_mean(binds.float(), active))
        stats["ratio"] = float(_masked_mean(ratio, active))
    if ref_logp is not None:
        delta = ref_logp.detach() - logp
        k3 = torch.exp(delta) - delta - 1.0
        stats["kl"] = float(_masked_mean(k3.detach(), active))
        if kl_beta:
            per_token = per_token + kl_beta * k3
    else:
        stats["kl"] = 0.0
    loss = _masked_mean(per_token, weights)
    return loss, stats


def reverse_kl(student_logits: Tensor, teacher_logits: Tensor, mask: Tensor) -> Tensor:
    """KL(student || teacher) over the full vocabulary at every masked position.

    Averaged over the tokens of each decision, then over the decisions that have any token
    (POrchestra's normalisation). The teacher gets no gradient.
    """
    log_s = torch.log_softmax(student_logits.float(), dim=-1)
    log_t = torch.log_softmax(teacher_logits.detach().float(), dim=-1)
    per_token = (log_s.exp() * (log_s - log_t)).sum(-1)
    return _per_decision_mean(per_token, mask)


def rwr_loss(logp: Tensor, rewards: Tensor, mask: Tensor) -> Tensor:
    """Reward-weighted regression: ``-(reward * mean log p of the output)``, averaged over decisions."""
    return _per_decision_mean(-(rewards.unsqueeze(-1) * logp), mask)


def _per_decision_mean(per_token: Tensor, mask: Tensor) -> Tensor:
    counts = mask.sum(-1)
    per_row = (per_token * mask).sum(-1) / counts.clamp(min=1.0)
    has = (counts > 0).float()
    return (per_row * has).sum() / has.sum().clamp(min=1.0)
