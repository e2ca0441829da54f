"""One settings object per trainer, in the style of TRL's ``SFTConfig`` / ``GRPOConfig``.

Each field has a default and a one-line description (``Model.model_fields[name].description``);
unknown fields and out-of-range values are refused with the field's name. What a trainer is
*given* to work with (the pool, the trace store, tools, a reward function, progress callbacks)
stays a keyword argument of the function; what it is *set to do* lives here.

* :class:`RolloutSettings` - how training episodes are sampled (``collect_group``, ``collect_groups``).
* :class:`TreeSettings` - tree rollouts (``collect_tree``): rollouts plus branching and depth.
* :class:`SFTSettings` - ``train_sft``.
* :class:`GRPOSettings` - ``atrain_grpo`` (a :class:`RolloutSettings` plus the update).
* :class:`OPODSettings` - ``atrain_opod``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from .._errors import ConfigError

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_assignment=True)

    @classmethod
    def build(cls, **values: Any) -> Any:
        """Like the constructor, but a bad value is a one-line :class:`ConfigError` naming the field."""
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(x) for x in first["loc"]) or "(settings)"
            raise ConfigError(f"{cls.__name__}.{field}: {first['msg']}") from None

    def record(self) -> dict[str, Any]:
        """JSON-ready values for a run record or train_log.json (a strategy object by its name)."""
        return dict(self.model_dump(mode="json"))

    @field_validator("lora_alpha", check_fields=False)
    @classmethod
    def _alpha(cls, value: int, info: ValidationInfo) -> int:
        """A LoRA alpha of 0 is twice the rank (the scale of a fresh adapter is then 2)."""
        return value or 2 * int(info.data.get("lora_r", 8))


class RolloutSettings(_Settings):
    """How training episodes are sampled: which strategy, how many per task, with which seeds."""

    strategy: Any = Field(default="para", description="strategy whose orchestrator is trained: a registered name or a "
                                                "Strategy object")
    options: dict[str, Any] = Field(default_factory=dict, description="strategy options (KEY=VALUE of --set)")
    group: int = Field(default=4, ge=1, description="episodes per task (G); GRPO needs 2 or more to compare them")
    seed: int = Field(default=0, description="first episode seed; every episode of a collection gets its own")
    concurrency: int = Field(default=1, ge=1, description="episodes run at once")

    @property
    def strategy_name(self) -> str:
        return self.strategy if isinstance(self.strategy, str) else str(getattr(self.strategy, "name", self.strategy))

    def record(self) -> dict[str, Any]:
        out = dict(self.model_dump(mode="json", exclude={"strategy"}))
        return {"strategy": self.strategy_name, **out}


class TreeSettings(RolloutSettings):
    """Tree rollouts (E3-Orch): a root episode branched at its first ``max_depth`` decisions."""

    branching: int = Field(default=2, ge=1, description="alternative decisions sampled at each branch point")
    max_depth: int = Field(default=2, ge=0, description="decisions (from the first) that are branched")


class SFTSettings(_Settings):
    """Supervised fine-tuning of the orchestrator's LoRA (TRL SFTTrainer)."""

    steps: int = Field(default=20, ge=1, description="optimizer steps")
    lr: float = Field(default=2e-4, gt=0, description="learning rate")
    batch_size: int = Field(default=2, ge=1, description="rows per device per step")
    lora_r: int = Field(default=8, ge=1, description="LoRA rank")
    lora_alpha: int = Field(default=16, ge=1, description="LoRA alpha (scale = alpha / rank)")
    max_length: int = Field(default=1024, ge=8, description="rows with more tokens are left out")
    seed: int = Field(default=0, description="seed of the LoRA init and the data order")
    gguf_path: Path | None = Field(default=None, description="base orchestrator GGUF (default: the embedded SmolLM2)")
    target_modules: list[str] = Field(default_factory=lambda: list(LORA_MODULES),
                                      description="the linear layers that get a LoRA")


