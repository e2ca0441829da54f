"""Model backends as a user meets them through `orchestrion run`: a server that asks for a long
wait, a retry that waits, and an embedded-model setting that cannot work (issue 36 rows 18, 20)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from .conftest import assert_user_message, cli, episodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fake_openai_server
from fake_openai_server import run_in_process  # noqa: E402


def _pool(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(f"models:\n  - name: m\n    backend: openai-api\n    base_url: {url}\n")
    return path


def test_a_retry_after_beyond_the_timeout_fails_at_once_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with run_in_process("--fail-first", "1000", "--fail-status", "429", "--retry-after", "3600") as url:
        t0 = time.perf_counter()
        res = cli("run", "hi", "--strategy", "direct", "--pool", str(_pool(tmp_path, url)), db=db, timeout=60)
    assert time.perf_counter() - t0 < 30  # not 3 capped waits of 30 s
    assert res.returncode == 1
    assert_user_message(res.stderr)
    assert "asks to wait 3600s before a retry, longer than the call's timeout of 45s" in res.stderr
    assert "retry 1 of" not in res.stderr  # it did not wait
    assert [r["status"] for r in episodes(db)] == ["error"]


def test_a_retry_that_waits_says_so_on_stderr(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with run_in_process("--fail-first", "1", "--fail-status", "429", "--retry-after", "0.2") as url:
        res = cli("run", "hi", "--strategy", "direct", "--pool", str(_pool(tmp_path, url)), db=db)
    assert res.returncode == 0, res.stderr
    assert_user_message(res.stderr)
    [line] = [x for x in res.stderr.splitlines() if "retry 1 of 3" in x]
    assert "model 'm'" in line and "HTTP 429" in line and "in 0.2s" in line


@pytest.mark.parametrize("value", ["abc", "-5"])
def test_a_bad_prefix_cache_size_is_refused_before_any_episode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               value: str) -> None:
    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE_MB", value)
    db = tmp_path / "t.db"
    res = cli("run", "hi", "--strategy", "direct", "--pool", "tiny", db=db)
    assert res.returncode == 2
    assert_user_message(res.stderr)
    assert res.stderr.strip().startswith("error: ORCHESTRION_PREFIX_CACHE_MB") and len(res.stderr.splitlines()) == 1
    assert not db.exists() or episodes(db) == []  # no error episode recorded
