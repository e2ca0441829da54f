"""One request's episode as serve watches it: its trace events, its streamed answer, its SSE.

A :class:`Watch` subscribes to the episode's trace events on the store's in-process bus and
sets the :class:`~orchestrion.runtime.answer.AnswerChannel` the synthesis streams into,
both *before* the episode starts, so nothing is missed. Events and answer pieces arrive in one
queue, in the order they happened on this loop; the episode's end puts a marker behind them.

An episode that calls client tools (:mod:`orchestrion.serve._client_tools`) pauses: its watch
gets a :class:`Paused` (the calls), which ends the response (the turn); the episode and its
watch live on, and the request that continues it starts a new turn on the same watch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from .._errors import ConfigError, OrchestrionError, TraceError
from ..models.types import Usage
from ..runtime.answer import AnswerChannel, text_pieces
from ..runtime.client_tools import ClientToolCall
from ..runtime.episode import EpisodeResult
from ..status import EpisodeStatus
from ..trace.bus import EventType, TraceEvent
from ..trace.store import TraceStore
from ._bodies import SSE_DONE, SSE_KEEPALIVE, Ending, chunk_body, ending, fingerprint, progress, sse
from ._failures import failure, summary
from ._openai_schema import ApiError, ChatRequest, server_error
from ._stop import StopCut, cut

KEEPALIVE_S = 15.0
SETTLE_S = 5.0  # after the episode's task ended: the longest wait for its last committed events


class _Done:
    """Queued behind everything once the episode's task has ended."""


@dataclass(frozen=True)
class Paused:
    """The episode waits for client tool calls: how this response ends."""

    calls: list[ClientToolCall]
    usage: Usage  # what the episode spent since the previous response
    ext: dict[str, Any]  # the response's ``orchestrion`` field


DONE = _Done()
Item = TraceEvent | str | _Done | Paused


class Watch:
    """The trace subscription and answer channel of one episode (``live``: queue them for SSE)."""

    def __init__(self, store: TraceStore, episode_id: str, *, live: bool, json_schema: dict[str, Any] | None,
                 secrets: tuple[str, ...] = (), errors_as_200: bool = False,
                 observe: Callable[[TraceEvent], None] | None = None) -> None:
        self.episode_id = episode_id
        self.live = live
        self.secrets = secrets  # redacted from every error text sent (see _failures)
        self.errors_as_200 = errors_as_200
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        self.sub = store.bus.subscribe(episode_id)
        self.channel = AnswerChannel(self._push if live else None, json_schema)
        self.started: float | None = None
        self.finished = False
        self.last_call_finish: str | None = None
        self.first_text_at: float | None = None
        self.sent_at: list[float] = []  # monotonic time of each answer delta sent (streamed)
        self.observe = observe  # sees every event of the episode, in order (the metrics)
        self.turn: asyncio.Future[Paused] = self.loop.create_future()  # set when the episode pauses
        self.waiting = False  # the episode waits for client tool results (do not cancel it)
        self._pump = asyncio.create_task(self._run())

    def pause(self, paused: Paused) -> None:
        """The episode waits for client tool calls: this turn ends with them."""
        self.waiting = True
        if self.live:
            self.queue.put_nowait(paused)
        if not self.turn.done():
            self.turn.set_result(paused)

    def new_turn(self, *, live: bool) -> None:
        """A request continues the paused episode: its answer and events go to that request."""
        self.live, self.waiting = live, False
        self.channel.on_text = self._push if live else None
        self.turn = self.loop.create_future()
        self.first_text_at, self.sent_at = None, []
        while not self.queue.empty():
            self.queue.get_nowait()

    def _push(self, piece: str) -> None:  # any thread: the embedded model generates in a worker
        self.loop.call_soon_threadsafe(self.queue.put_nowait, piece)

    def attach(self, episode: asyncio.Task[EpisodeResult]) -> None:
        episode.add_done_callback(lambda _: self.queue.put_nowait(DONE))

    async def _run(self) -> None:
        try:
            async for event in self.sub:
                if self.observe is not None:
                    self.observe(event)
                if event.type is EventType.EPISODE_STARTED:
                    self.started = event.ts
                elif event.type is EventType.SPAN_ENDED and event.kind == "call":
                    self.last_call_finish = (event.data.get("attrs") or {}).get("finish_reason") or "stop"
                if self.live:
                    self.queue.put_nowait(event)
                if event.type is EventType.EPISODE_FINISHED:
                    self.finished = True
                    break
        finally:
            self.sub.close()

    async def settle(self) -> None:
        """Once the episode's task ended: let the last committed events through, then stop listening."""
        if self.started is not None and not self.finished:
            await asyncio.wait({self._pump}, timeout=SETTLE_S)
        self.close()

    def close(self) -> None:
        self._pump.cancel()
        self.sub.close()

    @property
    def answer_finish(self) -> str | None:
        """How the answer's model call ended: the synthesis's, else the episode's last call's."""
        return self.channel.finish_reason or self.last_call_finish

    def unsent(self, answer: str) -> tuple[list[str], bool]:
        """The pieces of ``answer`` not streamed yet, and whether the stream matched it."""
        sent = self.channel.sent
        if not answer.startswith(sent):
            return [], False
        return text_pieces(answer[len(sent):]), True

    async def head(self) -> list[Item]:
        """Wait until the episode has started (its row is committed) or ended; what came meanwhile."""
        items: list[Item] = []
        while True:
            item = await self.queue.get()
            items.append(item)
            if item is DONE or isinstance(item, Paused) or (
                    isinstance(item, TraceEvent) and item.type is EventType.EPISODE_STARTED):
                return items


