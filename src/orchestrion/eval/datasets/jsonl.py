"""A user's own tasks: one JSON object a line with ``id``, ``prompt``, ``answer`` and optional ``choices``.

Optional keys: ``targets`` (more accepted answers), ``metadata`` (an object kept
on the task). With ``choices`` the answer must be one of them and grading is
multiple choice; a numeric answer is compared by value; anything else by exact
match after normalisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..._errors import ConfigError
from ..._text import parse_number, read_jsonl
from ...runtime.types import Task
from ..scorers import option_labels
from ._base import MC_HINT, options_block


def _text(value: Any, where: str, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or str(value).strip() == "":
        raise ConfigError(f"{where}: '{field}' must be a non-empty string or number")
    return str(value)


def _row(raw: dict[str, Any], where: str, spec: str, path: Path) -> Task:
    for key in ("id", "prompt", "answer"):
        if key not in raw:
            raise ConfigError(f"{where}: missing '{key}' (each line needs id, prompt, answer)")
    task_id, prompt, answer = (_text(raw[k], where, k) for k in ("id", "prompt", "answer"))
    extra = raw.get("metadata") or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{where}: 'metadata' must be an object")
    targets = raw.get("targets", [answer])
    if not isinstance(targets, list) or not targets:
        raise ConfigError(f"{where}: 'targets' must be a non-empty list of strings")
    targets = [_text(t, where, "targets") for t in targets]
    if answer not in targets:
        targets.insert(0, answer)
    meta: dict[str, Any] = {**extra, "dataset": spec, "source": str(path), "targets": targets}
    choices = raw.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or len(choices) < 2:
            raise ConfigError(f"{where}: 'choices' must be a list of at least two options")
        choices = [_text(c, where, "choices") for c in choices]
        if answer not in choices:
            raise ConfigError(f"{where}: answer {answer!r} is not one of the choices")
        prompt = f"{prompt}\n\n{options_block(choices)}\n\n{MC_HINT}"
        meta.update(scoring="multiple_choice", labels=option_labels(len(choices)),
                    target_scores={c: float(c == answer) for c in choices})
    else:
        meta["scoring"] = "numeric" if parse_number(answer) is not None else "exact"
    return Task(prompt=prompt, id=task_id, answer=answer, choices=choices, metadata=meta)


def load_jsonl(spec: str, path: Path) -> list[Task]:
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (expected JSONL with id, prompt, answer on each line)")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, raw in read_jsonl(path, keys="id, prompt, answer"):
        where = f"{path}:{lineno}"
        task = _row(raw, where, spec, path)
        assert task.id is not None
        if task.id in seen:
            raise ConfigError(f"{where}: id {task.id!r} is already used on line {seen[task.id]}")
        seen[task.id] = lineno
        tasks.append(task)
    if not tasks:
        raise ConfigError(f"{path}: no tasks in the file")
    return tasks
