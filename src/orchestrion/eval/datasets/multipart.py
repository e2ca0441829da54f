"""Multi-part tasks: ``bigbench-mix:K`` puts K BIG-bench questions, from K different families,
numbered in one prompt, and grades each part by its own family's rule.

``bigbench-mix:K`` draws from :data:`DEFAULT_FAMILIES` (the tuning families of the results tables);
``bigbench-mix:K:fam1,fam2,...`` names others (at least K). ``reasoning-gym-mix:K:fam1,fam2,...``
does the same with reasoning-gym's generated families (:mod:`.rgym`), which it must name. With
``@train`` / ``@test`` every question comes from its family's own side of the split, so an ``@test``
example holds only ``@test`` questions; without a suffix, an example is on the test side when any
of its questions is.

**Sampling.** Each family's questions are shuffled once, with a seed made of the family's name,
the side and the dataset seed (so ``bigbench-mix:3`` and ``bigbench-mix:4`` take each family's
questions in the same order). Example *i* takes the K families used least so far (ties broken by a
seeded draw), in a seeded order, and the next unused question of each. Every family is used
equally often and no question twice, so there are ``⌊smallest family's side × families / K⌋``
examples (128 on ``bigbench-mix:3@test`` with the default families); ``--limit N`` takes the first N,
and example *i* is the same for any limit, so a run can be extended. The same spec and seed give
the same examples; the id joins the part ids (``bigbench-mix:word_sorting/12,navigate/40,...``).

**Scoring** (:class:`PartsScorer`): the answer's numbered lines are read (``1: x``, ``1. x``,
``(1) x``, ``Part 1: x``, ...; :func:`orchestrion.runtime.parts.parse_parts`, the reading by which
strategies keep a multi-part answer whole), each part is scored by the ordinary scorer of its own mode (exact,
numeric or multiple choice), and a missing part scores 0. The example's score is the mean of
its parts; ``correct`` (and ``all_parts``) means every part was right; ``parts`` lists each part.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..._errors import ConfigError
from ..._text import without_answer_line_hint
from ...runtime.parts import MULTIPART, parse_parts
from ...runtime.types import Task
from ..scorers import AutoScorer, Score
from .bigbench import load_bigbench
from .rgym import KIND as RGYM
from .rgym import load_rgym

KIND = "bigbench-mix"
RGYM_KIND = f"{RGYM}-mix"
MODE = MULTIPART  # the example's metadata["scoring"]; each part keeps its own mode
# each kind's loader of one family's questions
LOADERS: dict[str, Callable[[str], list[Task]]] = {
    KIND: lambda family: load_bigbench(f"bigbench:{family}", family),
    RGYM_KIND: lambda family: load_rgym(f"{RGYM}:{family}", family),
}
# the tuning families of bench/families.py (TUNING): the library does not import bench/, a test
# checks that the two lists agree
DEFAULT_FAMILIES = (
    "arithmetic/3_digit_multiplication", "arithmetic/2_digit_division",
    "object_counting", "word_sorting", "date_understanding", "logical_deduction",
    "penguins_in_a_table", "temporal_sequences",
)
# how each part's line should read, by the part's scoring mode
FORMS = {"multiple_choice": "one of its options, as (X) option text", "numeric": "a number only",
         "exact": "the answer only, no explanation"}
_PART_KEYS = ("scoring", "targets", "target_scores", "labels", "grader", "index")


@dataclass(frozen=True)
class MixSpec:
    k: int
    families: tuple[str, ...]


def parse_spec(ref: str, kind: str = KIND) -> MixSpec:
    """``K`` or ``K:fam1,fam2,...`` (what follows ``bigbench-mix:``; ``reasoning-gym-mix:`` needs the names)."""
    count, _, names = ref.strip().partition(":")
    if not count.strip().isdigit() or int(count) < 2:
        raise ConfigError(f"'{kind}:{ref}': K must be a whole number of parts, 2 or more, e.g. {kind}:3")
    families = tuple(f.strip() for f in names.split(",") if f.strip())
    if not families and kind == RGYM_KIND:
        raise ConfigError(f"'{kind}:{ref}': name the families, e.g. {kind}:2:gcd,maze,coin_flip")
    families = families or DEFAULT_FAMILIES
    if len(set(families)) != len(families):
        raise ConfigError(f"'{kind}:{ref}': a family is named twice")
    if int(count) > len(families):
        raise ConfigError(f"'{kind}:{ref}': {count} parts need {count} different families, "
                          f"{len(families)} given")
    return MixSpec(int(count), families)


def part_ids(task_id: str) -> list[str] | None:
    """The ids of a multi-part example's questions; None for any other id."""
    prefix = next((f"{k}:" for k in LOADERS if task_id.startswith(f"{k}:")), None)
    if prefix is None:
        return None
    return [p for p in task_id[len(prefix):].split(",") if p] or None


def capacity(sizes: list[int], k: int) -> int:
    """How many examples K parts can make from families of these sizes, each family used equally."""
    return min(sizes) * len(sizes) // k if sizes else 0


