"""Typed strategy options: one pydantic model per strategy, validated once when an episode starts.

:class:`StrategyOptions` holds the options the runtime reads for every strategy (parallelism,
seeds, replayed decisions, synthesis, temperatures); each strategy declares ``Options``, a
subclass with its own fields. Options come from ``--set KEY=VALUE``, the pool's ``strategies:``
block and ``options=`` of :func:`orchestrion.solve`; :func:`episode_options` merges and validates
them, and a misspelt or mistyped option is a one-line :class:`ConfigError` that names it.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from .._errors import ConfigError

if TYPE_CHECKING:
    from ..models.pool import Pool

OptionsT = TypeVar("OptionsT", bound="StrategyOptions")


INT_RANGE = 2**63  # options are stored as JSON: a whole number must fit a signed 64-bit integer
# ``json_schema_extra`` of an option whose value names a pool model: checked against the pool
# before the episode starts (:func:`check_pool_models`)
POOL_MODEL: dict[str, Any] = {"pool_model": True}


class StrategyOptions(BaseModel):
    """Options every strategy accepts, because the runtime reads them.

    NaN and infinity are refused for every float option, and whole numbers must fit 64 bits.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_parallel: int | None = Field(
        default=None, ge=1,
        description="at most this many calls or plan nodes at once; 1 = the serial variant (default: unbounded)")
    seed: int | None = Field(
        default=None, description="base sampling seed: each decision call and sample gets its own seed derived from it")
    replay_decisions: list[str] | None = Field(
        default=None,
        description="raw outputs that replace the episode's first decision calls (tree/counterfactual rollouts)")
    synthesizer: str | None = Field(
        default=None, json_schema_extra=POOL_MODEL,
        description="pool model that writes the final answer (default: the pool's synthesizer)")
    max_tokens: int = Field(default=256, ge=1, description="output-token limit of answer and synthesis calls")
    decision_temperature: float | None = Field(
        default=None, ge=0, description="temperature of orchestrator decisions (default: the pool's temperature block)")
    synthesis_temperature: float | None = Field(
        default=None, ge=0, description="temperature of answer synthesis (default: the pool's temperature block)")
    agent_temperature: float | None = Field(
        default=None, ge=0,
        description="temperature of agent tools and sub-agents (default: the pool's temperature block)")

    worked_programs: int = Field(
        default=2, ge=0, le=6,
        description="programs that solved similar @train tasks before, shown to the coder agent as worked "
                    "examples (its program library, learned from the trace store; 0: none)")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """``true`` is not a number: pydantic's lax mode would take it as 1 (``--set max_rounds=true``)."""
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if bool not in (annotation, *get_args(annotation)) and Any not in (annotation, *get_args(annotation)):
                raise ValueError(f"expected a number, not {str(value).lower()}")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _fits_64_bits(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and not -INT_RANGE <= value < INT_RANGE:
            raise ValueError("the number is too large")
        return value


class LooseOptions(StrategyOptions):
    """The shared options, typed, plus any other key kept as given: what a :class:`RunContext`
    built from a plain dict holds until a strategy asks for its own ``Options``."""

    model_config = ConfigDict(extra="allow")


def validate_options(cls: type[OptionsT], values: Mapping[str, Any], *, where: str) -> OptionsT:
    """``values`` as a ``cls``; a bad key or value is a one-line :class:`ConfigError` prefixed by ``where``."""
    try:
        return cls.model_validate(dict(values))
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"{where}: {describe_error(cls, errors[0], values)}{more}") from None


def as_options(cls: type[OptionsT], options: StrategyOptions, *, where: str) -> OptionsT:
    """``options`` as a ``cls``: itself when it is one, else its values validated as ``cls``."""
    if isinstance(options, cls):
        return options
    return validate_options(cls, options.model_dump(exclude_unset=True), where=where)


def pool_model_options(options: StrategyOptions) -> dict[str, str]:
    """The options of ``options`` that name a pool model (:data:`POOL_MODEL`) and are set, by name."""
    fields = type(options).model_fields
    marked = [k for k, f in fields.items() if isinstance(f.json_schema_extra, dict) and
              f.json_schema_extra.get("pool_model")]
    return {k: v for k in marked if isinstance(v := getattr(options, k), str)}


