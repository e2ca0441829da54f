"""bench/learning.py's verdicts: gains in accuracy beyond the seed spread, or equal accuracy at
25% fewer compute units, paired by seed; and the student against the teacher."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.bench import load_bench

learning = load_bench("learning")
HELD, UNSEEN = "bigbench:a@test", "bigbench:u@test"
Metrics = dict[tuple[str, str, int], dict[str, float]]  # (row, dataset, seed) -> a run's metrics


def bench(metrics: Metrics, methods: list[str]) -> Any:
    """A Bench stand-in: its state names one run per (row, dataset, seed), its metrics are given."""
    state: dict[str, Any] = {f"adapter:{m}": "x" for m in methods}
    state |= {f"eval:{row}:{d}:{seed}": f"{row}|{d}|{seed}" for row, d, seed in metrics}
    by_run = {f"{row}|{d}|{seed}": {"n": 3.0, **m} for (row, d, seed), m in metrics.items()}
    return SimpleNamespace(size={"seeds": [1, 2, 3], "methods": methods}, state=state,
                           metrics=lambda run: by_run[run],
                           datasets=lambda: [(HELD, "held-out"), (UNSEEN, "unseen task")])


def rows(row: str, accs: list[float], units: float, orch_s: float = 1.0) -> Metrics:
    return {(row, d, seed): {"accuracy": acc, "units": units, "orch_s": orch_s}
            for d in (HELD, UNSEEN) for seed, acc in zip((1, 2, 3), accs, strict=True)}


@pytest.mark.parametrize(("accs", "units", "verdict"), [
    ([0.7, 0.8, 0.6], 10.0, "a gain beyond the spread"),           # +0.2 every seed
    ([0.5, 0.6, 0.4], 7.0, "a gain: equal accuracy at 30% fewer compute units"),
    ([0.5, 0.6, 0.4], 8.0, "no gain beyond the spread"),            # 20% fewer is not enough
    ([0.3, 0.4, 0.2], 5.0, "a loss beyond the spread"),             # cheaper but worse
])
def test_a_method_against_sft(accs: list[float], units: float, verdict: str) -> None:
    b = bench(rows("student:sft", [0.5, 0.6, 0.4], 10.0) | rows("student:grpo", accs, units), ["sft", "grpo"])
    line = learning.compare(b, "student:grpo", "student:sft", [HELD])
    assert line is not None and line.endswith(verdict), line
    assert f"compute units x{units / 10:.2f}" in line


def test_verdicts_cover_the_held_out_set_and_the_teacher() -> None:
    b = bench(rows("student:sft", [0.5, 0.6, 0.4], 10.0, 2.0) | rows("student:grpo", [0.7, 0.8, 0.6], 10.0, 2.0)
              | rows("teacher", [0.6, 0.7, 0.5], 20.0, 8.0), ["sft", "grpo", "opod"])
    b.state.pop("adapter:opod")
    text = "\n".join(learning.verdicts(b))
    assert "- OPOD: not trained" in text
    assert "GRPO on a@test (held-out): +0.20 ± 0.00 over 3 seed(s)" in text
    assert "student after GRPO, held-out (1 task(s)): +0.10 ± 0.00 over 3 seed(s), compute units x0.50, " \
           "orchestrator time x0.25: a gain beyond the spread" in text
    assert "student after SFT, unseen task (1 task(s)): -0.10 ± 0.00 over 3 seed(s), compute units x0.50, " \
           "orchestrator time x0.25: a loss beyond the spread" in text


def test_a_seed_without_a_finished_run_is_not_paired() -> None:
    metrics = rows("student:sft", [0.5, 0.6, 0.4], 10.0) | rows("student:grpo", [0.9, 0.9, 0.9], 10.0)
    del metrics[("student:grpo", HELD, 3)]
    line = learning.compare(bench(metrics, ["sft", "grpo"]), "student:grpo", "student:sft", [HELD])
    assert line is not None and "over 2 seed(s)" in line


def test_grpo_steps_are_tabled_from_the_train_log(tmp_path: Any) -> None:
    log = tmp_path / "train_log.json"
    assert learning.grpo_steps(log) == []  # GRPO has not run: nothing to show
    log.write_text('{"steps": [{"step": 1, "episodes": 16, "groups": 4, "groups_kept": 3, "mean_reward": 0.5, '
                   '"reward_sd": 0.25, "valid_rate": 0.9, "decisions": 40, "trained": 31, "loss": 0.0123, '
                   '"rollout_gap": 0.0412, "rollout_gap_p95": 0.1873, "wall_s": 301.4}, '
                   '{"step": 2, "episodes": 16, "groups": 4, "groups_kept": 0, '
                   '"mean_reward": 1.0, "valid_rate": null, "loss": null}]}')
    lines = learning.grpo_steps(log)
    assert "| 1 | 16 | 3/4 | 0.500 ± 0.250 | 0.900 | 31/40 | 0.0123 | 0.041 / 0.187 | 301 |" in lines
    assert "| 2 | 16 | 0/4 | 1.000 ± 0.000 | - | 0/0 | - | - | 0 |" in lines


def test_run_time_is_kept_at_every_save_so_a_killed_run_keeps_it(tmp_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(learning.time, "perf_counter", lambda: clock[0])
    first = learning.Bench(tmp_path, {})
    first.state["wall_s"] = 60.0  # an earlier invocation's time
    first.start_clock()
    clock[0] += 30.0
    first.save()  # e.g. an eval run starts; then the process dies with no chance to clean up
    clock[0] += 500.0
    first.store.close()
    again = learning.Bench(tmp_path, {})
    assert again.state["wall_s"] == pytest.approx(90.0)
    assert again.state["invocations"] == 1
    again.start_clock()
    clock[0] += 10.0
    again.save()
    assert again.state["wall_s"] == pytest.approx(100.0) and again.state["invocations"] == 2
    again.store.close()


def test_the_grammar_flag_keeps_the_student_under_the_presets_grammar(tmp_path: Any) -> None:
    def student(size: dict[str, Any]) -> dict[str, Any]:
        import yaml

        b = learning.Bench(tmp_path, size)
        config = yaml.safe_load(b.student_pool_file().read_text())
        b.store.close()
        assert config["orchestrator"] == learning.STUDENT
        return next(m for m in config["models"] if m["name"] == learning.STUDENT)

    assert student({})["structured"] == "none"
    assert student({"student_grammar": True}).get("structured", "auto") != "none"


def test_table_only_on_an_empty_folder_says_so_and_writes_nothing(tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.bench import BENCH

    out = tmp_path / "never-run"
    proc = subprocess.run([sys.executable, str(BENCH / "learning.py"), "--mixed", "--table-only", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: nothing recorded in {out}")
    assert not out.exists()


def test_more_grpo_steps_continue_a_finished_run_and_drop_only_grpos_rows(tmp_path: Any) -> None:
    size = {"train": ["a"], "seeds": [1], "grpo": {"limit": 8, "steps": 1}}
    b = learning.Bench(tmp_path, size)
    b.state.update({"size": size, "wall_s": 600.0, "adapter:sft": "s", "sft": "done", "grpo": "done",
                    "adapter:grpo": "g", "eval:student:grpo:bigbench:a@test:1": "r1",
                    "eval:student:sft:bigbench:a@test:1": "r2"})
    more = {**size, "grpo": {"limit": 8, "steps": 4}}
    assert learning.extend_grpo(b, more)
    assert b.size == b.state["size"] == more
    assert not any(k in b.state for k in ("grpo", "adapter:grpo", "eval:student:grpo:bigbench:a@test:1"))
    assert b.state["eval:student:sft:bigbench:a@test:1"] == "r2" and b.state["adapter:sft"] == "s"
    assert b.state["grpo_extended"] == [{"from": 1, "to": 4, "at_minute": 10}]
    b.store.close()


@pytest.mark.parametrize("other", [
    {"grpo": {"limit": 8, "steps": 1}},                # no more steps than recorded
    {"grpo": {"limit": 8, "steps": 0}},                # fewer
    {"grpo": {"limit": 4, "steps": 4}},                # another GRPO setting changes too
    {"seeds": [1, 2], "grpo": {"limit": 8, "steps": 4}},  # another size key changes too
])
def test_only_a_raise_of_grpo_steps_alone_extends_a_run(tmp_path: Any, other: dict[str, Any]) -> None:
    size = {"train": ["a"], "seeds": [1], "grpo": {"limit": 8, "steps": 1}}
    b = learning.Bench(tmp_path, size)
    b.state.update({"size": size, "grpo": "done", "adapter:grpo": "g"})
    assert not learning.extend_grpo(b, {**size, **other})
    assert b.state["grpo"] == "done" and b.state["size"] == size and "grpo_extended" not in b.state
    b.store.close()


def test_more_methods_join_a_finished_run_and_keep_everything_recorded(tmp_path: Any) -> None:
    size = {"train": ["a"], "seeds": [1], "methods": ["sft", "grpo"]}
    b = learning.Bench(tmp_path, size)
    done = {"size": size, "wall_s": 3000.0, "sft": "done", "adapter:sft": "s", "grpo": "done", "adapter:grpo": "g",
            "eval:student:grpo:bigbench:a@test:1": "r1"}
    b.state.update(done)
    full = {**size, "methods": ["sft", "grpo", "opod"]}
    assert learning.add_methods(b, full)
    assert b.size == b.state["size"] == full
    assert all(b.state[k] == v for k, v in done.items() if k != "size")
    assert b.state["methods_added"] == [{"methods": ["opod"], "at_minute": 50}]
    assert [r for r, _ in b.rows()][:3] == ["student:base", "student:sft", "student:grpo"]  # opod: no adapter yet
    b.store.close()


@pytest.mark.parametrize("other", [
    {"methods": ["sft", "grpo"]},                     # the same methods
    {"methods": ["sft"]},                             # fewer
    {"methods": ["sft", "opod"]},                     # another set, not a superset
    {"seeds": [1, 2], "methods": ["sft", "grpo", "opod"]},  # another size key changes too
])
def test_only_more_methods_alone_extend_a_run(tmp_path: Any, other: dict[str, Any]) -> None:
    size = {"train": ["a"], "seeds": [1], "methods": ["sft", "grpo"]}
    b = learning.Bench(tmp_path, size)
    b.state.update({"size": size, "grpo": "done"})
    assert not learning.add_methods(b, {**size, **other})
    assert b.state["size"] == size and "methods_added" not in b.state
    b.store.close()
