"""Who may reach a server: API keys from the environment, loopback checks, the refusal to
listen on another address with no key, and, for a server without a key, the refusal of requests
that name another host or come from another site (shared by `orchestrion serve` and
`orchestrion view`).

A server without a key trusts whoever reaches it, so it must be reached only from this machine:
a web page elsewhere can point a name it owns at 127.0.0.1 (DNS rebinding) or post to the port
from the browser (cross-site requests). :class:`HostGuard` therefore answers a 403 to a request
whose ``Host`` is not a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``, any port) or
whose ``Origin`` is another site than the ``Host`` it was sent to; a request without ``Origin``
(any client but a browser's cross-site call) is fine. A server told ``--insecure-no-auth`` on
another address skips the Host check (it is meant to be reached by any name) but keeps the
Origin check.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from .._errors import ConfigError

log = logging.getLogger(__name__)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORT = {"http": 80, "https": 443}
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def api_key(env: str | None) -> str | None:
    """The key held by the environment variable ``env`` (None without one); a ConfigError if unset."""
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise ConfigError(f"--api-key-env {env}: the environment variable {env} is not set (or empty); "
                          "export it with the key clients must send, or drop --api-key-env")
    return key


def loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)
    except (OSError, ValueError):
        return False


def refuse_exposure(host: str, key_env: str | None, insecure_no_auth: bool, *, what: str) -> None:
    """Refuse a non-loopback ``host`` without a key unless ``insecure_no_auth``; ``what`` says what
    anyone reaching the port could do."""
    if key_env or loopback(host):
        return
    if not insecure_no_auth:
        raise ConfigError(f"--host {host} is reachable from other machines and no --api-key-env is set: "
                          f"anyone who reaches the port could {what}; set --api-key-env VAR "
                          "(clients send $VAR as a Bearer key), or pass --insecure-no-auth to serve without a key")
    log.warning("warning: serving on %s without an API key (--insecure-no-auth)", host)


def key_matches(header: str, key: str) -> bool:
    """Whether an ``Authorization`` header carries ``key``: ``Bearer KEY``, or HTTP Basic with KEY as
    the password (what a browser sends after its login prompt; the user name is ignored)."""
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() == "basic":
        try:
            token = base64.b64decode(token, validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    elif scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.encode(), key.encode())


def _where(value: str, scheme: str) -> tuple[str, str, int] | None:
    """(scheme, host name, port) of ``scheme://value``, the port defaulted; None when malformed."""
    try:
        parts = urlsplit(f"{scheme}://{value.strip()}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not name or parts.path or parts.query or parts.username is not None:
        return None
    return scheme, name, port if port is not None else _DEFAULT_PORT.get(scheme, 0)


def refusal(host: str | None, origin: str | None, scheme: str, *, check_host: bool) -> str | None:
    """Why a keyless server refuses a request with these ``Host`` and ``Origin`` headers (None: it does not)."""
    served = _where(host, scheme) if host is not None else None
    if check_host and host is not None and (served is None or served[1] not in LOOPBACK_NAMES):
        return (f"Host {_shown(host)} is not a loopback name: this server has no API key, so it answers only "
                "requests to localhost, 127.0.0.1 or [::1] (a request for another name may come from a web page "
                "by DNS rebinding)")
    if origin is None:
        return None
    came = urlsplit(origin.strip().lower())
    sent_from = _where(came.netloc, came.scheme) if came.scheme in _DEFAULT_PORT and not came.path else None
    if served is None or sent_from is None or sent_from != served:
        return (f"Origin {_shown(origin)} is another site: this server has no API key, so it refuses requests "
                "that a web page elsewhere makes from the browser")
    return None


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:77] + "...")


class HostGuard:
    """ASGI middleware of a server without a key: a 403, made by ``body`` from the reason, for a
    request :func:`refusal` refuses."""

    def __init__(self, app: ASGIApp, *, check_host: bool, body: Callable[[str], bytes]) -> None:
        self.app = app
        self.check_host = check_host
        self.body = body

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            why = refusal(headers.get("host"), headers.get("origin"), str(scope.get("scheme", "http")),
                          check_host=self.check_host)
            if why is not None:
                body = self.body(why)
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
