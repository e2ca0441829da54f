"""Library errors say what is wrong; only the CLI names the flag to change, and the library
writes nothing to stderr itself (issue 36: "Library errors say what is wrong")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from orchestrion import BudgetExceededError, ConfigError, Pool, TraceStore
from orchestrion.eval.runner import EvalConfig, run_eval

from .conftest import cli

SRC = Path(__file__).resolve().parents[2] / "src" / "orchestrion"
# the flags `orchestrion` itself takes (another tool's, such as vLLM's --lora-modules, may be named)
OURS = {m for path in (SRC / "cli").glob("*.py")
        for m in re.findall(r"typer\.Option\(\s*\"(--[a-z][a-z-]+)\"", path.read_text())}
FLAG = re.compile("|".join(rf"(?<![\w-]){re.escape(f)}(?![\w-])" for f in sorted(OURS, key=len, reverse=True)))


def test_the_flags_are_found() -> None:
    assert {"--budget", "--pool", "--orchestrator-adapter", "--retry-errors", "--resume", "--limit"} <= OURS


def test_a_budget_error_names_the_limit_not_a_flag() -> None:
    text = str(BudgetExceededError("tokens", 12, 5))
    assert text == "budget exceeded: tokens used 12 of 5" and not FLAG.search(text)


def test_pool_errors_name_no_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        Pool.from_yaml(tmp_path / "nope.yaml")
    served = tmp_path / "pool.yaml"
    served.write_text("models:\n  - name: m\n    base_url: http://127.0.0.1:9/v1\n")
    with pytest.raises(ConfigError) as adapter:
        Pool.from_yaml(served).with_orchestrator_adapter(tmp_path)
    for info in (missing, adapter):
        assert not FLAG.search(str(info.value)), str(info.value)
    assert "pool file not found" in str(missing.value) and "LoRA adapter" in str(adapter.value)


async def test_eval_runner_errors_name_its_parameters_not_flags(store: TraceStore) -> None:
    config = EvalConfig(dataset="jsonl:x.jsonl", strategies=["direct"])
    with pytest.raises(ConfigError, match="retry_errors .* it needs resume") as retry:
        await run_eval(config, store, retry_errors=True)
    with pytest.raises(ConfigError, match="extend_to .* it needs resume") as extend:
        await run_eval(config, store, extend_to=4)
    for info in (retry, extend):
        assert not FLAG.search(str(info.value)), str(info.value)


def test_the_cli_still_names_the_flag(tmp_path: Path) -> None:
    res = cli("eval", "--dataset", "jsonl:x.jsonl", "--retry-errors", db=tmp_path / "t.db")
    assert res.returncode == 2 and "--retry-errors" in res.stderr and "--resume RUN_ID" in res.stderr


@pytest.mark.parametrize("module", ["models/pool.py", "_errors.py", "eval/runner.py"])
def test_no_flag_in_a_library_message(module: str) -> None:
    """String literals of these modules name no CLI flag (resume_command builds the CLI's own line)."""
    tree = ast.parse((SRC / module).read_text())
    skip = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "resume_command"
            for n in ast.walk(f)}
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in skip and FLAG.search(n.value) and not isinstance(n, ast.Expr)]
    docstrings = {ast.get_docstring(n, clean=False) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    assert [s for s in found if s not in docstrings] == []


@pytest.mark.parametrize("folder", ["models", "eval"])
def test_library_code_writes_to_stderr_through_logging_only(folder: str) -> None:
    for path in sorted((SRC / folder).glob("*.py")):
        tree = ast.parse(path.read_text())
        direct = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "stderr"
                  and isinstance(n.value, ast.Name) and n.value.id == "sys"]
        assert direct == [], f"{path.relative_to(SRC)}: sys.stderr at lines {direct}"