def episode_result(episode: asyncio.Task[EpisodeResult], trace_id: str) -> EpisodeResult:
    """The finished episode's result, or the ApiError that stands for its failure."""
    if episode.cancelled():
        raise ApiError(503, f"the episode was cancelled: the server is shutting down (trace id {trace_id})",
                       type="server_error", code="cancelled", headers={"X-Orchestrion-Trace-Id": trace_id,
                                                                      "X-Orchestrion-Status": "cancelled"})
    try:
        return episode.result()
    except ConfigError as exc:  # a bad option or budget in the request: the client's to fix
        raise ApiError(400, str(exc), code="invalid_option", param="orchestrion.options") from None
    except TraceError as exc:  # the store failed to commit the record (a full disk): it retries on its own
        reason = str(exc).split(": ", 1)[-1] if str(exc).startswith("trace store ") else str(exc)  # no path
        raise ApiError(503, f"the episode's record could not be committed ({reason}); retry later",
                       type="server_error", code="trace_store_failing", headers={"Retry-After": "5"}) from None
    except OrchestrionError as exc:
        raise server_error(exc) from None
    except Exception as exc:  # noqa: BLE001 - a bug inside the episode: one line to the client, the trace keeps it
        raise server_error(exc) from None


class EpisodeStream(StreamingResponse):
    """An SSE response that cancels its episode when it ends early (client gone, error)."""

    def __init__(self, content: AsyncIterator[bytes], episode: asyncio.Task[EpisodeResult], watch: Watch,
                 headers: dict[str, str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.episode = episode
        self.watch = watch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.watch.waiting:  # an episode paused for client tools lives on
                if not self.episode.done():
                    self.episode.cancel()
                self.watch.close()


class KeepAlive:
    """Nothing happened for :data:`KEEPALIVE_S` seconds."""


KEEP_ALIVE = KeepAlive()
# what a response stream is made of: answer text (str), a progress item (dict), a keep-alive,
# then the Ending, the client tool calls the episode paused for, or an ApiError standing for the
# episode's failure (the last item in every case)
StreamItem = str | dict[str, Any] | KeepAlive | Ending | Paused | ApiError


async def stream_items(episode: asyncio.Task[EpisodeResult], watch: Watch, head: list[Item], stops: Sequence[str],
                       ignored: list[str], requested: float) -> AsyncIterator[StreamItem]:
    """The episode as it happens: progress and answer text (never past a stop string), then how
    it ended. ``requested`` (monotonic) is when the request came: the first text sets
    ``watch.first_text_at`` from it."""
    cutter = StopCut(stops)

    def sent(out: str) -> str:
        if out:
            now = time.monotonic()
            watch.sent_at.append(now)
            if watch.first_text_at is None:
                watch.first_text_at = now - requested
        return out

    def render(item: Item) -> str | dict[str, Any] | None:
        if isinstance(item, Paused):
            return None
        if isinstance(item, str):
            return sent(cutter.feed(item)) or None
        if isinstance(item, TraceEvent):
            return progress(item, watch.started if watch.started is not None else item.ts)
        return None

    pending = list(head)
    while True:
        if pending:
            item = pending.pop(0)
        else:
            try:
                item = await asyncio.wait_for(watch.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                yield KEEP_ALIVE
                continue
        if isinstance(item, Paused):
            yield item
            return
        if item is DONE:
            await watch.settle()
            while not watch.queue.empty():
                pending.append(watch.queue.get_nowait())
            for rest in pending:  # what came in while the episode's last events were committed
                if (out := render(rest)) is not None:
                    yield out
            break
        if (out := render(item)) is not None:
            yield out
    try:
        result = episode_result(episode, watch.episode_id)
        failed = None if watch.errors_as_200 else failure(result, watch.secrets)
        if failed is not None:
            raise failed
    except ApiError as exc:
        yield exc
        return
    pieces, matched = watch.unsent(result.answer)
    for piece in pieces:
        if out := sent(cutter.feed(piece)):
            yield out
    if matched and (tail := sent(cutter.flush())):
        yield tail
    ext = summary(result, watch.secrets, ignored)
    if matched:
        answer, stop = cutter.released, cutter.matched
    else:  # the stream went astray: the answer (cut) is sent whole with the ending
        answer, stop = cut(result.answer, stops)
        ext = {**ext, "answer": answer}
    yield ending(result, answer, stop, watch.answer_finish, ext)


def complete_ending(result: EpisodeResult, watch: Watch, stops: Sequence[str], ignored: list[str]) -> Ending:
    """How a non-streamed response ends."""
    answer, stop = cut(result.answer, stops)
    return ending(result, answer, stop, watch.answer_finish, summary(result, watch.secrets, ignored))


async def chat_sse(req: ChatRequest, cid: str, items: AsyncIterator[StreamItem],
                   on_result: Callable[[EpisodeResult], None], trace_id: str, *,
                   progress: bool = False) -> AsyncIterator[bytes]:
    """The chat-completions SSE body: role, answer deltas (and progress chunks when ``progress``
    asks for them), then the status and [DONE]."""
    created, model = int(time.time()), req.model
    running = fingerprint(EpisodeStatus.RUNNING, trace_id)

    def chunk(delta: dict[str, Any] | None, *, system_fingerprint: str = running, **kw: Any) -> bytes:
        return sse(chunk_body(cid, created, model, delta, system_fingerprint=system_fingerprint, **kw))

    yield chunk({"role": "assistant", "content": ""}, ext={"trace_id": trace_id})
    async for item in items:
        if isinstance(item, str):
            yield chunk({"content": item})
        elif isinstance(item, dict):
            if progress:
                yield chunk({}, ext={"progress": item})
        elif isinstance(item, KeepAlive):
            yield SSE_KEEPALIVE
        elif isinstance(item, ApiError):
            yield sse(item.body())
        elif isinstance(item, Paused):
            for i, call in enumerate(item.calls):  # as vLLM and OpenAI send them: name first, then arguments
                head = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
                yield chunk({"tool_calls": [head]})
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": call.arguments_json}}]})
            yield chunk({}, finish="tool_calls", ext=item.ext)
            if req.include_usage:
                yield chunk(None, usage=item.usage)
        else:
            on_result(item.result)
            done = fingerprint(item.result.status, trace_id)
            yield chunk({}, finish=item.finish, stop_reason=item.stop_reason, ext=item.ext, system_fingerprint=done)
            if req.include_usage:
                yield chunk(None, usage=item.result.usage, system_fingerprint=done)
    yield SSE_DONE
