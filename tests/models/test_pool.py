from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrion import ConfigError, GenerateConfig, ModelNotFoundError, Pool, ScriptedModel, TraceStore, solve

GOOD = """
models:
  - name: qwen
    backend: openai-api
    base_url: http://127.0.0.1:8000/v1
    model: Qwen/Qwen3-4B
    api_key_env: VLLM_KEY
    description: small and fast
    tier: 1
    context_size: 32768
    price: {input_per_mtok: 0.1, output_per_mtok: 0.4}
    max_concurrency: 16
  - name: big
    base_url: http://127.0.0.1:8001/v1
    tier: 3
orchestrator: qwen
synthesizer: big
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "pool.yaml"
    p.write_text(text)
    return p


def test_loads_yaml_with_roles_and_unknown_price(tmp_path: Path) -> None:
    pool = Pool.from_yaml(write(tmp_path, GOOD))
    assert pool.names == ["qwen", "big"]
    assert pool.orchestrator == "qwen" and pool.synthesizer == "big" and pool.executor == "qwen"
    rows = {r["name"]: r for r in pool.describe()}
    assert rows["qwen"]["price_out"] == 0.4
    assert rows["big"]["price_in"] is None  # unknown, never 0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("models: [\n  - name: x\n  bad", "is not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("models:\n  - name: a\n    backend: openai-api\n", "field 'models.0'"),
        ("models:\n  - name: a\n    base_url: http://x\n    tier: 9\n", "field 'models.0.tier'"),
        ("models:\n  - name: a\n    base_url: http://x\n    colour: red\n", "models.0.colour"),
        ("models:\n  - {name: a, base_url: 'http://x'}\n  - {name: a, base_url: 'http://y'}\n",
         "duplicate model names: a"),
        ("models:\n  - {name: a, base_url: 'http://x'}\norchestrator: zz\n", "orchestrator 'zz' is not one of"),
    ],
)
def test_bad_yaml_gives_one_line_naming_file_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        Pool.from_yaml(path)
    message = str(info.value)
    assert needle in message and str(path) in message
    assert "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pool file not found"):
        Pool.from_yaml(tmp_path / "nope.yaml")


def test_default_pool_is_embedded() -> None:
    pool = Pool.default()
    assert pool.names == ["smollm2-135m"]
    assert pool.spec("smollm2-135m").backend == "llama-cpp"
    with pytest.raises(ModelNotFoundError, match="known: smollm2-135m"):
        pool.spec("gpt-9")


async def test_per_model_concurrency_limit() -> None:
    m = ScriptedModel(["ok"], name="m", delay_s=0.05)
    pool = Pool.from_models([m])
    pool.specs["m"].max_concurrency = 2
    await asyncio.gather(*(pool.complete("m", [{"role": "user", "content": "hi"}], GenerateConfig()) for _ in range(6)))
    assert m.max_active == 2


async def test_with_orchestrator_is_hidden_from_the_listing(store: TraceStore) -> None:
    worker = ScriptedModel(["The final answer is 4."], name="worker")
    expert = ScriptedModel(['{"thought": "done", "calls": [], "final": true}'], name="expert")
    base = Pool.from_models([worker])
    pool = base.with_orchestrator(expert)
    assert pool.orchestrator == "expert" and pool.executor == "worker" and pool.synthesizer == "worker"
    assert pool.names == ["worker"] and [r["name"] for r in pool.describe()] == ["worker"]
    result = await solve("2+2?", strategy="para", pool=pool, store=store)
    assert result.status == "ok" and len(expert.calls) == 1
    assert "expert" not in expert.calls[0][0]["content"]  # the prompt lists only the pool's own models
    assert base.orchestrator == "worker"  # the original pool is unchanged


# -- presets: local and tiny ---------------------------------------------------------------
def _pretend_pulled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, names: tuple[str, ...]) -> None:
    import orchestrion.models.presets as presets

    monkeypatch.setattr(presets, "pulled_path", lambda name: tmp_path / f"{name}.gguf" if name in names else None)


def test_local_preset_is_three_priced_tiers_with_roles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from orchestrion.models.presets import LOCAL_MODELS

    _pretend_pulled(monkeypatch, tmp_path, LOCAL_MODELS)
    pool = Pool.preset("local")
    rows = {r["name"]: r for r in pool.describe()}
    assert [rows[n]["tier"] for n in LOCAL_MODELS] == [1, 2, 3]
    assert all(rows[n]["price_in"] > 0 and rows[n]["price_out"] > 0 for n in LOCAL_MODELS)  # never silently free
    assert (
        rows["qwen2.5-coder-1.5b"]["price_out"]
        > rows["qwen2.5-coder-0.5b"]["price_out"]
        > rows["smollm2-135m"]["price_out"]
    )
    assert pool.orchestrator in LOCAL_MODELS and pool.spec(pool.orchestrator).path == str(
        tmp_path / f"{pool.orchestrator}.gguf"
    )


def test_a_preset_with_a_missing_model_says_what_to_pull(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _pretend_pulled(monkeypatch, tmp_path, ("smollm2-135m",))
    with pytest.raises(ConfigError, match="orchestrion models pull qwen2.5-coder-0.5b qwen2.5-coder-1.5b"):
        Pool.preset("local")
    with pytest.raises(ConfigError, match="unknown pool preset 'huge'"):
        Pool.preset("huge")


def test_one_local_models_name_is_a_pool_of_that_model_alone(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    from orchestrion.cli._eval import pool_ref

    _pretend_pulled(monkeypatch, tmp_path, ("smollm2-135m", "qwen2.5-coder-0.5b"))
    monkeypatch.chdir(tmp_path)
    pool = Pool.resolve("qwen2.5-coder-0.5b")  # what the benchmarks store as a single-model run's pool
    assert pool.names == ["qwen2.5-coder-0.5b"] and pool.orchestrator == "qwen2.5-coder-0.5b"
    assert pool.spec("qwen2.5-coder-0.5b").tier == 2  # the catalog's entry, price and tier kept
    assert pool_ref("qwen2.5-coder-0.5b") == "qwen2.5-coder-0.5b"  # stored as a name: --resume finds it anywhere
    with pytest.raises(ConfigError, match="orchestrion models pull qwen2.5-coder-1.5b"):
        Pool.resolve("qwen2.5-coder-1.5b")
    (tmp_path / "qwen2.5-coder-0.5b").write_text("models: [{name: mine, backend: scripted}]\n")
    assert Pool.resolve("qwen2.5-coder-0.5b").names == ["mine"]  # a file of that name wins


def test_default_pool_is_local_once_pulled_else_tiny_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import orchestrion.models.pool as pool_mod
    from orchestrion.models.presets import LOCAL_MODELS

    monkeypatch.delenv("ORCHESTRION_POOL", raising=False)
    monkeypatch.setattr(pool_mod, "_hinted", False)
    _pretend_pulled(monkeypatch, tmp_path, ("smollm2-135m",))
    assert Pool.resolve().names == ["smollm2-135m"]
    [hint] = [r for r in caplog.records if r.name == "orchestrion.models.pool"]  # logged once, not printed
    assert hint.levelname == "WARNING" and "orchestrion models pull" in hint.getMessage()
    assert capsys.readouterr().err == ""
    _pretend_pulled(monkeypatch, tmp_path, LOCAL_MODELS)
    assert Pool.resolve().names == list(LOCAL_MODELS)
    monkeypatch.setenv("ORCHESTRION_POOL", "tiny")
    assert Pool.resolve().names == ["smollm2-135m"]


@pytest.mark.parametrize(("name", "value"), [("ORCHESTRION_PREFIX_CACHE_MB", "abc"),
                                           ("ORCHESTRION_PREFIX_CACHE_MB", "-1"),
                                           ("ORCHESTRION_PREFIX_CACHE", "maybe"),
                                           ("ORCHESTRION_THREADS", "two")])
def test_a_bad_embedded_setting_is_refused_when_the_pool_is_made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                 name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name) as info:
        Pool.resolve("tiny")  # before any model is built or any episode starts
    assert "\n" not in str(info.value)
    assert Pool.resolve(write(tmp_path, GOOD)).names == ["qwen", "big"]  # no embedded model reads it


def test_a_pool_file_named_like_a_preset_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local").write_text(GOOD)
    assert Pool.resolve("local").names == ["qwen", "big"]


@pytest.mark.integration
async def test_structured_prompt_turns_the_llama_cpp_grammar_off(tmp_path: Path) -> None:
    from orchestrion.models.catalog import find_smollm2_gguf

    path = tmp_path / "pool.yaml"
    body = "models:\n" + "".join(
        f"  - name: {name}\n    backend: llama-cpp\n    path: {find_smollm2_gguf()}\n    price: {{input_per_mtok: 0, "
        f"output_per_mtok: 0}}\n" + (f"    structured: {mode}\n" if mode else "")
        for name, mode in (("free", "prompt"), ("forced", None), ("bare", "none"))
    )
    path.write_text(body, encoding="utf-8")
    pool = Pool.from_yaml(path)
    assert not pool.get("free").constrains_json and pool.get("forced").constrains_json
    assert not pool.get("bare").constrains_json
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    cfg = GenerateConfig(max_tokens=24, json_schema=schema)
    msgs = [{"role": "user", "content": "Say hello in French."}]
    forced = await pool.complete("forced", msgs, cfg)  # type: ignore[arg-type]
    free = await pool.complete("free", msgs, cfg)  # type: ignore[arg-type]
    assert forced.structured_mode == "grammar" and free.structured_mode is None


async def test_model_calls_spend_compute_units_by_tier_unless_set() -> None:
    """A call adds (prompt + generated tokens) / 1000 * units to the episode's cost units: the
    tier by default, ``compute_units`` where pool.yaml sets it, so a cost_units budget and the
    efficiency reward see which tier did the work."""
    small, big = ScriptedModel(["ok"], name="small"), ScriptedModel(["ok"], name="big")
    pool = Pool.from_models([small, big])
    pool.config.models[1].tier = 3
    pool.config.models[0].compute_units = 0.25
    assert [pool.spec(n).units_per_1k_tokens for n in ("small", "big")] == [0.25, 3.0]
    msgs = [{"role": "user", "content": "word " * 40}]
    for name, per_1k in (("small", 0.25), ("big", 3.0)):
        c = await pool.complete(name, msgs, GenerateConfig())
        tokens = c.usage.input_tokens + c.usage.output_tokens
        assert tokens > 0 and c.usage.cost_units == pytest.approx(tokens * per_1k / 1000)
    with pytest.raises(ValueError, match="compute_units"):
        type(pool.config.models[0]).model_validate({"name": "x", "backend": "scripted", "compute_units": -1})
