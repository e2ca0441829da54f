"""bench/heldout_combine.py: the held-out checks over rows read from several local_pool fragments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench import load_bench

combine = load_bench("heldout_combine")


def fragment(path: Path, family: str, direct: str, verdicts: list[str]) -> Path:
    path.write_text(
        f"# header\n\n**reasoning-gym:{family}@test, 20 examples (fewer where n says so), seed 7**\n\n"
        "| strategy | accuracy ± se | n |\n|---|---|---|\n"
        f"| direct on qwen2.5-coder-1.5b | {direct} | 20 |\n\n"
        "**Per-task verdicts (each strategy against direct on the 1.5B model)**\n\n"
        "| task | strategy | verdict |\n|---|---|---|\n" + "\n".join(verdicts) + "\n", encoding="utf-8")
    return path


def test_rows_are_read_per_family_and_a_later_fragment_wins(tmp_path: Path) -> None:
    first = fragment(tmp_path / "a.md", "chain_sum", "0.30 ± 0.11", [
        "| reasoning-gym:chain_sum | auto (local pool) | above direct by more than 2 se (+0.700 ± 0.105) |",
        "| reasoning-gym:chain_sum | para (local pool) | not below direct minus 1 se (-0.05 ± 0.05) |"])
    second = fragment(tmp_path / "b.md", "chain_sum", "0.25 ± 0.10", [
        "| reasoning-gym:chain_sum | para (local pool) | above direct by more than 2 se (+0.650 ± 0.109) |"])
    rows: dict[str, dict[str, tuple[float, float, str]]] = {}
    combine.read(first, rows)
    combine.read(second, rows)
    assert rows["auto (local pool)"]["reasoning-gym:chain_sum"] == (0.7, 0.105, "a.md")
    assert rows["para (local pool)"]["reasoning-gym:chain_sum"] == (0.65, 0.109, "b.md")
    assert rows[combine.DIRECT]["reasoning-gym:chain_sum"] == (0.25, 0.10, "b.md")


def test_the_checks_keep_only_the_current_held_out_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    kept = fragment(tmp_path / "a.md", "chain_sum", "0.30 ± 0.11", [
        "| reasoning-gym:chain_sum | auto (local pool) | above direct by more than 2 se (+0.700 ± 0.105) |"])
    moved = fragment(tmp_path / "b.md", "maze", "0.10 ± 0.07", [
        "| reasoning-gym:maze | auto (local pool) | below direct minus 1 se (-0.500 ± 0.100) |"])
    monkeypatch.setattr("sys.argv", ["heldout_combine.py", str(kept), str(moved)])
    combine.main()
    out = capsys.readouterr().out
    checks = out.split("**Held-out checks**")[1].split("**Moved to tuning")[0]
    assert "| auto (local pool) | 1 | none | +0.700 ± 0.105 (met) | 1 of 1 |" in checks  # maze's -0.5 is not in it
    assert "| maze | auto (local pool) | -0.500 ± 0.100 | b.md |" in out.split("**Moved to tuning")[1]
    assert "No row yet for:" in out and "number_format" in out
    start, end = combine.BLOCK
    assert out.index(start) < out.index("**Held-out checks**") < out.index(end) < out.index("**Moved to tuning")
