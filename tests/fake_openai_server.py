"""A loopback OpenAI-compatible chat server for tests and benchmarks.

In-process::

    async with FakeOpenAIServer(delay_s=0.05) as server:
        model = OpenAIAPIModel("m", server.base_url)   # base_url = http://127.0.0.1:PORT/v1
        ...
        server.count      # POSTs to /chat/completions, failed ones included

As its own process (prints its base URL on the first stdout line once it listens)::

    python tests/fake_openai_server.py --port 8011 --delay-ms 50

or ``with run_in_process("--delay-ms", "50") as base_url: ...`` from Python.

Knobs (constructor arguments, also plain attributes you may change while it runs):
``delay_s`` before every answer, ``chunk_delay_s`` between stream chunks,
``replies`` (a list used in order whose last item repeats, or a function of the
request body; items are ``str`` or :class:`FakeReply`; the default echoes the last
user message), ``fail_first`` requests answered with ``fail_status`` (500 or 429,
with ``Retry-After: retry_after`` when set), ``reject_json_schema`` /
``reject_json_object`` (400 for that ``response_format``), ``api_key`` (require
``Authorization: Bearer KEY``). A reply's ``fault`` (see ``FAULTS``) makes the server
misbehave at the transport level instead: hang, drop the connection, half a body,
a truncated SSE stream, or invalid JSON. It serves ``/v1/chat/completions`` (plain and SSE
with a final usage chunk; ``logprobs`` and vLLM-style ``return_token_ids``) and
``/v1/models``. Access logging is off and bodies use orjson, so hundreds of
concurrent requests stay cheap.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class FakeReply:
    """One scripted answer: content, or an HTTP error when ``status`` is not 200."""

    content: str = ""
    status: int = 200
    error: str = "error"
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    fault: str = ""  # one of FAULTS: misbehave instead of answering properly
    delay_s: float = 0.0  # wait this long before this answer (on top of the server's delay_s)


# Ways to misbehave (FakeReply.fault): never answer; close the connection without a response; send
# headers and half the promised body, then close; stream a few SSE chunks, then close mid-event;
# answer 200 with a body that is not JSON.
FAULTS = ("hang", "drop", "half_body", "truncated_sse", "invalid_json")


ReplyItem = str | FakeReply
Replies = Sequence[ReplyItem] | Callable[[dict[str, Any]], ReplyItem] | None


def _error(status: int, message: str, headers: dict[str, str] | None = None, param: str | None = None) -> web.Response:
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


def _words(text: str) -> int:
    return len(text.split())


class FakeOpenAIServer:
    """An aiohttp.web app that answers like an OpenAI-compatible server."""

    def __init__(
        self,
        *,
        replies: Replies = None,
        delay_s: float = 0.0,
        chunk_delay_s: float = 0.0,
        fail_first: int = 0,
        fail_status: int = 500,
        retry_after: float | None = None,
        reject_json_schema: bool = False,
        reject_json_object: bool = False,
        api_key: str | None = None,
        model_id: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        keep_requests: bool = True,
    ) -> None:
        self.replies = replies
        self.delay_s = delay_s
        self.chunk_delay_s = chunk_delay_s
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.retry_after = retry_after
        self.reject_json_schema = reject_json_schema
        self.reject_json_object = reject_json_object
        self.api_key = api_key
        self.model_id = model_id
        self.host = host
        self.port = port
        self.keep_requests = keep_requests
        self.count = 0
        self.active = 0
        self.max_active = 0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.base_url = ""
        self._reply_index = 0
        self._runner: web.AppRunner | None = None

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> str:
        """Listen (port 0 picks a free one) and return the base URL, ending in /v1."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port, backlog=2048, reuse_address=True).start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{self.port}/v1"
        return self.base_url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeOpenAIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers -------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": self.model_id, "object": "model", "created": 0, "owned_by": "fake"}]
        return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type="application/json")

    def _next_reply(self, body: dict[str, Any]) -> FakeReply:
        if self.replies is None:
            users = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"]
            item: ReplyItem = "echo: " + (users[-1] if users else "")
        elif callable(self.replies):
            item = self.replies(body)
        else:
            item = self.replies[min(self._reply_index, len(self.replies) - 1)]
            self._reply_index += 1
        return FakeReply(content=item) if isinstance(item, str) else item

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.count += 1
        n = self.count
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            body: dict[str, Any] = orjson.loads(await request.read())
            if self.keep_requests:
                self.requests.append(body)
                self.headers.append(dict(request.headers))
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
                return _error(401, "Incorrect API key provided")
            if n <= self.fail_first:
                headers = {} if self.retry_after is None else {"Retry-After": f"{self.retry_after:g}"}
                return _error(self.fail_status, f"simulated failure of request {n}", headers)
            kind = (body.get("response_format") or {}).get("type")
            rejected = {"json_schema": self.reject_json_schema, "json_object": self.reject_json_object}
            if rejected.get(kind or ""):
                return _error(400, f"response_format type '{kind}' is not supported", param="response_format")
            reply = self._next_reply(body)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.fault:
                return await self._misbehave(request, body, reply, n)
            if reply.status != 200:
                return _error(reply.status, reply.error, reply.headers)
            if body.get("stream"):
                return await self._stream(request, body, reply, n)
            return web.Response(body=orjson.dumps(self._completion(body, reply, n)), content_type="application/json")
        finally:
            self.active -= 1

    async def _misbehave(self, request: web.Request, body: dict[str, Any], reply: FakeReply,
                         n: int) -> web.StreamResponse:
        """Answer with ``reply.fault``; a closed connection cancels this handler, as it does a real one."""
        if reply.fault == "invalid_json":
            return web.Response(body=b'{"choices": [{"message": {"content": "cut', content_type="application/json")
        transport = request.transport
        if reply.fault == "half_body":
            whole = orjson.dumps(self._completion(body, reply, n))
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = len(whole)
            await resp.prepare(request)
            await resp.write(whole[: len(whole) // 2])
        elif reply.fault == "truncated_sse":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            chunk = {"id": f"chatcmpl-fake-{n}", "object": "chat.completion.chunk", "model": self.model_id,
                     "choices": [{"index": 0, "delta": {"content": "partial "}, "finish_reason": None}]}
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n" + b'data: {"choices": [{"delta": {"cont')
        elif reply.fault not in ("hang", "drop"):
            raise ValueError(f"unknown fault {reply.fault!r}; choose one of {FAULTS}")
        if reply.fault != "hang" and transport is not None:
            await asyncio.sleep(0.05)  # let what was written leave first
            transport.abort()
        await asyncio.sleep(3600)  # cancelled when the connection goes
        raise AssertionError("unreachable")

    def _usage(self, body: dict[str, Any], content: str) -> dict[str, int]:
        n_in = sum(_words(m.get("content") or "") for m in body.get("messages", []))
        n_out = _words(content)
        return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}

    def _completion(self, body: dict[str, Any], reply: FakeReply, n: int) -> dict[str, Any]:
        usage = self._usage(body, reply.content)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": reply.content},
            "logprobs": None,
            "finish_reason": reply.finish_reason,
        }
        if body.get("logprobs"):
            pieces = reply.content.split()
            choice["logprobs"] = {"content": [_logprob(p, i) for i, p in enumerate(pieces)]}
        out: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model_id,
            "choices": [choice],
            "usage": usage,
        }
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = list(range(usage["prompt_tokens"]))
            choice["token_ids"] = list(range(100, 100 + usage["completion_tokens"]))
        return out

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: FakeReply, n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        base = {"id": f"chatcmpl-fake-{n}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": body.get("model") or self.model_id}

        async def send(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> None:
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            await resp.write(b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n")

        await send({"role": "assistant", "content": ""})
        for i, piece in enumerate(re.findall(r"\s*\S+\s*", reply.content) or [reply.content]):
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            lp = {"content": [_logprob(piece, i)]} if body.get("logprobs") else None
            await send({"content": piece}, logprobs=lp)
        await send({}, finish=reply.finish_reason)
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = self._usage(body, reply.content)
            await resp.write(b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _logprob(token: str, i: int) -> dict[str, Any]:
    return {"token": token, "logprob": -(i + 1) / 10, "bytes": list(token.encode()), "top_logprobs": []}


@contextlib.contextmanager
def run_in_process(*args: str, port: int = 0) -> Iterator[str]:
    """Run the server as a child process with CLI ``args``; yield its base URL."""
    cmd = [sys.executable, __file__, "--port", str(port), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"fake server exited with {proc.wait(5)} before listening: {' '.join(cmd)}")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def _serve(server: FakeOpenAIServer) -> None:
    print(await server.start(), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Fake OpenAI-compatible chat server (loopback, for tests and benchmarks)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--delay-ms", type=float, default=0.0, help="delay before every answer")
    p.add_argument("--chunk-delay-ms", type=float, default=0.0, help="delay between stream chunks")
    p.add_argument("--reply", action="append", help="scripted reply (repeatable; the last repeats); default echoes")
    p.add_argument("--fail-first", type=int, default=0, help="fail the first N requests")
    p.add_argument("--fail-status", type=int, default=500, choices=[429, 500, 502, 503])
    p.add_argument("--retry-after", type=float, default=None, help="Retry-After seconds sent with failures")
    p.add_argument("--reject-json-schema", action="store_true")
    p.add_argument("--reject-json-object", action="store_true")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    p.add_argument("--model-id", default="fake-model")
    a = p.parse_args(argv)
    server = FakeOpenAIServer(
        replies=a.reply, delay_s=a.delay_ms / 1000, chunk_delay_s=a.chunk_delay_ms / 1000,
        fail_first=a.fail_first, fail_status=a.fail_status, retry_after=a.retry_after,
        reject_json_schema=a.reject_json_schema, reject_json_object=a.reject_json_object,
        api_key=a.api_key, model_id=a.model_id, host=a.host, port=a.port,
        keep_requests=False,
    )
    asyncio.run(_serve(server))


if __name__ == "__main__":
    main()
