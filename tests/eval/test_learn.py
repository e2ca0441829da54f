"""`orchestrion auto learn`: every arm on the @train side, resumable, then the arm table (loopback fake server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import run_in_process  # noqa: E402
from test_cli import cli  # noqa: E402


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i}+{i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(12)))
    return path


def test_learn_runs_each_arm_once_and_prints_what_it_learned(tmp_path: Path) -> None:
    with run_in_process("--reply", "Answer: 4") as url:
        pool = tmp_path / "pool.yaml"
        pool.write_text("models:\n  - name: fake\n    backend: openai-api\n"
                        f"    base_url: {url}\n    price: {{input_per_mtok: 1.0, output_per_mtok: 2.0}}\n")
        db = tmp_path / "t.db"
        args = ["auto", "learn", "--dataset", f"jsonl:{_data(tmp_path)}@train", "--pool", str(pool),
                "--arms", "direct:fake,cot:fake", "--limit", "3"]
        first = cli(*args, env_db=db)
        assert first.returncode == 0, first.stderr
        assert "[direct:fake] run" in first.stderr and "[cot:fake] run" in first.stderr
        assert "direct:fake" in first.stdout and "cot:fake" in first.stdout and "accuracy" in first.stdout
        again = cli(*args, env_db=db)  # everything is in the database: nothing runs again
        assert again.returncode == 0, again.stderr
        assert "] run " not in again.stderr and again.stdout == first.stdout


def test_learn_refuses_a_dataset_that_is_not_the_train_side(tmp_path: Path) -> None:
    res = cli("auto", "learn", "--dataset", f"jsonl:{_data(tmp_path)}", "--pool", "tiny", env_db=tmp_path / "t.db")
    assert res.returncode == 2 and "@train side only" in res.stderr and "Traceback" not in res.stderr


def test_an_option_refused_before_the_episode_stops_the_eval_with_one_line(tmp_path: Path) -> None:
    """auto refuses arm_options for an arm it does not run before its episode is recorded: the run
    must not 'finish' with no episode in it."""
    res = cli("eval", "-d", f"jsonl:{_data(tmp_path)}", "-s", "auto", "--pool", "tiny", "--limit", "1",
              "--set", "arms=[\"direct:smollm2-135m\"]", "--set", "arm_options={\"para\": {\"max_rounds\": 4}}",
              env_db=tmp_path / "t.db")
    assert res.returncode != 0 and "no arm runs" in res.stderr and "Traceback" not in res.stderr
