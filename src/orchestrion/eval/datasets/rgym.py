"""Families of reasoning-gym (the ``reasoning-gym`` package): generated tasks, graded by their own checker.

``reasoning-gym:NAME`` is :data:`SIZE` examples of the package's family ``NAME``, generated with
:data:`SEED` under its default configuration. Generation needs no network and, for one package
version (pinned by the ``eval`` extra), gives the same questions every time, so task ids
(``reasoning-gym/NAME/I``) and the ``@train``/``@test`` split by id are stable like a file's. A few
families follow Python's hash order as they generate (``isomorphic_strings``, ``ransom_note``) and
differ between processes unless ``PYTHONHASHSEED`` is fixed: loading one without it is an error that
says so (``bench/families_rgym.py`` leaves them out).

Each prompt is the family's question followed by how to state the answer ("Answer: ..."). A
reference that reads as a number is graded as a number; any other by exact match after
normalisation. Because some families accept more than one answer (any expression that makes 24,
any palindrome of the given letters), the family's own checker (``score_answer``) grades the
stated answer too, and an answer is right when either says so (partial marks from a checker count
as wrong).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from typing import Any

from ..._errors import ConfigError
from ..._text import parse_number
from ...runtime.types import Task
from .._rgym import SEED, SIZE, generated
from ._base import HINTS

__all__ = ["GRADER", "HASH_ORDERED", "INSTALL_HINT", "KIND", "SEED", "SIZE", "available", "family_names",
           "load_rgym"]

KIND = "reasoning-gym"
GRADER = "reasoning-gym"  # metadata["grader"]: AutoScorer also asks the family's own checker
INSTALL_HINT = "install it with `pip install 'orchestrion[eval]'` (package reasoning-gym)"
# families whose questions follow Python's hash order (found by generating them under two hash seeds)
HASH_ORDERED = frozenset({"isomorphic_strings", "ransom_note"})


def available() -> bool:
    """Whether the ``reasoning_gym`` package can be imported."""
    try:
        return importlib.util.find_spec("reasoning_gym") is not None
    except (ImportError, ValueError):
        return False


def family_names() -> list[str]:
    """Every family the installed package registers, sorted."""
    if not available():
        raise ConfigError(f"reasoning-gym is not installed; {INSTALL_HINT}")
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def load_rgym(spec: str, name: str) -> list[Task]:
    """The :data:`SIZE` tasks of family ``name``."""
    names = family_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `orchestrion datasets` says where to look"
        raise ConfigError(f"unknown reasoning-gym family '{name}'{hint}")
    if name in HASH_ORDERED and os.environ.get("PYTHONHASHSEED", "random") == "random":
        raise ConfigError(f"reasoning-gym family '{name}' generates different questions in each process "
                          "(it follows Python's hash order); set PYTHONHASHSEED=0 to make them reproducible")
    tasks = []
    for index, entry in enumerate(generated(name)[1]):
        answer = str(entry["answer"]).strip()
        mode = "numeric" if parse_number(answer) is not None else "exact"
        meta: dict[str, Any] = {"dataset": spec, "task": f"{KIND}/{name}", "scoring": mode, "targets": [answer],
                                "grader": GRADER, "family": name, "index": index}
        prompt = f"{str(entry['question']).strip()}\n\n{HINTS[mode]}"
        tasks.append(Task(prompt=prompt, id=f"{KIND}/{name}/{index}", answer=answer, metadata=meta))
    return tasks
