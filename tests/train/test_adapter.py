"""PEFT LoRA -> llama.cpp GGUF adapters, resolving adapter paths, and pools with an adapted orchestrator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the train extra is not installed")
pytest.importorskip("safetensors", reason="the train extra is not installed")
import gguf  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from orchestrion import Pool  # noqa: E402
from orchestrion._errors import ConfigError  # noqa: E402
from orchestrion.models import adapter as adapter_mod  # noqa: E402
from orchestrion.models.pool import EMBEDDED_NAME, ModelSpec  # noqa: E402
from orchestrion.models.scripted import ScriptedModel  # noqa: E402
from orchestrion.train.adapter import (  # noqa: E402
    ADAPTER_GGUF,
    peft_to_gguf,
    permute_rows,
    read_base,
    resolve_adapter,
)

HIDDEN, N_HEAD, N_KV, HEAD_DIM, FFN = 8, 2, 1, 4, 16
PREFIX = "base_model.model.model.layers"


def _fake_base(path: Path, *, general_type: str = "model") -> Path:
    """A tiny llama-shaped GGUF: 2 heads (1 kv head) of size 4, hidden 8, ffn 16, two layers."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_type(general_type)
    w.add_uint32("llama.attention.head_count", N_HEAD)
    w.add_uint32("llama.attention.head_count_kv", N_KV)
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((N_HEAD * HEAD_DIM, HIDDEN), np.float32))
        w.add_tensor(f"blk.{i}.attn_k.weight", np.zeros((N_KV * HEAD_DIM, HIDDEN), np.float32))
        w.add_tensor(f"blk.{i}.ffn_down.weight", np.zeros((HIDDEN, FFN), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _fake_peft(d: Path, tensors: dict[str, np.ndarray], **config: Any) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "k_proj", "down_proj"]}
    cfg.update(config)
    (d / "adapter_config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(d / "adapter_model.safetensors"))
    return d


def _lora(module: str, layer: int, out_dim: int, in_dim: int, rank: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + layer)
    block = "mlp" if module.endswith(("gate_proj", "up_proj", "down_proj")) else "self_attn"
    key = f"{PREFIX}.{layer}.{block}.{module}"
    return {f"{key}.lora_A.weight": rng.standard_normal((rank, in_dim)).astype(np.float32),
            f"{key}.lora_B.weight": rng.standard_normal((out_dim, rank)).astype(np.float32)}


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return _fake_base(tmp_path / "base.gguf")


@pytest.fixture
def peft_dir(tmp_path: Path) -> Path:
    tensors = {**_lora("q_proj", 0, N_HEAD * HEAD_DIM, HIDDEN), **_lora("k_proj", 0, N_KV * HEAD_DIM, HIDDEN),
               **_lora("down_proj", 1, HIDDEN, FFN)}
    return _fake_peft(tmp_path / "peft", tensors)


def _read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    reader = gguf.GGUFReader(str(path))
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: np.array(t.data).reshape(tuple(int(x) for x in reversed(t.shape))) for t in reader.tensors}
    return fields, tensors


# -- the q/k row permutation -------------------------------------------------------

@pytest.mark.parametrize(("n_head", "n_kv"), [(9, None), (9, 3), (4, 4), (8, 2)])
def test_permutation_is_inverted_by_transformers_gguf_loader(n_head: int, n_kv: int | None) -> None:
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    heads = n_kv or n_head
    w = np.random.default_rng(1).standard_normal((heads * 8, 5)).astype(np.float32)
    permuted = permute_rows(w, n_head, n_kv)
    assert not np.array_equal(permuted, w)
    processor: Any = LlamaTensorProcessor  # untyped
    back = processor()._reverse_permute_weights(permuted, n_head, n_kv if n_kv is not None else n_head)
    np.testing.assert_array_equal(back, w)


def test_permutation_rejects_rows_that_do_not_split_over_heads() -> None:
    with pytest.raises(ConfigError, match="cannot permute"):
        permute_rows(np.zeros((10, 2), np.float32), 4)


