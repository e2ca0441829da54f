"""Held-out families from reasoning-gym, and the rule that drew them (fixed before any of them ran).

BIG-bench's task files left PyPI on 2026-12-07, so the BIG-bench held-out list of
``bench/families.py`` cannot be run again on a fresh machine. reasoning-gym (the ``reasoning-gym``
package, pinned by the ``eval`` extra) generates its tasks offline, so its families are a second
held-out source that any machine can reproduce (``reasoning-gym:FAMILY``,
:mod:`orchestrion.eval.datasets.rgym`). The tuning families stay those of ``bench/families.py``.

**The rule**, applied by :func:`candidates` (``python bench/families_rgym.py`` prints the draw):

1. every family the package registers whose name is not a tuning family or a task the project
   names (``families.TUNING``, ``TUNING_EXTRA``, ``NAMED``; this excludes ``word_sorting``);
2. generated as the loader generates it (100 examples, seed 35, default configuration), within 60 s:
   - every reference is one line of at most 20 characters, and the median question is at most
     600 characters (as for BIG-bench);
   - the family's own checker gives every reference full marks;
   - the questions and references are the same in two processes with different hash seeds (a
     family whose generation follows set order cannot be reproduced);
3. the families of the package's modules arithmetic, algorithmic, algebra, geometry, probability
   and code form the *math* group, the rest (logic, cognition, games, graphs, induction, arc) the
   *other* group; six of each are drawn by a shuffle seeded with 35.

``PROGRAM_DECIDES`` was judged from each drawn family's question form, before any run: the
question holds all the data and a short program (tens of lines, no search over more than a few
thousand cases) computes the answer.

As in ``bench/families.py``: a held-out family whose traces are read to find out why it failed,
or whose result leads to a change, moves to ``MOVED_TO_TUNING`` with the reason, and the next
family of its group in the seeded order takes its place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from families import NAMED, TUNING, TUNING_EXTRA, print_draw, shuffled_groups

MATH_MODULES = {"arithmetic", "algorithmic", "algebra", "geometry", "probability", "code"}
PER_GROUP = 6
TIMEOUT_S = 60
MOVED_TO_TUNING: dict[str, str] = {
    "maze": "program's @train programs were read on 2026-12-07 after its held-out rows (program +0.00): the "
            "1.5B retyped the grid into string literals that broke; the task's text given to the program as a "
            "variable was tried on 6 @train examples (0 right, against 0 of 8 before: the 1.5B still retyped "
            "the grid, then printed a guess) and not kept",
    "binary_alternation": "program's @train programs were read on 2026-12-07 after its held-out rows (program "
                          "+0.05): a wrong rule (odd length means impossible), printed as computed",
    "color_cube_rotation": "program's @train programs were read on 2026-12-07 after its held-out rows (program "
                           "+0.00): each rotation written as one swap of two faces",
    "number_sequence": "para's @test traces were read on 2026-12-07 after its held-out row (para -0.20 +/- 0.09, "
                       "below direct minus 1 se): the orchestrator sent the bare list of terms to the calculator "
                       "or to python as a sum or a reprint with a guessed next term, and the synthesis answered "
                       "with what the tool printed",
}
HELD_OUT = [
    # math group, the first six of the seeded order that were not moved to tuning
    "basic_arithmetic", "chain_sum", "fraction_simplification", "game_of_life_halting", "coin_flip",
    "number_format",
    # other group, the first six of the seeded order that were not moved to tuning
    "tsumego", "figlet_font", "aiw", "family_relationships", "self_reference", "syllogism",
]
# judged from each family's question form before any run (module doc); not: tsumego (a Go position's
# capture, a search), figlet_font (reading a word drawn in ASCII art), aiw and family_relationships
# (the answer follows from reading relations stated in prose), number_sequence (the rule behind the
# terms must be guessed; judged on 2026-12-07, when it replaced color_cube_rotation; moved to tuning since),
# syllogism (judged on 2026-12-07, when it replaced number_sequence, before any run: the references are
# the generator's own rule, not classical validity, which a program would compute; its first generated
# example calls "all A are B, some B are C, so some A are C" valid)
PROGRAM_DECIDES = {
    "basic_arithmetic", "chain_sum", "fraction_simplification",  # an expression or a fraction in the prompt
    "game_of_life_halting",  # the grid is in the prompt: simulate the steps
    "coin_flip",  # a binomial sum
    # judged on 2026-12-07, when they replaced binary_alternation and maze, before any run of them
    "number_format",  # parse the candidates, take the largest or smallest
    "self_reference",  # try the 2**7 truth assignments against the seven statements
}
# judged so at the draw too, and moved to tuning since (MOVED_TO_TUNING): binary_alternation (a count
# over the given string), color_cube_rotation (track six faces through the stated turns), maze
# (breadth-first search over the drawn grid)
# the order the runs take them: the two groups alternately, each in its seeded order
RUN_ORDER = [name for pair in zip(HELD_OUT[:PER_GROUP], HELD_OUT[PER_GROUP:]) for name in pair]

_PROBE = r"""
import hashlib, json, statistics, sys
import reasoning_gym
from reasoning_gym.factory import DATASETS
name = sys.argv[1]
cls, _ = DATASETS[name]
ds = reasoning_gym.create_dataset(name, size=100, seed=35)
rows = [ds[i] for i in range(100)]
refs = [str(r["answer"]) for r in rows]
print(json.dumps({
    "module": cls.__module__.split(".")[1],
    "longest": max(len(a.strip()) for a in refs),
    "one_line": all("\n" not in a.strip() for a in refs),
    "median_question": statistics.median(len(r["question"]) for r in rows),
    "self_graded": min(float(ds.score_answer(a, r)) for a, r in zip(refs, rows)),
    "digest": hashlib.sha256(json.dumps([[r["question"], a] for r, a in zip(rows, refs)]).encode()).hexdigest(),
}))
"""


def _probe(name: str, hash_seed: str) -> dict[str, object] | None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, name], capture_output=True, text=True,
                              timeout=TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]  # some families print as they generate
    result: dict[str, object] | None = json.loads(lines[-1]) if lines else None
    return result


def candidates(names: list[str], progress: bool = False) -> dict[str, str]:
    """Every family of ``names`` the rule admits, with its group (``math`` or ``other``)."""
    tuned = {n.split("/")[-1] for n in [*TUNING, *TUNING_EXTRA]} | {n.split("/")[0] for n in TUNING} | set(NAMED)
    found: dict[str, str] = {}
    for i, name in enumerate(names):
        if progress:
            print(f"\r  checking {i + 1}/{len(names)} {name:<30}", end="", file=sys.stderr, flush=True)
        if name in tuned:
            continue
        first = _probe(name, "1")
        if first is None or not first["one_line"] or int(str(first["longest"])) > 20:
            continue
        if float(str(first["median_question"])) > 600 or float(str(first["self_graded"])) < 1.0:
            continue
        second = _probe(name, "2")
        if second is None or second["digest"] != first["digest"]:
            continue
        found[name] = "math" if first["module"] in MATH_MODULES else "other"
    if progress:
        print(file=sys.stderr)
    return found


def drawn(found: dict[str, str]) -> dict[str, list[str]]:
    """Each group's families in the seeded order the held-out list takes them from (names sorted
    first, so the order does not depend on how the package lists them)."""
    return shuffled_groups(dict(sorted(found.items())))


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from orchestrion.eval.datasets.rgym import family_names

    print_draw(drawn(candidates(family_names(), progress=True)), HELD_OUT, MOVED_TO_TUNING)


if __name__ == "__main__":
    main()
