"""What a tool may ask of the episode it runs in.

Tools sit below the runtime, so they never import :class:`orchestrion.runtime.context.RunContext`;
they are handed a :class:`ToolContext` instead: exactly the calls tools make (a traced, budgeted
model call, a nested tool call, generation settings, the pool's executor). ``RunContext``
satisfies it structurally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from ..models.pool import Pool
    from ..models.types import Completion, GenerateConfig, Message
    from .envelope import ToolResult


class ToolContext(Protocol):
    """The run context as tools see it."""

    @property
    def pool(self) -> Pool:
        """The episode's models (agent tools default to ``pool.executor``)."""
        ...

    @property
    def original_task(self) -> str | None:
        """The episode's task as the user wrote it (None outside an episode)."""
        ...

    def answer_misfit(self, text: str) -> str | None:
        """Why ``text``, as the episode's final answer, would not fit the task's format (its
        options, a number); None when it fits or the task states no format."""
        ...

    def parts_answer(self, text: str) -> str | None:
        """When the episode's task is multi-part, its answer in ``text``: the labelled lines
        (``1: ...``, ``2: ...``) on, or the whole text when it has none; None for any other task."""
        ...

    async def worked_programs(self, task: str) -> list[tuple[str, str]]:
        """(task, program) pairs that solved tasks like ``task`` before (the coder's library)."""
        ...

    def config(self, role: Literal["agent"], max_tokens: int = ...) -> GenerateConfig:
        """Generation settings for an agent tool's model call, at the agent role's temperature."""
        ...

    async def generate(
        self,
        messages: list[Message],
        *,
        model: str | None = ...,
        config: GenerateConfig | None = ...,
        name: str = ...,
    ) -> Completion:
        """One traced, budgeted model call."""
        ...

    async def call_tool(self, name: str, args: dict[str, Any] | None) -> ToolResult:
        """One traced nested tool call; always returns an envelope."""
        ...
