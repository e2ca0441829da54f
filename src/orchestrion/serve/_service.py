"""What every serve request shares: the pool, store and tools, the episodes in flight, and how one
request's episode is started, streamed or waited for (the routes are in
:mod:`orchestrion.serve.server`).

Every episode in flight is an asyncio task: a full server answers 429 instead of queueing (once no
episode paused for client tool results is left to end, see _client_tools), and a
client that disconnects has its episode cancelled, which ``run_episode`` records as ``cancelled``.
A server that stops (Ctrl-C) cancels every episode in flight at once: each is recorded
``cancelled``, its client gets a 503 error body (or the stream's error event), and the log one
line per episode.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from .._errors import ConfigError, TraceError
from ..models.pool import Pool
from ..runtime.episode import EpisodeResult, run_episode
from ..runtime.types import Task
from ..status import RunStatus
from ..strategies.registry import get_strategy, strategies
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ..trace.tracer import new_id
from ._bodies import Ending
from ._client_tools import Session, Sessions
from ._exposure import api_key, key_matches
from ._failures import failure, pool_secrets
from ._metrics import ServeMetrics
from ._openai_schema import MODEL_PREFIX, ApiError, ChatRequest, episode_budget, episode_options, task_prompt
from ._stream import DONE, Paused, StreamItem, Watch, complete_ending, episode_result, stream_items

DISCONNECT_POLL_S = 0.25  # non-streamed requests: how often the connection is checked
SHUTDOWN_WAIT_S = 10.0  # a stopping server waits this long for its cancelled episodes to be recorded
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeSettings:
    """What `orchestrion serve` is configured with."""

    pool: Path | None = None
    db: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_key_env: str | None = None
    max_concurrent: int = 16
    max_body_bytes: int = 256 * 1024
    max_tokens_cap: int | None = None
    insecure_no_auth: bool = False
    errors_as_200: bool = False  # an episode ending in error answers 200 instead of 502 (see _failures)
    client_tool_timeout_s: float = 600.0  # how long an episode waits for its client tool results (_client_tools)


@dataclass
class Run:
    """One request's episode, started and watched."""

    req: ChatRequest
    cid: str  # the completion or response id, also the episode's task id
    episode: asyncio.Task[EpisodeResult]
    watch: Watch
    strategy: str
    session: Session | None = None  # a client tool conversation (several requests, one episode)
    resumed: bool = False  # this request continues a paused episode

    @property
    def headers(self) -> dict[str, str]:
        found = {"X-Orchestrion-Trace-Id": self.watch.episode_id}
        if self.req.ignored:
            found["X-Orchestrion-Ignored-Fields"] = ", ".join(self.req.ignored)
        return found


