"""The task families of the results tables: a tuning list and a held-out list, and the rule that
picked the held-out one (fixed before any of them was run).

**Tuning families** are the ones prompts, defaults and guards may be changed for: the eight tasks
of ``bench/local_pool.py`` that every earlier prompt was written against, and the two families
that issue reports quoted while describing the coder's failures (few-shot 3-digit sums and the
True/False step-following task), since those were looked at.

**Held-out families** are run only after a change, and reported as they come out. The rule, applied
by :func:`candidates` to BIG-bench's own task files (``python bench/families.py`` prints it):

1. every ``task.json`` with examples (a task with subtasks contributes its first subtask, by name,
   that passes the other rules), whose top-level task is not a tuning family, is not named by the
   project (``NAMED_TASKS``), and whose keywords name no other language (non-English,
   multilingual, translation, low-resource language, non-language);
2. at least 60 examples (20 ``@test`` and 20 ``@train`` fit the 70/30 split by id);
3. graded by exact match with targets of at most 20 characters, or multiple choice with 2 to 5
   options;
4. median input at most 600 characters (the 1.5B model reads about 66 tokens a second here);
5. of those, the ones whose keywords include arithmetic, algorithms, mathematics, algebra or
   computer code form the *math* group, the rest the *other* group; six of each are drawn by a
   shuffle seeded with 35 (the issue that asked for this list).

Whether a short program computes a family's answer from its prompt (the ``PROGRAM_DECIDES`` set)
was judged from each family's task description, before any run: the prompt holds all the data
and the answer follows from it by a fixed procedure (arithmetic, a conversion, a parse, a check).

When a held-out family's traces are read to find out why it failed, or its result leads to a change,
that family moves to ``MOVED_TO_TUNING`` with the reason, and the next family of the same group in
the seeded order (:func:`drawn`, which is computed as at the draw) takes its place.

BIG-bench's task files left PyPI on 2026-12-07; ``bench/families_rgym.py`` holds a second held-out
list, drawn by the same kind of rule from reasoning-gym's generated families, which any machine can
reproduce offline. The tuning families above are the tuning families of both.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

TUNING = [
    "arithmetic/3_digit_multiplication", "arithmetic/2_digit_division",
    "object_counting", "word_sorting", "date_understanding", "logical_deduction",
    "penguins_in_a_table", "temporal_sequences",
]
# families looked at while developing, with why
TUNING_EXTRA = {
    "modified_arithmetic/three_digit_addition_control": "quoted in the coder's failure report (few-shot sums)",
    "navigate": "quoted in the coder's failure report (True/False step-following)",
}
# code datasets (not BIG-bench) that prompts or guards were written against, with why: a claim made on
# them is a tuning-family claim (HumanEval is the only code dataset the offline rule lets in)
CODE_TUNING = {
    "humaneval": "all 164 docstrings and the 1.5B's and 0.5B's stored direct answers were read to write the "
                 "code-task path's example reader (src/orchestrion/runtime/code_examples.py) on 2026-12-07",
}
# held-out families whose traces were read after their held-out run (to find out why an arm failed):
# tuning families from then on, with why; the draw above is unchanged, and the next family of the
# same group in its seeded order takes each one's place in HELD_OUT
MOVED_TO_TUNING = {
    "chinese_remainder_theorem": "its coder programs were read after the 20-example held-out run of "
                                 "2026-12-04 (program 0.05, direct 0.00), to see why a search loop was not written",
    "cs_algorithms/valid_parentheses": "its program library's worked programs were read after the 20-example "
                                       "held-out run of 2026-12-04 with 20 @train examples per arm (program 0.30 "
                                       "with the library, 0.70 without it, direct 0.70), which led to the library's "
                                       "shape rule (src/orchestrion/trace/_library.py)",
}
HELD_OUT = [
    # math group, the first six of the seeded order that were not moved to tuning
    "mathematical_induction", "matrixshapes", "physics",
    "simp_turing_concept/additional_set_1", "vitaminc_fact_verification", "evaluating_information_essentiality",
    # other group, the first six of the seeded order
    "metaphor_understanding/lit2met", "strategyqa", "word_unscrambling", "phrase_relatedness",
    "formal_fallacies_syllogisms_negation", "logical_fallacy_detection",
]
PROGRAM_DECIDES = {
    "matrixshapes",  # the shapes and operations are in the prompt: track the shape through each
}
MATH_KEYWORDS = {"arithmetic", "algorithms", "mathematics", "algebra", "computer code"}
OTHER_LANGUAGE = ("non-english", "multilingual", "translation", "low-resource", "non-language")
NAMED = ("arithmetic", "date_understanding", "logical_deduction", "tracking_shuffled_objects", "word_sorting",
         "object_counting", "navigate", "elementary_math_qa", "penguins_in_a_table", "temporal_sequences")
SEED = 35
PER_GROUP = 6


def _passes(data: dict[str, object]) -> bool:
    examples = data.get("examples")
    if not isinstance(examples, list) or len(examples) < 60:
        return False
    listed = data.get("keywords")
    keywords = " ".join(str(k).lower() for k in listed) if isinstance(listed, list) else ""
    if any(word in keywords for word in OTHER_LANGUAGE):
        return False
    if statistics.median(len(str(e.get("input", ""))) for e in examples) > 600:
        return False
    scores = [e.get("target_scores") for e in examples]
    if all(isinstance(s, dict) and s for s in scores):
        return all(isinstance(s, dict) and 2 <= len(s) <= 5 for s in scores)
    targets = [e.get("target") for e in examples]
    if any(t is None for t in targets):
        return False
    return all(len(str(t[0] if isinstance(t, list) and t else t)) <= 20 for t in targets)


def candidates(root: Path) -> dict[str, str]:
    """Every family the rule admits, with its group (``math`` or ``other``), by name."""
    tuned = {name.split("/")[0] for name in [*TUNING, *TUNING_EXTRA]} | set(NAMED)
    found: dict[str, str] = {}
    for file in sorted(root.glob("**/task.json")):
        name = str(file.parent.relative_to(root))
        top = name.split("/")[0]
        if top in tuned or any(f.split("/")[0] == top for f in found):
            continue
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and _passes(data):
            keywords = {str(k).lower() for k in data.get("keywords", []) or []}
            found[name] = "math" if keywords & MATH_KEYWORDS else "other"
    return found


def drawn(root: Path) -> dict[str, list[str]]:
    """Each group's families in the seeded order the held-out list takes them from."""
    return shuffled_groups(candidates(root))


