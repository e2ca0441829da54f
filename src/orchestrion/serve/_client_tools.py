"""Client tool conversations: one episode over several requests.

A request with ``tools`` (:mod:`orchestrion.serve._tool_spec`) starts an episode whose strategy
may call them (:mod:`orchestrion.runtime.client_tools`). When it does, the episode pauses and
the response ends with the calls (``message.tool_calls``, ``finish_reason: "tool_calls"``): its
:class:`Session` is kept here under the calls' ids, the episode still running (it counts against
``--max-concurrent``), its ``client_tool`` spans open. It computes nothing while it waits, so a
full server ends the longest-paused episode (``interrupted``, its spans saying why) to start a new
one rather than answer 429: a client that never sends results (LangChain's structured output by
function calling reads the call's arguments as its answer and stops) holds no slot for long.

The client's next request continues the **same episode** when it ends with ``tool`` messages
answering exactly the calls the episode waits for, and its messages before the assistant message
holding those calls are the ones the paused request had (:func:`~._conversation.conversation_key`):
the results enter the episode as ordinary tool results with their statuses, the episode goes on
with the same trace, round and budget, and this request answers with whatever the episode does
next (more calls, or the answer). The new request's ``tools`` and ``tool_choice`` apply from
then on. Each response's ``usage`` is what the episode spent since the previous response.

Any other request is a new episode: results of calls no episode waits for (the server was
restarted, the wait ran out, the conversation was edited) are read as context of its task
prompt (:mod:`orchestrion.serve._conversation`). An episode whose results do not come within
``--client-tool-timeout-s`` ends ``interrupted``, its trace kept.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..models.types import Usage
from ..runtime.client_tools import ClientToolCall, ClientToolReply, ClientTools, ClientToolSpec
from ..runtime.episode import EpisodeResult
from ..status import EpisodeStatus
from ..strategies.registry import strategies
from ._conversation import conversation_key, replies, trailing_results
from ._openai_schema import MODEL_PREFIX, ApiError, ChatRequest
from ._stream import Paused, Watch


@dataclass
class Session:
    """One episode across the requests of a client tool conversation."""

    tools: ClientTools
    model: str
    strategy: str
    key: str  # conversation_key of the current request's messages
    ignored: list[str]  # the current request's ignored fields (listed back in the response)
    watch: Watch | None = None
    episode: asyncio.Task[EpisodeResult] | None = None
    reported: Usage = field(default_factory=Usage)  # what earlier responses reported

    def since_reported(self, usage: Usage) -> Usage:
        """What was spent since the last response (and counts it as reported)."""
        cost = None if usage.cost_usd is None or self.reported.cost_usd is None \
            else usage.cost_usd - self.reported.cost_usd
        delta = Usage(usage.input_tokens - self.reported.input_tokens,
                      usage.output_tokens - self.reported.output_tokens, cost,
                      usage.cost_units - self.reported.cost_units, usage.calls - self.reported.calls)
        self.reported = Usage(usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.cost_units, usage.calls)
        return delta

    def paused(self, calls: list[ClientToolCall], usage: Usage) -> Paused:
        assert self.watch is not None
        ext: dict[str, Any] = {"trace_id": self.watch.episode_id, "status": EpisodeStatus.RUNNING,
                               "strategy": self.strategy, "waiting_for": [c.id for c in calls]}
        if self.ignored:
            ext["ignored"] = self.ignored
        return Paused(calls, self.since_reported(usage), ext)


def calls_client_tools(strategy: str) -> bool:
    """Whether the strategy named calls client tools (its class says ``calls_client_tools = True``)."""
    return bool(getattr(strategies().get(strategy), "calls_client_tools", False))


class Sessions:
    """The paused episodes, by the ids of the calls they wait for."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._by_call: dict[str, Session] = {}

    def open(self, req: ChatRequest, strategy: str) -> Session | None:
        """A session for a request that offers client tools (None when it offers none)."""
        spec = req.client_tools
        if spec is None:
            return None
        if spec.offered and not calls_client_tools(strategy):
            able = ", ".join(MODEL_PREFIX + n for n in sorted(strategies()) if calls_client_tools(n))
            raise ApiError(400, f"'tools': {MODEL_PREFIX}{strategy} does not call client tools; the models that do: "
                           f"{able} (or send tool_choice 'none')", code="tools_not_supported", param="tools")
        session = Session(ClientTools(spec, timeout_s=self.timeout_s), req.model, strategy,
                          conversation_key(req.messages), list(req.ignored))
        session.tools.on_pause = lambda calls, usage: self._pause(session, calls, usage)
        return session

    def attach(self, session: Session, episode: asyncio.Task[EpisodeResult], watch: Watch) -> None:
        session.episode, session.watch = episode, watch
        episode.add_done_callback(lambda _: self.drop(session))

    def _pause(self, session: Session, calls: list[ClientToolCall], usage: Usage) -> None:
        for call in calls:
            self._by_call[call.id] = session
        assert session.watch is not None
        session.watch.pause(session.paused(calls, usage))

    def drop(self, session: Session) -> None:
        for key in [k for k, s in self._by_call.items() if s is session]:
            del self._by_call[key]

    def resume(self, req: ChatRequest) -> Session | None:
        """The paused session ``req`` continues, handed its results (None: ``req`` continues none)."""
        found = trailing_results(req.messages)
        if found is None:
            return None
        prefix, asked, answered = found
        ids = asked.call_ids()
        session = self._by_call.get(ids[0])
        if session is None or session.episode is None or session.watch is None or session.episode.done() \
                or session.model != req.model or {c.id for c in session.tools.waiting} != set(ids) \
                or session.key != conversation_key(prefix):
            return None
        results: dict[str, ClientToolReply] = replies(answered)
        session.watch.new_turn(live=req.stream)
        if not session.tools.resolve(results, req.client_tools or ClientToolSpec((), "none")):
            return None
        self.drop(session)
        session.key, session.ignored = conversation_key(req.messages), list(req.ignored)
        return session

    def evict_oldest(self) -> bool:
        """End the longest-paused episode (recorded ``interrupted``) to free its slot; False when
        none is paused."""
        for session in self._by_call.values():
            self.drop(session)
            session.tools.give_up("the server ended the wait to start a new episode (its --max-concurrent "
                                  "was reached and this episode had waited longest for client tool results)")
            return True
        return False

    def __len__(self) -> int:
        return len(set(map(id, self._by_call.values())))
