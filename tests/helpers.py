"""Helpers shared by the strategy tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orchestrion import GenerateConfig, Message


def script(
    decisions: list[str], worker: Callable[[str], str] = lambda p: "worker out"
) -> Callable[[Sequence[Message], GenerateConfig], str]:
    """A ScriptedModel reply function: constrained calls (orchestrator decisions) take the
    next item of ``decisions`` (the last repeats); every other call goes to ``worker``."""
    queue = list(decisions)

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            return queue.pop(0) if len(queue) > 1 else queue[0]
        return worker(messages[-1]["content"])

    return reply
