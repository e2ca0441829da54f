"""BIG-bench JSON tasks as :class:`Task` lists.

A task folder holds a ``task.json`` with ``examples`` (each an ``input`` with a
``target`` string or list, and/or ``target_scores`` mapping options to scores),
or only subtask folders, which are then all loaded. Options are listed in the
prompt in a fixed per-example order (sorted, then shuffled with a seed derived
from the example's id) so the correct one is not always first.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from ..._errors import ConfigError
from ..._text import parse_number
from ...runtime.types import Task
from ..scorers import option_labels
from ._base import HINTS, options_block
from ._fetch import programmatic_tasks, require_tasks_dir

# Tasks this project names in its docs and tests; any other task.json works too.
NAMED_TASKS = (
    "arithmetic",
    "date_understanding",
    "logical_deduction",
    "tracking_shuffled_objects",
    "word_sorting",
    "object_counting",
    "navigate",
    "elementary_math_qa",
    "penguins_in_a_table",
    "temporal_sequences",
)
_NAME = re.compile(r"[\w.-]+(?:/[\w.-]+)*")


def is_path(ref: str) -> bool:
    return ref.endswith(".json") or ref.startswith(("/", "./", "../", "~"))


def load_bigbench(spec: str, ref: str) -> list[Task]:
    """Tasks of BIG-bench task ``ref`` ("name", "name/subtask") or of a task.json path."""
    if is_path(ref):
        path = Path(ref).expanduser()
        if path.is_dir():
            path = path / "task.json"
        if not path.is_file():
            raise ConfigError(f"{path}: no such BIG-bench task.json file")
        return _load_file(spec, path, path.parent.name)
    if not _NAME.fullmatch(ref) or ".." in ref.split("/"):
        raise ConfigError(f"'{ref}' is not a BIG-bench task name; use e.g. bigbench:arithmetic/2_digit_addition")
    root = require_tasks_dir()
    return _load_named(spec, root, ref)


def task_names(root: Path) -> list[str]:
    """Top-level task folders under ``root`` that hold a task.json somewhere."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and next(p.glob("**/task.json"), None))


def _load_named(spec: str, root: Path, ref: str) -> list[Task]:
    folder = root / ref
    if ref in programmatic_tasks(root):
        raise ConfigError(
            f"BIG-bench task '{ref}' is programmatic (a task.py, no task.json) and is not supported; pick a JSON task"
        )
    if not folder.is_dir():
        close = difflib.get_close_matches(ref, task_names(root), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `orchestrion datasets` for named tasks"
        raise ConfigError(f"unknown BIG-bench task '{ref}' (not in {root}){hint}")
    file = folder / "task.json"
    if file.is_file() and (data := _read(file)).get("examples"):
        return _tasks(spec, file, ref, data)
    subs = sorted(p.parent for p in folder.glob("*/task.json"))
    if not subs:
        raise ConfigError(f"BIG-bench task '{ref}' has no examples and no subtasks with a task.json in {folder}")
    tasks: list[Task] = []
    for sub in subs:
        name = f"{ref}/{sub.name}"
        tasks += _tasks(spec, sub / "task.json", name, _read(sub / "task.json"))
    return tasks


def subtasks(root: Path, ref: str) -> list[str]:
    return sorted(f"{ref}/{p.parent.name}" for p in (root / ref).glob("*/task.json"))


def _read(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{file}: not readable as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a JSON object with 'examples'")
    return data


def _load_file(spec: str, file: Path, name: str) -> list[Task]:
    data = _read(file)
    if not data.get("examples"):
        raise ConfigError(f"{file}: has no 'examples'; for a task with subtasks give one subtask's task.json")
    return _tasks(spec, file, name, data)


def _targets(raw: Any) -> list[str]:
    if raw is None:
        return []
    return [str(t) for t in raw] if isinstance(raw, list) else [str(raw)]


def _mode(data: dict[str, Any], targets: list[str], scores: dict[str, float]) -> str:
    if scores and (data.get("preferred_score") == "multiple_choice_grade" or not targets):
        return "multiple_choice"
    return "numeric" if any(parse_number(t) is not None for t in targets) else "exact"


def _order(options: list[str], seed_text: str) -> list[str]:
    seed = int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "big")
    ordered = sorted(options)
    random.Random(seed).shuffle(ordered)
    return ordered


def _tasks(spec: str, file: Path, name: str, data: dict[str, Any]) -> list[Task]:
    examples = data.get("examples")
    if not isinstance(examples, list):
        raise ConfigError(f"{file}: 'examples' must be a list")
    tasks = []
    for i, ex in enumerate(examples):
        if not isinstance(ex, dict) or not isinstance(ex.get("input"), str):
            raise ConfigError(f"{file}: example {i} has no string 'input'")
        targets = _targets(ex.get("target"))
        scores = {str(k): float(v) for k, v in (ex.get("target_scores") or {}).items()}
        if not targets and not scores:
            raise ConfigError(f"{file}: example {i} has neither 'target' nor 'target_scores'")
        task_id = f"{name}/{i}"
        mode = _mode(data, targets, scores)
        meta: dict[str, Any] = {"dataset": spec, "task": name, "source": str(file), "scoring": mode}
        meta["preferred_score"] = data.get("preferred_score")
        choices: list[str] | None = None
        if mode == "multiple_choice":
            choices = _order(list(scores), task_id)
            best = max(scores.values())
            answer = next(o for o in scores if scores[o] == best)
            meta.update(targets=[o for o in scores if scores[o] == best], target_scores=scores)
            meta["labels"] = option_labels(len(choices))
        else:
            answer = targets[0]
            meta["targets"] = targets
        prompt = build_prompt(data, ex["input"], choices, mode)
        tasks.append(Task(prompt=prompt, id=task_id, answer=answer, choices=choices, metadata=meta))
    return tasks


def build_prompt(data: dict[str, Any], text: str, choices: list[str] | None, mode: str) -> str:
    """Task prefix, the input (with its prefix), the options, and how to state the answer."""
    parts = []
    prefix = str(data.get("task_prefix") or data.get("prefix") or "").strip()
    if prefix:
        parts.append(prefix)
    lead = str(data.get("example_input_prefix") or "").strip()
    body = text.strip()
    if lead and lead.lower() not in ("q:", "input:", "question:"):
        body = f"{lead} {body}" if len(lead) <= 16 else f"{lead}\n{body}"
    parts.append(body)
    if choices:
        parts.append(options_block(choices))
    parts.append(HINTS[mode])
    return "\n\n".join(parts)
