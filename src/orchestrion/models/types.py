"""Plain data types shared by every model backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict


class Message(TypedDict):
    """One chat message in the OpenAI shape."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str


StructuredMode = Literal["auto", "json_schema", "json_object", "json_object_schema", "prompt", "none"]
# modes in which no grammar or response_format constrains the output: prompt states the schema, none does not
UNCONSTRAINED_MODES: frozenset[str] = frozenset({"prompt", "none"})


def msg(role: Literal["system", "user", "assistant", "tool"], content: str) -> Message:
    """Build a :class:`Message`."""
    return {"role": role, "content": content}


@dataclass(frozen=True)
class GenerateConfig:
    """Sampling settings for one completion.

    ``json_schema`` asks the backend to constrain the output to that schema
    (llama.cpp grammar, server-side ``json_schema``/``json_object``); backends that
    cannot constrain ignore it and the caller validates and repairs.

    ``on_text``, when set, receives the output's text piece by piece while it is generated
    (from any thread: it must be thread-safe and quick). Backends that stream (llama.cpp,
    openai-api, scripted) call it per token; the others ignore it. The pieces joined are the
    raw output before ``stop`` strings are cut; the Completion's ``text`` stays authoritative.
    """

    max_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None
    stop: tuple[str, ...] = ()
    json_schema: dict[str, Any] | None = None
    logprobs: bool = False
    on_text: Callable[[str], None] | None = field(default=None, compare=False, repr=False)


@dataclass
class Usage:
    """Tokens, dollars and tool cost units.

    ``cost_usd`` is ``None`` when a price is unknown: unknown stays unknown when
    added, it never silently becomes 0.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    cost_units: float = 0.0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        """Add ``other`` into this usage in place."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_units += other.cost_units
        self.calls += other.calls
        if self.cost_usd is None or other.cost_usd is None:
            self.cost_usd = None
        else:
            self.cost_usd += other.cost_usd

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "cost_units": self.cost_units,
            "calls": self.calls,
        }


@dataclass
class Completion:
    """What every backend returns for one chat completion."""

    text: str
    model: str
    usage: Usage
    latency_s: float
    finish_reason: str = "stop"
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    structured_mode: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