def shuffled_groups(found: dict[str, str]) -> dict[str, list[str]]:
    """The families of ``found`` (name: group) by group, in ``found``'s order, each group shuffled
    with :data:`SEED`."""
    groups: dict[str, list[str]] = {"math": [], "other": []}
    for name, kind in found.items():
        groups[kind].append(name)
    for names in groups.values():
        random.Random(SEED).shuffle(names)
    return groups


def print_draw(groups: dict[str, list[str]], held_out: list[str], moved: dict[str, str]) -> None:
    """The seeded order of each group, marked, and whether ``held_out`` is the rule's pick."""
    for group, names in groups.items():
        print(f"{group} group, seeded order ({len(names)}):")
        for i, name in enumerate(names):
            mark = ("held-out" if name in held_out else f"moved to tuning: {moved[name]}" if name in moved else "")
            print(f"  {i + 1:2d}. {name} {mark}")
    picked = [n for names in groups.values() for n in [m for m in names if m not in moved][:PER_GROUP]]
    print("the rule's pick matches the held-out list" if set(picked) == set(held_out) else
          f"the held-out list differs from the rule's pick: {sorted(set(picked) ^ set(held_out))}")


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from orchestrion.eval.datasets._fetch import require_tasks_dir

    print_draw(drawn(require_tasks_dir()), HELD_OUT, MOVED_TO_TUNING)


if __name__ == "__main__":
    main()