# -- conversion ---------------------------------------------------------------------

def test_conversion_writes_llama_cpp_names_shapes_and_metadata(peft_dir: Path, base: Path) -> None:
    out = peft_to_gguf(peft_dir, base_gguf=base)
    assert out == peft_dir / ADAPTER_GGUF
    fields, tensors = _read(out)
    assert fields["general.architecture"] == "llama"
    assert fields["general.type"] == "adapter"
    assert fields["adapter.type"] == "lora"
    assert fields["adapter.lora.alpha"] == pytest.approx(4.0)
    assert sorted(tensors) == sorted(
        f"blk.{i}.{m}.weight.lora_{ab}" for i, m in [(0, "attn_q"), (0, "attn_k"), (1, "ffn_down")] for ab in "ab")
    src = _lora("q_proj", 0, N_HEAD * HEAD_DIM, HIDDEN)
    a, b = src[f"{PREFIX}.0.self_attn.q_proj.lora_A.weight"], src[f"{PREFIX}.0.self_attn.q_proj.lora_B.weight"]
    assert tensors["blk.0.attn_q.weight.lora_a"].shape == (2, HIDDEN)  # (r, in)
    assert tensors["blk.0.attn_q.weight.lora_b"].shape == (N_HEAD * HEAD_DIM, 2)  # (out, r)
    np.testing.assert_array_equal(tensors["blk.0.attn_q.weight.lora_a"], a)
    np.testing.assert_array_equal(tensors["blk.0.attn_q.weight.lora_b"], permute_rows(b, N_HEAD))
    k = _lora("k_proj", 0, N_KV * HEAD_DIM, HIDDEN)[f"{PREFIX}.0.self_attn.k_proj.lora_B.weight"]
    np.testing.assert_array_equal(tensors["blk.0.attn_k.weight.lora_b"], permute_rows(k, N_HEAD, N_KV))
    down = _lora("down_proj", 1, HIDDEN, FFN)[f"{PREFIX}.1.mlp.down_proj.lora_B.weight"]
    np.testing.assert_array_equal(tensors["blk.1.ffn_down.weight.lora_b"], down)  # not permuted


def test_conversion_folds_rslora_and_alpha_pattern_into_lora_b(tmp_path: Path, base: Path) -> None:
    tensors = {**_lora("down_proj", 0, HIDDEN, FFN, rank=4), **_lora("down_proj", 1, HIDDEN, FFN, rank=4)}
    d = _fake_peft(tmp_path / "rs", tensors, r=4, lora_alpha=8, use_rslora=True,
                   alpha_pattern={"model.layers.1.mlp.down_proj": 2})
    _, out = _read(peft_to_gguf(d, base_gguf=base))
    # llama.cpp scales by alpha/r = 8/4; PEFT by alpha/sqrt(r): 8/2 for layer 0, 2/2 for layer 1
    for layer, peft_scale in [(0, 4.0), (1, 1.0)]:
        b = tensors[f"{PREFIX}.{layer}.mlp.down_proj.lora_B.weight"]
        np.testing.assert_allclose(out[f"blk.{layer}.ffn_down.weight.lora_b"] * (8 / 4), b * peft_scale, rtol=1e-6)


@pytest.mark.parametrize(("tensors", "message"), [
    (_lora("q_proj", 0, 6, HIDDEN), "do not fit the base weight"),
    (_lora("q_proj", 7, N_HEAD * HEAD_DIM, HIDDEN), "no tensor blk.7.attn_q.weight"),
    ({"base_model.model.model.embed_tokens.lora_embedding_A": np.zeros((2, 3), np.float32)}, "no llama.cpp LoRA"),
    ({f"{PREFIX}.0.self_attn.q_proj.lora_A.weight": np.zeros((2, HIDDEN), np.float32)}, "only one of"),
    ({}, "no LoRA tensors"),
])
def test_conversion_errors_name_the_problem(tmp_path: Path, base: Path, tensors: dict[str, np.ndarray],
                                            message: str) -> None:
    d = _fake_peft(tmp_path / "bad", tensors)
    with pytest.raises(ConfigError, match=message):
        peft_to_gguf(d, base_gguf=base)