def check_pool_models(options: StrategyOptions, pool: Pool, *, where: str) -> None:
    """Every option of ``options`` that names a pool model names one of ``pool``'s; otherwise a
    one-line :class:`ConfigError` prefixed by ``where`` that lists the pool's models."""
    for key, name in pool_model_options(options).items():
        if name not in pool.specs:
            close = difflib.get_close_matches(name, pool.names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{where}: option '{key}' = {name!r} is not a model of the pool {pool.source}{hint}; "
                              f"its models: {', '.join(pool.names)}")


def describe_error(cls: type[StrategyOptions], error: ErrorDetails, values: Mapping[str, Any]) -> str:
    """One pydantic error as a sentence: the option, and the close match or the expected type."""
    valid = sorted(cls.model_fields)
    key = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown option '{key}'{hint}; valid options: {', '.join(valid)}"
    if key not in cls.model_fields:
        return f"options: {error['msg']}"
    shown = repr(values.get(key))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    expected = type_name(cls.model_fields[key].annotation)
    detail = "" if error["type"] == "literal_error" else f" ({error['msg'].lower()})"
    raw = values.get(key)
    if isinstance(raw, str) and raw.strip().lower() in ("none", "null", "~") and "None" in expected.split(" | "):
        detail += f"; for no value give null (--set {key}=null, or {key}: null in YAML)"
    return f"option '{key}' = {shown}: expected {expected}{detail}"


def type_name(annotation: Any) -> str:
    """A short, readable name for a field's type: ``int``, ``float | None``, ``'a' | 'b'``."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(annotation))
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(annotation))
    if annotation is type(None):
        return "None"
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in get_args(annotation))}]"
    return str(getattr(annotation, "__name__", annotation))


def episode_options(cls: type[OptionsT], strategy: str, pool_block: Mapping[str, Any], pool_source: str,
                    options: Mapping[str, Any] | None) -> OptionsT:
    """The options of one episode: the pool's ``strategies:`` entry for ``strategy``, overridden by
    ``options``, validated against ``cls``. The pool entry is checked on its own first, so an error
    in it names the pool file."""
    if pool_block:
        validate_options(cls, pool_block, where=f"pool {pool_source}: strategies.{strategy}")
    return validate_options(cls, {**pool_block, **(options or {})}, where=f"strategy '{strategy}'")


def options_for(cls: type[StrategyOptions], options: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``options`` that ``cls`` declares: one ``--set`` serves a run of several
    strategies, each taking the options it has."""
    return {k: v for k, v in options.items() if k in cls.model_fields}


def check_run_options(classes: Mapping[str, type[StrategyOptions]], options: Mapping[str, Any]) -> None:
    """Every option must belong to at least one of the run's strategies, with a valid value for
    each strategy that has it; otherwise a one-line :class:`ConfigError` before anything runs."""
    known = sorted({name for cls in classes.values() for name in cls.model_fields})
    for key in options:
        if not any(key in cls.model_fields for cls in classes.values()):
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"option '{key}' belongs to none of the strategies {', '.join(classes)}{hint}; "
                              f"`orchestrion strategies NAME` lists each one's options")
    for name, cls in classes.items():
        validate_options(cls, options_for(cls, options), where=f"strategy '{name}'")


def options_table(cls: type[StrategyOptions]) -> list[tuple[str, str, str, str]]:
    """(name, type, default, description) for every option of ``cls``: its own options first, then
    the ones every strategy shares, each group in declaration order."""
    rows = []
    shared = StrategyOptions.model_fields
    fields = cls.model_fields
    for name in [*(n for n in fields if n not in shared), *(n for n in fields if n in shared)]:
        info = fields[name]
        default = info.get_default(call_default_factory=True)
        rows.append((name, type_name(info.annotation), "-" if default is None else str(default),
                     info.description or ""))
    return rows
