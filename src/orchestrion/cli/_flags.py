"""Command-line flags generated from a settings class, so each default, bound and help text is
written once, on the settings field (:mod:`orchestrion.train.settings`).

``@settings_flags(GRPOSettings, ("steps", "lr", ...))`` adds one option per named field to the
command it decorates: ``--field-name`` (or the flags given in ``flags``), the field's type, its
default, its ``description`` as the help and its lower bound as the option's ``min``. The command
receives them as keyword arguments (``**values``) and hands them to ``Settings.build``, which
checks every bound again and reports a bad value in one line.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import annotated_types
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

F = TypeVar("F", bound=Callable[..., Any])


def _cli_type(annotation: Any) -> Any:
    """The type click parses: a ``Literal`` (or ``Any``, a strategy given by name) is a ``str``
    (the settings refuse other values in one line), ``X | None`` stays optional."""
    args = typing.get_args(annotation)
    if annotation is Any or typing.get_origin(annotation) is Literal:
        return str
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return _cli_type(rest[0]) | None if len(rest) == 1 else annotation
    return annotation


def _minimum(field: FieldInfo) -> float | None:
    """The field's lower bound (``ge`` or ``gt``; an open bound is left for the settings to refuse)."""
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Ge | annotated_types.Gt):
            bound = meta.ge if isinstance(meta, annotated_types.Ge) else meta.gt
            return float(bound) if isinstance(bound, int | float) else None
    return None


def _option(name: str, field: FieldInfo, flags: Sequence[str]) -> inspect.Parameter:
    kind = _cli_type(field.annotation)
    low = _minimum(field)
    if low is not None and kind in (int, int | None):
        low = int(low)
    option = typer.Option(*flags, help=field.description, min=low)
    default = field.get_default(call_default_factory=True)
    if isinstance(default, Path | str | int | float | bool) or default is None:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=Annotated[kind, option])
    raise TypeError(f"{name}: a default of type {type(default).__name__} has no command-line form")


def settings_flags(settings: type[BaseModel], names: Sequence[str],
                   flags: Mapping[str, Sequence[str]] | None = None) -> Callable[[F], F]:
    """Add an option for each settings field of ``names`` to the decorated command (see the
    module doc); ``flags`` renames a field's flags (``{"max_steps_now": ("--stop-after",)}``)."""
    renamed = dict(flags or {})

    def decorate(command: F) -> F:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        fields = settings.model_fields
        added = [_option(n, fields[n], renamed.get(n, ("--" + n.replace("_", "-"),))) for n in names]

        @functools.wraps(command)
        def wrapper(**values: Any) -> Any:
            return command(**values)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + added
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # typer reads the signature above, not the command's own
        return typing.cast(F, wrapper)

    return decorate
