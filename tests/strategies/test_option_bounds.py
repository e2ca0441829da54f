"""Every strategy option's limits live in its ``Field``: a bound its help text states is a ``ge=`` /
``le=`` (or a list's ``min_length``) that refuses a value outside it before the episode, every number
has a lower bound, and no strategy clamps an option in code (``max(1, opts.k)``), which would run a
value the user never asked for and say nothing."""

from __future__ import annotations

import ast
import re
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import annotated_types as at
import pytest
from pydantic.fields import FieldInfo

from orchestrion import ConfigError
from orchestrion.runtime.options import StrategyOptions, validate_options
from orchestrion.strategies import registry
from orchestrion.strategies.registry import strategies

STRATEGIES = Path(registry.__file__).parent
UNBOUNDED = {"seed"}  # any whole number: each call's seed is derived from it
NUMBER = (int, float)

RANGE = re.compile(r"\b(-?\d+(?:\.\d+)?) to (-?\d+(?:\.\d+)?)\b")
AT_LEAST = re.compile(r"\bat least (-?\d+(?:\.\d+)?)\b")
AT_MOST = re.compile(r"\bat most (-?\d+(?:\.\d+)?)\b")
ZERO_MEANS = re.compile(r"(?:^|[(;,] ?)0 ?[=:] ")  # "(0 = off)", "(0: no pull)": zero is a documented value


def _options() -> list[tuple[str, str, FieldInfo]]:
    """(strategy, option, its Field) for every option of every registered strategy."""
    return [(name, key, info) for name, cls in sorted(strategies().items())
            for key, info in cls.Options.model_fields.items()]


OPTIONS = _options()
IDS = [f"{name}.{key}" for name, key, _ in OPTIONS]


def documented(description: str) -> tuple[float | None, float | None, bool]:
    """The lower and upper bound a help text states, and whether it gives 0 a meaning."""
    low = high = None
    if found := RANGE.search(description):
        low, high = float(found[1]), float(found[2])
    if found := AT_LEAST.search(description):
        low = float(found[1])
    if found := AT_MOST.search(description):
        high = float(found[1])
    return low, high, bool(ZERO_MEANS.search(description))


def bounds(info: FieldInfo) -> tuple[float | None, float | None]:
    """The ``Field``'s lower and upper bound (``ge``/``gt``, ``le``/``lt``, or a list's lengths)."""
    low = high = None
    for m in info.metadata:
        if isinstance(m, at.Ge | at.MinLen):
            low = float(m.ge if isinstance(m, at.Ge) else m.min_length)  # type: ignore[arg-type]
        elif isinstance(m, at.Gt):
            low = float(m.gt)  # type: ignore[arg-type]
        elif isinstance(m, at.Le | at.MaxLen):
            high = float(m.le if isinstance(m, at.Le) else m.max_length)  # type: ignore[arg-type]
        elif isinstance(m, at.Lt):
            high = float(m.lt)  # type: ignore[arg-type]
    return low, high


def numeric(annotation: Any) -> bool:
    """``int``, ``float``, or either of them or None (``bool`` is not a number here)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return len(args) == 1 and numeric(args[0])
    return annotation in NUMBER


@pytest.mark.parametrize(("strategy", "key", "info"), OPTIONS, ids=IDS)
def test_a_documented_bound_is_in_the_field(strategy: str, key: str, info: FieldInfo) -> None:
    low, high, zero = documented(info.description or "")
    have_low, have_high = bounds(info)
    if low is not None:
        assert have_low == low, f"{strategy}.{key}: the help says at least {low:g}; its Field says {have_low}"
    if high is not None:
        assert have_high == high, f"{strategy}.{key}: the help says at most {high:g}; its Field says {have_high}"
    if zero and numeric(info.annotation):
        assert have_low is not None and have_low <= 0, f"{strategy}.{key}: 0 has a meaning, yet the Field refuses it"


@pytest.mark.parametrize(("strategy", "key", "info"), OPTIONS, ids=IDS)
def test_every_number_option_has_a_lower_bound(strategy: str, key: str, info: FieldInfo) -> None:
    if numeric(info.annotation) and key not in UNBOUNDED:
        assert bounds(info)[0] is not None, f"{strategy}.{key} accepts any number: give its Field a ge= or gt="


BOUNDED = [(s, k, i) for s, k, i in OPTIONS if numeric(i.annotation) and bounds(i)[0] is not None]


@pytest.mark.parametrize(("strategy", "key", "info"), BOUNDED, ids=[f"{s}.{k}" for s, k, _ in BOUNDED])
def test_a_value_below_the_bound_is_a_config_error(strategy: str, key: str, info: FieldInfo) -> None:
    low = bounds(info)[0]
    assert low is not None
    below = low - 1 if info.annotation in (int, int | None) else low - 0.5
    with pytest.raises(ConfigError, match=f"option '{key}'"):
        validate_options(strategies()[strategy].Options, {key: below}, where=f"strategy '{strategy}'")


def clamps(source: str) -> list[str]:
    """``min(...)``/``max(...)`` calls that take an option (``opts.X`` or ``options.X``) as an argument."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            for arg in ast.walk(ast.Module(body=[ast.Expr(a) for a in node.args], type_ignores=[])):
                if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) \
                        and arg.value.id in ("opts", "options"):
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
                    break
    return found


def test_no_strategy_clamps_an_option() -> None:
    bad = [f"{path.name} {c}" for path in sorted(STRATEGIES.glob("*.py")) for c in clamps(path.read_text())]
    assert not bad, "options clamped in code (put the limit in the option's Field):\n  " + "\n  ".join(bad)


def test_the_rules_see_what_they_look_for() -> None:
    # guards against a parser or a scan that can never fail
    assert documented("most roles in the spec (1 to 6)") == (1.0, 6.0, False)
    assert documented("invalid decisions in a row (at least 1)")[0] == 1.0
    assert documented("most subtasks per plan (at most 8)")[1] == 8.0
    assert documented("same action this many times (0 = off)")[2] and documented("pulled (0: no pull)")[2]
    assert not documented("most orchestrator decisions (paper: 30)")[2]
    assert clamps("k = max(1, opts.k)\nm = min(opts.max_subtasks, 8)") == [
        "line 1: max(1, opts.k)", "line 2: min(opts.max_subtasks, 8)"]
    assert clamps("best = min(arms, key=len)\nn = min(steps, self.sub_steps)") == []
    assert numeric(int) and numeric(float | None) and not numeric(bool) and not numeric(str | None)
    assert any(key == "max_calls" for _, key, _ in OPTIONS) and len(OPTIONS) > 50
    assert issubclass(strategies()["para"].Options, StrategyOptions)
