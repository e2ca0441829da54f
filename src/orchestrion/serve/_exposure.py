"""Who may reach a server: API keys from the environment, loopback checks, and the refusal to
listen on another address with no key (shared by `orchestrion serve` and `orchestrion view`)."""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import socket
import sys

from .._errors import ConfigError


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
    sys.stderr.write(f"warning: serving on {host} without an API key (--insecure-no-auth)\n")


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