class GRPOSettings(RolloutSettings):
    """GRPO on the orchestrator: the rollouts (inherited fields) and the update."""

    group: int = Field(default=4, ge=2, description="episodes per task per step (G); GRPO compares them")

    engine: Literal["trl", "loop"] = Field(
        default="trl", description="trl: TRL's GRPOTrainer with an Orchestrion rollout_func (one sample per "
                                   "episode); loop: the hand-written loop (one sample per decision)")
    out: Path = Field(default=Path("grpo-adapter"),
                      description="where the adapter, adapter.gguf, train_log.json and the resume checkpoints go")
    limit: int | None = Field(default=4, ge=1, description="train on the first N tasks of the dataset (None: all)")
    steps: int = Field(default=2, ge=1, description="rollout + update rounds (optimizer steps)")
    tasks_per_step: int = Field(default=0, ge=0, description="tasks rolled out per step (0: all tasks of the dataset)")
    adapter: Path | None = Field(default=None, description="PEFT adapter dir to start from (e.g. from train sft)")
    lr: float = Field(default=1e-4, gt=0, description="learning rate (AdamW, constant)")
    clip: float = Field(default=0.2, ge=0, description="PPO/GRPO ratio clip epsilon")
    kl_beta: float = Field(default=0.0, ge=0, description="weight of the KL to the starting policy")
    rewards: Path | None = Field(default=None, description="reward config YAML (examples/rewards.yaml); default: the "
                                                    "scorer's score")
    updates: int = Field(default=1, ge=1, description="optimizer passes over each batch of rollouts (GRPO's mu)")
    micro_batch: int = Field(default=2, ge=1, description="samples per forward pass")
    max_length: int = Field(default=2048, ge=16, description="longest sample (prompt + completion tokens) trained on")
    lora_r: int = Field(default=8, ge=1, description="LoRA rank of a fresh adapter")
    lora_alpha: int = Field(default=0, ge=0, validate_default=True,
                            description="LoRA alpha of a fresh adapter (0: twice lora_r)")
    gguf_path: Path | None = Field(default=None, description="base orchestrator GGUF (default: the embedded SmolLM2)")
    max_steps_now: int | None = Field(
        default=None, ge=1, description="stop after this many steps in this call (the rest on a rerun with the "
                                        "same out dir)")


class OPODSettings(_Settings):
    """OPOD (POrchestra): hindsight hints, on-policy self-distillation and reward-weighted regression."""

    out: Path = Field(default=Path("opod-adapter"), description="where the adapter, adapter.gguf, judgments.jsonl, "
                                                         "train_log.json and the resume checkpoint go")
    steps: int = Field(default=2, ge=1, description="optimizer steps")
    adapter: Path | None = Field(default=None, description="the SFT adapter dir: teacher and student start there")
    lam: float = Field(default=1.0, ge=0, description="weight of reward-weighted regression next to the reverse KL")
    judge: str | None = Field(default=None, description="pool model that attributes hindsight hints (default: the "
                                                "synthesizer)")
    lr: float = Field(default=1e-4, gt=0, description="learning rate (AdamW)")
    batch_size: int = Field(default=4, ge=1, description="decisions of each kind per step")
    micro_batch: int = Field(default=2, ge=1, description="decisions per forward pass")
    max_new_tokens: int = Field(default=128, ge=1, description="longest action the student samples")
    temperature: float = Field(default=1.0, ge=0, description="the student's sampling temperature")
    max_decisions: int | None = Field(default=None, ge=1, description="judge at most this many decisions")
    hindsight: bool = Field(default=False, description="judge only the decisions of episodes that lost points or "
                                                       "overspent against other scored episodes of the same task in "
                                                       "the trace store, showing the judge what worked there")
    hindsight_saving: float = Field(default=0.25, gt=0, lt=1, description="with hindsight: the share of compute "
                                                                          "units a cheaper episode must save for "
                                                                          "this one to count as overspent")
    max_length: int = Field(default=2048, ge=16, description="longest decision (prompt + output tokens) trained on")
    lora_r: int = Field(default=8, ge=1, description="LoRA rank of a fresh adapter")
    lora_alpha: int = Field(default=0, ge=0, validate_default=True,
                            description="LoRA alpha of a fresh adapter (0: twice lora_r)")
    seed: int = Field(default=0, description="seed of the LoRA init and of the student's samples")
    gguf_path: Path | None = Field(default=None, description="base orchestrator GGUF (default: the embedded SmolLM2)")
    max_steps_now: int | None = Field(
        default=None, ge=1, description="stop after this many steps in this call (the rest on a rerun with the "
                                        "same out dir)")


__all__ = ["GRPOSettings", "LORA_MODULES", "OPODSettings", "RolloutSettings", "SFTSettings", "TreeSettings"]
