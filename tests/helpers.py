"""Helpers shared by the tests: scripted replies and small tools with observable behaviour."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrion import GenerateConfig, Message, Tool


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


class TextArgs(BaseModel):
    text: str


class SlowTool(Tool):
    """Sleeps, records its time window (by input text and in call order), then replies."""

    name = "slow"
    description = "sleeps, then echoes"
    Args = TextArgs

    def __init__(self, delay: float = 0.2, reply: Callable[[str], str] = lambda t: f"did {t}") -> None:
        self.delay = delay
        self.reply = reply
        self.windows: dict[str, tuple[float, float]] = {}
        self.spans: list[tuple[float, float]] = []

    async def run(self, args: Any, ctx: Any, model: str | None) -> str:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(self.delay)
        window = (t0, loop.time())
        self.windows[args.text] = window
        self.spans.append(window)
        return self.reply(args.text)


class CrashTool(Tool):
    """Always raises, so the registry must turn it into an exec_error status."""

    name = "crash"
    description = "always fails"
    Args = TextArgs

    def __init__(self, message: str = "broken") -> None:
        self.message = message

    async def run(self, args: Any, ctx: Any, model: str | None) -> str:
        raise RuntimeError(self.message)


class LookupTool(Tool):
    name = "lookup"
    description = "looks a thing up"
    Args = TextArgs

    async def run(self, args: Any, ctx: Any, model: str | None) -> str:
        return f"found:{args.text}"


def act(**kw: Any) -> str:
    """A JSON action string, as a model would write it."""
    return json.dumps(kw)


def free_port() -> int:
    """A loopback port nobody listens on (bound and released at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def echo_results(prompt: str) -> str:
    """A scripted synthesis that repeats the results its prompt shows (the synthesis prompt's own
    instructions, which hold an "Answer:" line, are left out: no result would support that line)."""
    if "\nResults:\n" not in prompt:
        return prompt
    return prompt.split("\nResults:\n", 1)[1].split("\n\nNow write", 1)[0]


# `make test-fast` installs neither the train extra nor BIG-bench's task files: the tests that need
# them skip, saying what is missing (`make test` installs both, so there they run)
def _installed(*modules: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in modules)


def _bigbench_fetched() -> bool:
    from orchestrion.eval.datasets._fetch import tasks_dir

    return tasks_dir() is not None


needs_train = pytest.mark.skipif(not _installed("torch", "transformers"),
                                 reason="the train extra (torch, transformers) is not installed")
needs_bigbench = pytest.mark.skipif(
    not _bigbench_fetched(), reason="BIG-bench's task files are not fetched: `orchestrion datasets fetch bigbench`")
