"""Typed strategy options: declared per strategy, validated once before the episode starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrion import ConfigError, Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.cli import app
from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.runtime.budget import BudgetTracker
from orchestrion.runtime.context import RunContext
from orchestrion.runtime.options import StrategyOptions, episode_options, validate_options
from orchestrion.strategies.auto import Auto
from orchestrion.strategies.para import Para
from orchestrion.strategies.registry import strategies
from orchestrion.trace.tracer import Tracer

# keys that eval (seed), training rollouts (seed, replay_decisions, decision_temperature), serve
# and the CLI (max_parallel) pass whatever the strategy: every strategy must accept them
SHARED = {"seed": 3, "replay_decisions": ["{}"], "decision_temperature": 0.7, "synthesis_temperature": 0.0,
          "agent_temperature": 0.2, "max_parallel": 1, "max_tokens": 64, "synthesizer": "m"}


def one_action(final: bool = True) -> str:
    """A para round: one call (to a tool that is not there, so it just fails), and maybe final."""
    return json.dumps({"thought": "t", "calls": [{"tool": "nope", "input": "x"}], "final": final})


def episodes(store: TraceStore) -> list[dict[str, Any]]:
    store.flush()
    return store.query("SELECT id, status, meta FROM episodes")


@pytest.mark.parametrize("name", sorted(strategies()))
def test_every_strategy_declares_strict_described_options(name: str) -> None:
    opts = strategies()[name].Options
    assert issubclass(opts, StrategyOptions)
    assert opts.model_config.get("extra") == "forbid"
    for field, info in opts.model_fields.items():
        assert info.description and "\n" not in info.description, f"{name}.{field} needs a one-line description"
        assert not info.is_required(), f"{name}.{field} needs a default"
    opts()  # every default validates
    episode_options(opts, name, {}, "test", SHARED)  # the keys train/eval/serve pass are declared


def test_each_strategy_declares_its_own_options() -> None:
    found = strategies()
    assert {"max_rounds", "max_calls"} <= set(found["para"].Options.model_fields)
    assert {"max_active", "subagent_steps", "worker_model"} <= set(found["proactive"].Options.model_fields)
    assert {"k", "temperature", "model"} <= set(found["vote"].Options.model_fields)
    assert found["vote"].Options().temperature == 0.8 and found["vote"].Options().k == 5
    assert {"topology", "max_reconcile", "plan_repairs"} <= set(found["topology"].Options.model_fields)
    assert "max_rounds" not in found["direct"].Options.model_fields


async def test_unknown_option_is_one_line_with_the_close_match_and_no_episode(store: TraceStore) -> None:
    model = ScriptedModel([one_action(), "x"], name="m")
    with pytest.raises(ConfigError) as info:
        await solve("q", strategy="para", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                    options={"max_round": 3})
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith("strategy 'para': unknown option 'max_round' (did you mean 'max_rounds'?)")
    assert "valid options: " in text and "max_calls" in text and "seed" in text
    assert model.calls == [] and episodes(store) == []  # nothing ran, no half episode


async def test_wrong_type_names_option_value_and_type(store: TraceStore) -> None:
    model = ScriptedModel([one_action(), "x"], name="m")
    with pytest.raises(ConfigError) as info:
        await solve("q", strategy="para", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                    options={"max_rounds": "many"})
    text = str(info.value)
    assert "\n" not in text and "option 'max_rounds' = 'many': expected int" in text
    with pytest.raises(ConfigError, match=r"option 'on_invalid' = 'retry': expected 'fail' \| 'single_role'"):
        await solve("q", strategy="spec", pool=Pool.from_models([model]), store=store, options={"on_invalid": "retry"})
    assert model.calls == [] and episodes(store) == []


def test_a_none_word_for_an_optional_option_says_to_write_null() -> None:
    with pytest.raises(ConfigError) as info:
        validate_options(Auto.Options, {"safe_z": "none"}, where="strategy 'auto'")
    text = str(info.value)
    assert text.startswith("strategy 'auto': option 'safe_z' = 'none': expected float | None")
    assert text.endswith("for no value give null (--set safe_z=null, or safe_z: null in YAML)")
    with pytest.raises(ConfigError) as other:  # not optional: no such hint
        validate_options(Auto.Options, {"k": "none"}, where="strategy 'auto'")
    assert "null" not in str(other.value)


async def test_values_are_coerced_typed_and_recorded(store: TraceStore) -> None:
    model = ScriptedModel([one_action(False), one_action(False), "x"], name="m")
    res = await solve("q", strategy="para", pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                      options={"max_rounds": "2", "seed": None})
    assert res.meta["rounds"] == 2
    meta = json.loads(episodes(store)[0]["meta"])
    assert meta["options"] == {"max_rounds": 2, "seed": None}


def _pool_with(block: dict[str, Any], model: ScriptedModel) -> Pool:
    pool = Pool.from_models([model])
    pool.config = pool.config.model_copy(update={"strategies": {"para": block}})
    pool.source = "team-pool.yaml"
    return pool


async def test_pool_strategies_block_is_validated_and_named(store: TraceStore) -> None:
    model = ScriptedModel([one_action(), "x"], name="m")
    with pytest.raises(ConfigError) as info:
        await solve("q", strategy="para", pool=_pool_with({"max_round": 1}, model), tools=ToolRegistry([]), store=store)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(
        "pool team-pool.yaml: strategies.para: unknown option 'max_round' (did you mean 'max_rounds'?)"
    )
    # the CLI/API value does not hide a bad pool entry
    with pytest.raises(ConfigError, match="pool team-pool.yaml: strategies.para: option 'max_calls' = 'x'"):
        await solve("q", strategy="para", pool=_pool_with({"max_calls": "x"}, model), store=store,
                    options={"max_calls": 2})
    assert model.calls == [] and episodes(store) == []
    # another strategy's entry is checked when that strategy runs, not against para
    pool = _pool_with({}, model)
    pool.config = pool.config.model_copy(update={"strategies": {"vote": {"k": 3}}})
    res = await solve("q", strategy="para", pool=pool, tools=ToolRegistry([]), store=store)
    assert res.status == "ok"


async def test_pool_block_is_used_and_options_override_it(store: TraceStore) -> None:
    model = ScriptedModel([one_action(False)] * 3 + ["x"], name="m")
    res = await solve("q", strategy="para", pool=_pool_with({"max_rounds": 1, "max_calls": 2}, model),
                      tools=ToolRegistry([]), store=store)
    assert res.meta["rounds"] == 1
    model2 = ScriptedModel([one_action(False)] * 3 + ["x"], name="m")
    res2 = await solve("q", strategy="para", pool=_pool_with({"max_rounds": 1}, model2), tools=ToolRegistry([]),
                       store=store, options={"max_rounds": 2})
    assert res2.meta["rounds"] == 2


def test_context_from_a_plain_dict_keeps_option_working(store: TraceStore) -> None:
    ctx = RunContext(Pool.from_models([ScriptedModel(["x"], name="m")]), ToolRegistry([]), Tracer(store, "ep"),
                     BudgetTracker(), {"max_parallel": "2", "max_rounds": 5})
    assert ctx.option("max_parallel", None) == 2 and ctx.option("seed", 7) == 7
    assert ctx.option("max_tokens", 99) == 99  # not set: the caller's default, as before
    assert ctx.options_as(Para.Options).max_rounds == 5
    assert ctx.options_as(Para.Options).max_calls == 4
    with pytest.raises(ConfigError, match="unknown option 'max_rounds'"):
        ctx.options_as(strategies()["direct"].Options)
    with pytest.raises(ConfigError, match="option 'seed' = 'abc': expected int"):
        RunContext(ctx.pool, ctx.tools, ctx.tracer, ctx.budget, {"seed": "abc"})


def test_cli_run_rejects_a_misspelt_option_before_loading_a_model(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_load(self: LlamaCppModel) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(LlamaCppModel, "_load", no_load)
    monkeypatch.setenv("ORCHESTRION_POOL", "tiny")
    db = tmp_path / "cli.db"
    res = CliRunner().invoke(app, ["run", "hi", "--set", "max_round=3", "--db", str(db)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "unknown option 'max_round'" in lines[0] and "did you mean 'max_rounds'?" in lines[0]
    assert "Traceback" not in res.output
    check = TraceStore(db)
    assert check.query("SELECT id FROM episodes") == []
    check.close()


def test_cli_strategies_name_prints_its_options() -> None:
    res = CliRunner().invoke(app, ["strategies", "para"])
    assert res.exit_code == 0, res.output
    assert "max_rounds" in res.output and "12" in res.output and "max_parallel" in res.output
    names = CliRunner().invoke(app, ["strategies", "para", "--names"])
    assert names.output.split()[:2] == ["max_rounds", "max_calls"]
    listed = CliRunner().invoke(app, ["strategies"])
    assert listed.exit_code == 0 and "proactive" in listed.output and "max_rounds" not in listed.output
    bad = CliRunner().invoke(app, ["strategies", "parra"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "unknown strategy 'parra'" in bad.output


@pytest.mark.parametrize(("strategy", "key"), [
    ("direct", "model"), ("cot", "model"), ("vote", "model"), ("react", "model"), ("router", "fallback"),
    ("proactive", "worker_model"), ("para", "synthesizer"), ("direct", "synthesizer"),
])
async def test_an_option_naming_a_model_not_in_the_pool_is_refused_before_the_episode(
        store: TraceStore, strategy: str, key: str) -> None:
    model = ScriptedModel(["Answer: 1"], name="m")
    with pytest.raises(ConfigError) as caught:
        await solve("q", strategy=strategy, pool=Pool.from_models([model]), tools=ToolRegistry([]), store=store,
                    options={key: "bogus1"})
    assert str(caught.value) == (f"strategy '{strategy}': option '{key}' = 'bogus1' is not a model of the pool "
                                 f"<in-memory>; its models: m")
    assert not model.calls and episodes(store) == []
