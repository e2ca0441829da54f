"""One pool entry (``ModelSpec``): a model's backend, tier, prices, limits and backend settings.

Its own module, below the pool and the backends that read it, so neither imports the other for it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .cost import Price
from .types import StructuredMode

Backend = Literal["llama-cpp", "openai-api", "scripted"]


class ModelSpec(BaseModel):
    """One pool entry, as written in pool.yaml."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    backend: Backend = "openai-api"
    description: str = ""
    tier: int = Field(default=1, ge=1, le=5, description="capacity tier, 1 = smallest")
    context_size: int = Field(default=4096, gt=0)
    price: Price | None = None
    compute_units: float | None = Field(
        default=None, ge=0,
        description="compute units a call spends per 1,000 tokens (prompt + generated); unset = the tier, so a "
                    "tier-3 model costs 3 units per 1k tokens. They add to the episode's cost_units with the tools' "
                    "units: what a cost_units budget and the efficiency reward count",
    )
    max_concurrency: int = Field(default=8, ge=1)
    # openai-api settings
    base_url: str | None = None
    model: str | None = Field(default=None, description="model id the server knows")
    api_key_env: str | None = None
    timeout_s: float = Field(default=45.0, gt=0, description="per request; a timeout is not retried")
    max_retries: int = Field(default=3, ge=0)
    structured: StructuredMode = Field(
        default="auto",
        description="how JSON actions are enforced: auto tries json_schema, then json_object, then the prompt; "
                    "json_object_schema is JSON mode with the schema (llama-cpp-python's server); prompt states "
                    "the schema in the prompt and parses (for llama-cpp: no grammar); none neither constrains nor "
                    "states it, for an orchestrator trained on its prompts: its valid-action rate is what it learned",
    )
    extra_body: dict[str, Any] | None = Field(default=None, description="extra JSON fields sent with every request")
    # llama-cpp settings
    path: str | None = None
    n_threads: int | None = Field(
        default=None, ge=1,
        description="llama-cpp only: fixed thread count; unset = a share of ORCHESTRION_THREADS among busy models",
    )
    state_cache: int = Field(
        default=4, ge=0,
        description="llama-cpp only: KV states of recent prompts kept in RAM, so a prefix shared with any of "
                    "them is not processed again (0 = reuse only the previous call's prefix)",
    )
    prefix_cache: bool | None = Field(
        default=None,
        description="llama-cpp only: evaluate each static prompt head (system prompt, role instructions) once, "
                    "keep its KV state pinned in RAM and on disk in the user cache, so later episodes and new "
                    "processes start from it (unset = $ORCHESTRION_PREFIX_CACHE, on by default)",
    )
    n_ctx: int | None = Field(default=None, gt=0)
    lora_path: str | None = Field(
        default=None,
        description=(
            "llama-cpp only: a LoRA adapter applied on load (adapter.gguf, or the directory "
            "`orchestrion train sft` wrote). For an openai-api model served by vLLM, serve the "
            "adapter under its own name (vllm serve BASE --enable-lora --lora-modules NAME=DIR) "
            "and put that NAME in `model:` instead"
        ),
    )

    @model_validator(mode="after")
    def _check_backend_fields(self) -> ModelSpec:
        if self.backend == "openai-api" and not self.base_url:
            raise ValueError("an openai-api model needs base_url (for example http://127.0.0.1:8000/v1)")
        if self.lora_path and self.backend != "llama-cpp":
            raise ValueError(
                "lora_path works for llama-cpp models only; serve the adapter with vLLM's --lora-modules "
                "and name it in `model:`"
            )
        return self

    @property
    def units_per_1k_tokens(self) -> float:
        """Compute units per 1,000 tokens: ``compute_units`` if set, else the tier."""
        return float(self.tier) if self.compute_units is None else self.compute_units