def test_the_base_is_read_once_per_file_version(tmp_path: Path) -> None:
    """gguf parses the whole vocabulary: a GRPO step must not pay that again for the same base file."""
    import os

    path = _fake_base(tmp_path / "b.gguf")
    first = read_base(path)
    assert read_base(path) is first and first.n_head == N_HEAD
    with pytest.raises(TypeError):
        first.tensor_shapes["x"] = (1, 1)  # type: ignore[index]  # shared between callers: read-only
    _fake_base(path, general_type="adapter")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a new version of the file
    again = read_base(path)
    assert again is not first and again == first  # read again, same header
    with pytest.raises(ConfigError, match="cannot read as GGUF"):
        read_base(tmp_path / "missing.gguf")


def test_dora_is_refused(tmp_path: Path, base: Path) -> None:
    d = _fake_peft(tmp_path / "dora", _lora("q_proj", 0, N_HEAD * HEAD_DIM, HIDDEN), use_dora=True)
    with pytest.raises(ConfigError, match="DoRA"):
        peft_to_gguf(d, base_gguf=base)


# -- resolving what the user passes ----------------------------------------------------

def test_resolve_converts_a_peft_dir_once_and_then_reuses_it(peft_dir: Path, base: Path) -> None:
    first = resolve_adapter(peft_dir, base_gguf=base)
    assert first == peft_dir / ADAPTER_GGUF and first.is_file()
    stamp = first.stat().st_mtime_ns
    assert resolve_adapter(peft_dir, base_gguf=base) == first
    assert first.stat().st_mtime_ns == stamp
    assert resolve_adapter(first) == first  # the .gguf file itself


