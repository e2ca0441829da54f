"""The unit every policy-gradient trainer consumes: one orchestrator output and its credit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainSample:
    """One decision to train on.

    ``prompt_ids`` and ``completion_ids`` are the exact token ids the orchestrator saw and
    produced (never re-tokenized). ``advantage`` is the credit for the whole completion;
    ``token_weights`` (same length as ``completion_ids``) restricts it to some tokens, as
    counterfactual credit does for an edited span. ``reward`` is the raw reward before
    normalisation, kept for logging and reward-weighted regression.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    reward: float = 0.0
    token_weights: list[float] | None = None
    old_logprobs: list[float] | None = None
    episode_id: str | None = None
    decision_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def weights(self) -> list[float]:
        if self.token_weights is None:
            return [1.0] * len(self.completion_ids)
        if len(self.token_weights) != len(self.completion_ids):
            raise ValueError(
                f"token_weights has {len(self.token_weights)} entries for {len(self.completion_ids)} tokens"
            )
        return list(self.token_weights)
