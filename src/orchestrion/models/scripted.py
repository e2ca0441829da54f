"""A deterministic model for unit tests: it replays scripted replies.

Ships in the package (like pydantic-ai's TestModel) so that users can test their
own strategies without a model. Never the default for real work.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence

from .._errors import ModelError
from .cost import Price, cost_of
from .types import Completion, GenerateConfig, Message, Usage

Reply = str | Exception
ReplyFn = Callable[[Sequence[Message], GenerateConfig], Reply]


class ScriptedModel:
    """Replies from a list (in order, the last one repeats) or from a function.

    ``delay_s`` sleeps before answering, which lets tests observe overlap in time.
    Every call is kept in ``calls`` with the messages it saw.
    """

    constrains_json = False

    def __init__(
        self,
        replies: Sequence[Reply] | ReplyFn,
        *,
        name: str = "scripted",
        delay_s: float = 0.0,
        price: Price | None = None,
    ) -> None:
        self.name = name
        self.delay_s = delay_s
        self.price = price
        self._replies = replies
        self._index = 0
        self.calls: list[list[Message]] = []
        self.active = 0
        self.max_active = 0

    def _next(self, messages: Sequence[Message], config: GenerateConfig) -> Reply:
        if callable(self._replies):
            return self._replies(messages, config)
        if not self._replies:
            raise ModelError(f"scripted model '{self.name}' has no replies")
        reply = self._replies[min(self._index, len(self._replies) - 1)]
        self._index += 1
        return reply

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        start = time.perf_counter()
        self.calls.append(list(messages))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            reply = self._next(messages, config)
        finally:
            self.active -= 1
        if isinstance(reply, Exception):
            raise reply
        if config.on_text is not None:  # streams word by word, as a real backend streams tokens
            for piece in re.findall(r"\s*\S+", reply) or [reply]:
                config.on_text(piece)
        n_in = sum(len(m["content"].split()) for m in messages)
        n_out = len(reply.split())
        usage = Usage(input_tokens=n_in, output_tokens=n_out, cost_usd=cost_of(self.price, n_in, n_out), calls=1)
        return Completion(text=reply, model=self.name, usage=usage, latency_s=time.perf_counter() - start)

    async def aclose(self) -> None:
        return None