class Service:
    """Pool, store, tools and the episodes in flight, shared by every request."""

    def __init__(self, settings: ServeSettings, pool: Pool, store: TraceStore, tools: ToolRegistry) -> None:
        self.settings = settings
        self.api_key = api_key(settings.api_key_env)
        self.pool = pool
        self.store = store
        self.tools = tools
        self.run_id = new_id()
        self.created = int(time.time())
        self.inflight: set[asyncio.Task[EpisodeResult]] = set()
        self.metrics = ServeMetrics()
        self.started = time.monotonic()
        self.secrets = pool_secrets(pool)  # never sent to a client
        self.closing = False  # the server is stopping: no new episode, those in flight cancelled
        self.sessions = Sessions(settings.client_tool_timeout_s)  # episodes paused for client tool results

    # -- request checks --------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        if not header:
            message = "no API key: send it as 'Authorization: Bearer <key>'"
        elif header.strip().partition(" ")[0].lower() != "bearer" or not key_matches(header, self.api_key):
            message = "incorrect API key"
        else:
            return
        raise ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    def health(self) -> dict[str, Any]:
        """Whether the server can run episodes: ``status`` ``failing`` (and ``store`` why) while
        the trace store cannot write."""
        failing = self.store.failing
        return {"status": "ok" if failing is None else "failing",
                "store": "ok" if failing is None else f"failing: {failing}",
                "episodes_in_flight": len(self.inflight), "max_concurrent": self.settings.max_concurrent,
                "models": len(strategies()), "uptime_s": round(time.monotonic() - self.started, 1)}

    def check_store(self) -> None:
        """A 503 while the trace store cannot write: an episode now could not be recorded."""
        if (failing := self.store.failing) is not None:
            raise ApiError(503, f"the trace store cannot write ({failing}); no episode can be recorded "
                           "until it can, retry later", type="server_error", code="trace_store_failing",
                           headers={"Retry-After": "5"})

    async def read_body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        too_large = ApiError(413, f"the request body is over this server's limit of {limit} bytes",
                             code="request_too_large")
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                raise ApiError(400, f"bad Content-Length header: {declared!r}", code="invalid_request")
            if int(declared) > limit:
                raise too_large
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise too_large
        return bytes(body)

    # -- episodes --------------------------------------------------------------------
    def begin(self, req: ChatRequest, strategy: str, cid: str) -> Run:
        """The paused episode ``req`` continues with its client tool results, else a new one."""
        if not self.closing and (session := self.sessions.resume(req)) is not None:
            assert session.episode is not None and session.watch is not None
            return Run(req, cid, session.episode, session.watch, strategy, session, resumed=True)
        return self.start(req, strategy, cid)

    def start(self, req: ChatRequest, strategy: str, cid: str) -> Run:
        """Start the episode, watched from its first event, or 429 when the server is full.
        No await between the check and the start."""
        cap = self.settings.max_tokens_cap
        budget, options = episode_budget(req, cap), episode_options(req, cap)
        prompt = task_prompt(req.messages)
        if self.closing:
            raise ApiError(503, "the server is shutting down; retry on another server or later", type="server_error",
                           code="shutting_down")
        self.check_store()
        limit = self.settings.max_concurrent
        if len(self.inflight) >= limit and not self.sessions.evict_oldest():
            raise ApiError(429, f"this server already runs {limit} episodes (its --max-concurrent); retry later",
                           type="rate_limit_error", code="too_many_episodes", headers={"Retry-After": "1"})
        task = Task(prompt=prompt, id=cid, metadata={"source": "serve", "model": req.model,
                                                        "messages": len(req.messages), **req.recorded})
        episode_id = new_id()
        session = self.sessions.open(req, strategy)
        keep_200 = req.orchestrion.errors_as_200
        watch = Watch(self.store, episode_id, live=req.stream, json_schema=req.json_schema, secrets=self.secrets,
                      errors_as_200=self.settings.errors_as_200 if keep_200 is None else keep_200,
                      observe=self.metrics.watcher(strategy))
        episode = asyncio.create_task(run_episode(
            task, get_strategy(strategy), pool=self.pool, tools=self.tools, store=self.store, budget=budget,
            options=options, run_id=self.run_id, episode_id=episode_id, answer=watch.channel,
            client_tools=session.tools if session is not None else None,
        ))
        watch.attach(episode)
        if session is not None:
            self.sessions.attach(session, episode, watch)
        self.inflight.add(episode)
        self.metrics.in_flight.set(len(self.inflight))
        episode.add_done_callback(lambda done: self._finished(done, strategy, f"{episode_id} ({req.model}, {cid})"))
        return Run(req, cid, episode, watch, strategy, session)

    def _finished(self, episode: asyncio.Task[EpisodeResult], strategy: str, which: str) -> None:
        self.inflight.discard(episode)
        self.metrics.in_flight.set(len(self.inflight))
        if episode.cancelled():
            self.metrics.episodes.labels(strategy, "cancelled").inc()
            if self.closing:
                log.warning("orchestrion serve: episode %s cancelled: the server is shutting down", which)
        elif isinstance(episode.exception(), ConfigError):
            pass  # a bad option or budget: refused (400) before any episode was recorded, so none is counted
        elif episode.exception() is not None:  # retrieved here; the handler re-raises it where it matters
            self.metrics.episodes.labels(strategy, "error").inc()
        else:
            self.metrics.episode(episode.result())

    async def stream(self, run: Run, requested: float) -> AsyncIterator[StreamItem]:
        """Once the episode has started (its row committed): its stream items. Errors before that
        (a bad option, a failure before the row) are raised here, before any byte is sent."""
        if run.resumed:
            return self._reported(run, stream_items(run.episode, run.watch, [], run.req.stops, run.req.ignored,
                                                    requested))
        try:
            head = await run.watch.head()
        except BaseException:
            run.episode.cancel()
            run.watch.close()
            raise
        if head[-1] is DONE and run.watch.started is None:  # it failed before writing its row
            run.watch.close()
            episode_result(run.episode, run.watch.episode_id)  # raises the 500 (or 400 for a bad option)
            raise ApiError(500, "the episode ended without a trace row", type="server_error",
                           code="orchestrion_error")
        return self._reported(run, stream_items(run.episode, run.watch, head, run.req.stops, run.req.ignored,
                                                requested))

    async def _reported(self, run: Run, items: AsyncIterator[StreamItem]) -> AsyncIterator[StreamItem]:
        """The stream, its ending's usage what the episode spent since its previous response."""
        async for item in items:
            yield self.since_reported(run, item) if isinstance(item, Ending) else item

    @staticmethod
    def since_reported(run: Run, end: Ending) -> Ending:
        """A client tool conversation's last response reports what was spent since the previous one."""
        if run.session is None or not run.session.tools.called:
            return end
        return replace(end, result=replace(end.result, usage=run.session.since_reported(end.result.usage)))

    def observe(self, run: Run) -> None:
        """A streamed answer ended: its time to first token and inter-token gaps go to the metrics."""
        if run.watch.first_text_at is not None:
            self.metrics.ttft.observe(run.watch.first_text_at)
        self.metrics.answer_stream(run.strategy, run.watch.sent_at)

    async def complete(self, request: Request, run: Run) -> Ending | Paused | Response:
        """Wait for the episode: how it ended, the client tool calls it paused for, a 499 once the
        client has gone, or its ApiError."""
        episode, watch, turn = run.episode, run.watch, run.watch.turn
        try:
            while not episode.done() and not turn.done():
                waits: list[asyncio.Future[Any]] = [episode, turn]
                await asyncio.wait(waits, timeout=DISCONNECT_POLL_S)
                if not episode.done() and not turn.done() and await request.is_disconnected():
                    episode.cancel()  # run_episode records the episode as cancelled
                    await asyncio.wait({episode}, timeout=10)
                    return Response(status_code=499)  # nobody reads it
        finally:
            if not watch.waiting:
                if not episode.done():
                    episode.cancel()
                await watch.settle()
        if turn.done():
            return turn.result()
        result = episode_result(episode, watch.episode_id)
        if not watch.errors_as_200 and (failed := failure(result, watch.secrets)) is not None:
            raise failed
        return self.since_reported(run, complete_ending(result, watch, run.req.stops, run.req.ignored))

    def stop_episodes(self) -> None:
        """The server stops: refuse new episodes and cancel those in flight (each is recorded
        ``cancelled`` and its request answered with a 503 or the stream's error event)."""
        self.closing = True
        for episode in list(self.inflight):
            episode.cancel()

    async def shutdown(self) -> None:
        """Stop every episode and mark this server's run stopped. A store that still cannot write
        is one log line, not an error: what could be written is."""
        self.stop_episodes()
        if self.inflight:
            await asyncio.wait(set(self.inflight), timeout=SHUTDOWN_WAIT_S)
        try:
            self.store.set_run_status(self.run_id, RunStatus.STOPPED)
            await self.store.aflush()
        except TraceError as exc:
            log.warning("orchestrion serve: this run's end is not recorded: %s", exc)

    def model_card(self, name: str) -> dict[str, Any]:
        return {"id": MODEL_PREFIX + name, "object": "model", "created": self.created, "owned_by": "orchestrion",
                "description": strategies()[name].summary}