def test_resolve_errors(tmp_path: Path, base: Path) -> None:
    with pytest.raises(ConfigError, match="adapter not found"):
        resolve_adapter(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no adapter.gguf and no PEFT adapter"):
        resolve_adapter(tmp_path / "empty")
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        resolve_adapter(text)
    with pytest.raises(ConfigError, match="not a LoRA adapter"):
        resolve_adapter(base)  # a model, not an adapter
    other = tmp_path / "adapter.txt"
    other.write_text("")
    with pytest.raises(ConfigError, match="expected a .gguf"):
        resolve_adapter(other)


# -- pools -----------------------------------------------------------------------------

@pytest.fixture
def adapter_file(peft_dir: Path, base: Path) -> Path:
    return peft_to_gguf(peft_dir, base_gguf=base)


def test_pool_with_adapter_adds_a_hidden_orchestrator_copy(adapter_file: Path) -> None:
    pool = Pool.default().with_orchestrator_adapter(adapter_file)
    adapted = f"{EMBEDDED_NAME}+adapter"
    assert pool.orchestrator == adapted
    assert pool.executor == EMBEDDED_NAME and pool.synthesizer == EMBEDDED_NAME
    assert pool.names == [EMBEDDED_NAME]  # not offered as a model to pick
    assert [row["name"] for row in pool.describe()] == [EMBEDDED_NAME]
    assert pool.spec(adapted).lora_path == str(adapter_file)
    assert pool.spec(adapted).backend == "llama-cpp"
    assert pool.spec(EMBEDDED_NAME).lora_path is None
    model: Any = pool.get(adapted)
    assert model.lora_path == str(adapter_file) and model.name == adapted
    assert pool.get(adapted) is not pool.get(EMBEDDED_NAME)


def test_pool_with_adapter_keeps_roles_of_a_yaml_pool(tmp_path: Path, adapter_file: Path) -> None:
    yaml_file = tmp_path / "pool.yaml"
    yaml_file.write_text(
        "models:\n"
        "  - {name: small, backend: llama-cpp}\n"
        "  - {name: big, backend: openai-api, base_url: 'http://127.0.0.1:9/v1'}\n"
        "orchestrator: small\nexecutor: big\n")
    pool = Pool.from_yaml(yaml_file).with_orchestrator_adapter(adapter_file)
    assert (pool.orchestrator, pool.executor, pool.synthesizer) == ("small+adapter", "big", "small")
    assert pool.names == ["small", "big"]


def test_pool_with_adapter_refuses_a_remote_orchestrator(tmp_path: Path, adapter_file: Path) -> None:
    scripted = Pool.from_models([ScriptedModel(["x"], name="s")])
    with pytest.raises(ConfigError, match="--lora-modules"):
        scripted.with_orchestrator_adapter(adapter_file)


def test_lora_path_is_for_llama_cpp_models_only() -> None:
    with pytest.raises(ValueError, match="--lora-modules"):
        ModelSpec(name="m", backend="openai-api", base_url="http://x/v1", lora_path="a.gguf")
    assert ModelSpec(name="m", backend="llama-cpp", lora_path="a.gguf").lora_path == "a.gguf"


def test_pool_yaml_lora_path_reaches_the_model(tmp_path: Path, adapter_file: Path) -> None:
    yaml_file = tmp_path / "pool.yaml"
    yaml_file.write_text(f"models:\n  - {{name: tuned, backend: llama-cpp, lora_path: '{adapter_file.parent}'}}\n")
    model: Any = Pool.from_yaml(yaml_file).get("tuned")
    assert model.lora_path == str(adapter_file.parent)


# -- the real model: llama.cpp + adapter vs Hugging Face + merged adapter ---------------

def _prompt_ids() -> list[int]:
    from orchestrion.train.hf import load_tokenizer

    ids: Any = load_tokenizer().apply_chat_template(
        [{"role": "user", "content": "Which tool would you call to add 17 and 25?"}], add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def _hf_last_logits(model: Any, ids: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        out: np.ndarray = model(torch.tensor([ids])).logits[0, -1].numpy().astype(np.float64)
    return out


def _cpp_last_logits(model_path: Path, ids: list[int], lora: Path | None = None) -> np.ndarray:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), lora_path=str(lora) if lora else None,
                          n_ctx=256, n_threads=1, verbose=False)
    try:
        llm.eval(ids)
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        return row.astype(np.float64).copy()
    finally:
        llm.close()


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


@pytest.fixture(scope="module")
def f32_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The embedded model de-quantized to float32 GGUF: llama.cpp then computes what HF computes."""
    from orchestrion.models.catalog import find_smollm2_gguf

    reader = gguf.GGUFReader(str(find_smollm2_gguf()))
    path = tmp_path_factory.mktemp("f32") / "smollm2-f32.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        vtype = f.types[0]
        value = 0 if f.name == "general.file_type" else f.contents()  # 0 = all F32
        w.add_key_value(f.name, value, vtype, sub_type=f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data.reshape(tuple(int(x) for x in reversed(t.shape))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    yield path
    path.unlink()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("peft")


@pytest.fixture(scope="module")
def hf_logits(adapters: Path) -> dict[str, np.ndarray]:
    """HF last-position logits of the base model, and with random (non-zero) LoRA adapters on
    q/k only and on every projection (saved as PEFT dirs ``adapters/qk`` and ``adapters/all``)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from orchestrion.train.hf import load_model

    ids = _prompt_ids()
    model: Any = load_model()
    logits = {"base": _hf_last_logits(model, ids)}
    for label, targets in [("qk", ["q_proj", "k_proj"]), ("all", list(adapter_mod.MODULE_NAMES))]:
        torch.manual_seed(0)
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                      init_lora_weights=False))
        peft_model.save_pretrained(str(adapters / label))
        logits[label] = _hf_last_logits(peft_model, ids)
        model = peft_model.unload()  # the base weights again, untouched
    return logits


