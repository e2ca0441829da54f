"""The result envelope every tool and agent tool returns.

A failing tool never raises into the orchestrator: it returns a status. The
statuses are the structured feedback of ParaManager (OK, EXEC_ERR, TIMEOUT, ...).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..status import ToolStatus

__all__ = ["ToolResult", "ToolStatus"]


class ToolResult(BaseModel):
    """Status, output and what the call cost."""

    status: ToolStatus = ToolStatus.OK
    output: str = ""
    error: str | None = None
    cost_units: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

    def feedback(self, limit: int = 600) -> str:
        """A short line for the orchestrator's context: status first, then output or error."""
        body = self.output if self.ok else (self.error or self.output)
        body = body.strip()
        if len(body) > limit:
            body = body[:limit] + f" ...[{len(body) - limit} more chars]"
        return f"status={self.status.value.upper()} {body}"