def load_multipart(spec: str, ref: str, split: str | None, *, seed: int | None, limit: int | None,
                   side: Callable[[str], str], kind: str = KIND) -> list[Task]:
    """The first ``limit`` examples (all of them when None) of ``KIND:ref``; ``side`` gives a
    question id's side of the split."""
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be 0 or more, got {limit}")
    mix = parse_spec(ref, kind)
    pools = {f: _questions(kind, f, split, seed, side) for f in mix.families}
    empty = [f for f, qs in pools.items() if not qs]
    if empty:
        raise ConfigError(f"dataset '{spec}': no questions on the {split} side of {', '.join(empty)}")
    count = capacity([len(qs) for qs in pools.values()], mix.k)
    count = count if limit is None else min(count, limit)
    rng = random.Random(f"{KIND}|{mix.k}|{','.join(mix.families)}|{split}|{seed or 0}")
    used = dict.fromkeys(mix.families, 0)
    tasks = []
    for _ in range(count):
        chosen = sorted(mix.families, key=lambda f: (used[f], rng.random()))[:mix.k]
        rng.shuffle(chosen)
        parts = [pools[f][used[f]] for f in chosen]
        for f in chosen:
            used[f] += 1
        tasks.append(combine(spec, parts, chosen, split, kind))
    return tasks


def _questions(kind: str, family: str, split: str | None, seed: int | None,
               side: Callable[[str], str]) -> list[Task]:
    tasks = [t for t in LOADERS[kind](family) if split is None or side(str(t.id)) == split]
    random.Random(f"{KIND}|{family}|{split}|{seed or 0}").shuffle(tasks)
    return tasks


def combine(spec: str, parts: list[Task], families: list[str], split: str | None, kind: str = KIND) -> Task:
    """One multi-part example of ``parts`` (in that order)."""
    meta: dict[str, Any] = {"dataset": spec, "task": f"{kind}:{len(parts)}", "scoring": MODE,
                            "families": families, "parts": [_part_meta(p, f) for p, f in zip(parts, families)]}
    if split is not None:
        meta["split"] = split
    answer = "\n".join(f"{n}: {_shown_answer(p)}" for n, p in enumerate(meta["parts"], 1))
    task_id = f"{kind}:" + ",".join(str(p.id) for p in parts)
    return Task(prompt=build_prompt(meta["parts"]), id=task_id, answer=answer, metadata=meta)


def _part_meta(part: Task, family: str) -> dict[str, Any]:
    meta = {k: part.metadata[k] for k in _PART_KEYS if k in part.metadata}
    return {"id": part.id, "family": family, "prompt": without_answer_line_hint(part.prompt),
            "answer": part.answer, "choices": part.choices, **meta}


def _shown_answer(part: dict[str, Any]) -> str:
    choices, answer = part.get("choices"), str(part.get("answer"))
    if choices and answer in choices:
        return f"({part['labels'][choices.index(answer)]}) {answer}"
    return answer


def build_prompt(parts: list[dict[str, Any]]) -> str:
    """The numbered questions, each with the form of its answer, then how to write the last lines."""
    k = len(parts)
    blocks = [f"Answer each of the {k} questions below. They do not depend on one another."]
    for n, part in enumerate(parts, 1):
        form = FORMS.get(str(part.get("scoring")), FORMS["exact"])
        blocks.append(f"Question {n} (answer line: {form})\n{part['prompt']}")
    lines = "\n".join(f"{n}: <your answer to question {n}>" for n in range(1, k + 1))
    blocks.append(f"When you have worked them out, end your reply with {k} lines, one for each question "
                  f"in order, each made of the question's number, a colon and that question's answer only:\n{lines}")
    return "\n\n".join(blocks)


@dataclass(frozen=True)
class PartsScore(Score):
    """A multi-part example's score: ``value`` is the parts' mean, ``correct`` all parts right."""

    parts: tuple[dict[str, Any], ...] = ()

    def to_meta(self) -> dict[str, Any]:
        right = sum(1 for p in self.parts if p["correct"])
        return {**super().to_meta(), "part_score": self.value, "all_parts": self.correct,
                "parts_right": right, "parts": list(self.parts)}


class PartsScorer(AutoScorer):
    """:class:`AutoScorer`, and multi-part examples part by part, each by its own mode."""

    async def __call__(self, task: Task, output: str) -> Score:
        parts = task.metadata.get("parts")
        if task.metadata.get("scoring") != MODE or not isinstance(parts, list) or not parts:
            return await super().__call__(task, output)
        answers = parse_parts(output, len(parts))
        rows = []
        for n, part in enumerate(parts, 1):
            text = answers.get(n)
            got = Score(0.0, False, None, "no line for this part") if text is None \
                else await super().__call__(_part_task(part), text)
            rows.append({"n": n, "id": part.get("id"), "family": part.get("family"), "score": got.value,
                         "correct": got.correct, "extracted": got.extracted, "detail": got.detail})
        mean = sum(r["score"] for r in rows) / len(rows)
        right = sum(1 for r in rows if r["correct"])
        extracted = "\n".join(f"{r['n']}: {r['extracted']}" for r in rows if r["extracted"] is not None)
        return PartsScore(mean, right == len(rows), extracted or None,
                          f"{right} of {len(rows)} parts right", tuple(rows))


def _part_task(part: dict[str, Any]) -> Task:
    meta = {k: part[k] for k in _PART_KEYS if k in part}
    if "grader" in meta:  # a reasoning-gym part: its family's checker needs the family's name
        meta["family"] = part.get("family")
    return Task(prompt=str(part.get("prompt") or "part"), id=part.get("id"), answer=part.get("answer"),
                choices=part.get("choices"), metadata=meta)
