"""Prices and cost: dollars per million tokens; an unknown price gives an unknown cost."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Price(BaseModel):
    """Dollars per million input and output tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


def cost_of(price: Price | None, input_tokens: int, output_tokens: int) -> float | None:
    """Dollar cost of one call, or ``None`` when the price is not known."""
    if price is None:
        return None
    return (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok) / 1e6


def cost_parts(price: Price | None, input_tokens: int, output_tokens: int) -> tuple[float, float] | None:
    """Dollars of one call's prompt and of its completion, or ``None`` when the price is not known."""
    if price is None:
        return None
    return input_tokens * price.input_per_mtok / 1e6, output_tokens * price.output_per_mtok / 1e6
