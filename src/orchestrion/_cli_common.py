"""Pieces every `orchestrion` sub-command shares: consoles, common options, one-line errors."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from ._errors import OrchestrionError

# Piped output is not cut at 80 columns: tables and ids stay whole for scripts and logs.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])

PoolOpt = Annotated[Path | None, typer.Option(
    "--pool", help="pool.yaml, or a preset: local (three pulled models) or tiny (SmolLM2 alone); "
                   "default: $ORCHESTRION_POOL, else local once pulled, else tiny")]
DbOpt = Annotated[Path | None, typer.Option("--db",
                                            help="trace database; default $ORCHESTRION_DB or ~/.orchestrion/traces.db")]


def friendly_with(interrupted: str) -> Callable[[F], F]:
    """Turn Orchestrion errors into one line on stderr (exit 2) and Ctrl-C into ``interrupted``
    (exit 130). Messages are printed as plain text: hints such as ``orchestrion[serve]`` survive."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except OrchestrionError as exc:
                err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, markup=True)
                raise typer.Exit(2) from None
            except KeyboardInterrupt:
                err.print(interrupted, markup=False, highlight=False)
                raise typer.Exit(130) from None

        return wrapper  # type: ignore[return-value]

    return decorate


friendly = friendly_with("interrupted; the trace so far is kept")


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"'{pair}': expected KEY=VALUE", param_hint="--set")
        try:
            opts[key.strip()] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            opts[key.strip()] = raw
    return opts