@pytest.mark.integration
def test_hf_weights_are_the_gguf_weights_once_q_and_k_are_permuted() -> None:
    from safetensors import safe_open

    from orchestrion.models.catalog import find_smollm2_gguf
    from orchestrion.train.hf import _gguf, _hf_dir, load_model

    cached = _hf_dir(_gguf(None))
    if not (cached / "model.safetensors").is_file():
        load_model()  # converts once into the cache
    reader = gguf.GGUFReader(str(find_smollm2_gguf()))
    tensors = {t.name: t for t in reader.tensors}
    base = read_base(find_smollm2_gguf())
    with safe_open(str(cached / "model.safetensors"), framework="numpy") as state:
        for layer in (0, 17):
            for hf_name, gguf_name, kv in [("q_proj", "attn_q", None), ("k_proj", "attn_k", base.n_head_kv)]:
                hf = state.get_tensor(f"model.layers.{layer}.self_attn.{hf_name}.weight")
                t = tensors[f"blk.{layer}.{gguf_name}.weight"]
                deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(hf.shape)
                assert not np.array_equal(hf, deq)
                np.testing.assert_array_equal(permute_rows(hf, base.n_head, kv), deq)


@pytest.mark.integration
def test_llama_cpp_with_adapter_computes_what_hf_computes(
    f32_base: Path, hf_logits: dict[str, np.ndarray], adapters: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _prompt_ids()
    cpp_base = _cpp_last_logits(f32_base, ids)
    assert _corr(hf_logits["base"], cpp_base) > 0.9999
    for label in ("qk", "all"):
        d = adapters / label
        hf_delta = hf_logits[label] - hf_logits["base"]
        cpp_delta = _cpp_last_logits(f32_base, ids, peft_to_gguf(d, d / "f32.gguf", base_gguf=f32_base)) - cpp_base
        assert np.linalg.norm(cpp_delta) > 10, label  # the adapter changes the output
        assert np.linalg.norm(cpp_delta) == pytest.approx(np.linalg.norm(hf_delta), rel=0.05), label
        assert _corr(hf_delta, cpp_delta) > 0.99, label
    # the same q/k adapter without the RoPE row permutation computes something else
    d = adapters / "qk"
    monkeypatch.setattr(adapter_mod, "permute_rows", lambda w, *a, **k: w)
    wrong = _cpp_last_logits(f32_base, ids, peft_to_gguf(d, d / "unpermuted.gguf", base_gguf=f32_base)) - cpp_base
    assert _corr(hf_logits["qk"] - hf_logits["base"], wrong) < 0.9


@pytest.mark.integration
def test_the_quantized_embedded_model_loads_the_adapter(hf_logits: dict[str, np.ndarray], adapters: Path) -> None:
    from orchestrion.models.catalog import find_smollm2_gguf

    ids = _prompt_ids()
    q4 = find_smollm2_gguf()
    cpp_base = _cpp_last_logits(q4, ids)
    cpp_delta = _cpp_last_logits(q4, ids, resolve_adapter(adapters / "all")) - cpp_base
    assert np.linalg.norm(cpp_delta) > 10
    # Q4_1 weights and 8-bit activations add noise, but the change points the same way
    assert _corr(hf_logits["all"] - hf_logits["base"], cpp_delta) > 0.9


def test_eval_pool_source_applies_the_adapter_and_checks_the_path(adapter_file: Path, tmp_path: Path) -> None:
    from orchestrion.eval.executors import PoolSource

    pool = PoolSource(None, adapter=str(adapter_file))()
    assert pool.orchestrator == f"{EMBEDDED_NAME}+adapter"
    assert pool.spec(pool.orchestrator).lora_path == str(adapter_file)
    assert PoolSource(None)().orchestrator == EMBEDDED_NAME
    with pytest.raises(ConfigError, match="orchestrator-adapter .*not found"):
        PoolSource(None, adapter=str(tmp_path / "missing"))
