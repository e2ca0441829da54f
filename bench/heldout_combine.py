"""The held-out checks over a held-out list whose rows come from several runs (several fragments).

A held-out list changes when a family moves to tuning (``MOVED_TO_TUNING``) and the next family of
its group takes its place; the replacement is run on its own, into a store of its own, and the
store of an earlier run may be gone. This reads the per-task verdicts (each strategy's paired
difference from ``direct`` on the 1.5B model, ± se) and ``direct``'s own accuracy per family from
the fragments that ``bench/local_pool.py --fragment`` wrote, keeps the families of the current
list, and prints the same held-out checks as ``local_pool.py`` (:func:`pool_report.heldout_checks`),
then the moved families apart, as tuning rows. The checks table sits in a marked block that
``docs/gen_pages.py`` copies into the README. A (family, strategy) pair found in several
fragments is taken from the last one named. Nothing runs; the differences are the fragments'
rounded figures (two or three decimals), so a mean may differ from a store's in the third.

    .venv/bin/python bench/heldout_combine.py docs/results/heldout-rgym.md \\
        docs/results/heldout-rgym-para.md docs/results/heldout-rgym-new.md \\
        docs/results/heldout-rgym-uno.md docs/results/heldout-rgym-paradigms.md \\
        docs/results/heldout-rgym-paradigms-syllogism.md --fragment docs/results/heldout-rgym-combined.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _fragment import tee_fragment  # noqa: E402
from pool_report import STRONGEST, heldout_checks  # noqa: E402

DIRECT = f"direct on {STRONGEST}"
BLOCK = ("<!-- results:heldout-rgym-combined:start -->", "<!-- results:heldout-rgym-combined:end -->")
_SECTION = re.compile(r"^\*\*(?P<task>\S+)@test, ")
_DIRECT_ROW = re.compile(rf"^\| {re.escape(DIRECT)} \| (?P<acc>\d\.\d+) ± (?P<se>\d\.\d+) \|")
_VERDICT = re.compile(r"^\| (?P<task>[^|]+?) \| (?P<label>[^|]+?) \| "
                      r"[^|]*\((?P<diff>[+-]\d\.\d+) ± (?P<se>\d\.\d+)\) \|$")

Rows = dict[str, dict[str, tuple[float, float, str]]]  # label -> task -> (value, se, fragment)


def read(path: Path, into: Rows) -> None:
    """Add one fragment's direct accuracies and per-task verdicts to ``into`` (later files win)."""
    task, in_verdicts = "", False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("**Per-task verdicts"):
            in_verdicts = True
        elif line.startswith("**"):
            in_verdicts = False
            found = _SECTION.match(line)
            task = found["task"] if found else ""
        elif in_verdicts and (v := _VERDICT.match(line)):
            into.setdefault(v["label"], {})[v["task"]] = (float(v["diff"]), float(v["se"]), path.name)
        elif task and (d := _DIRECT_ROW.match(line)):
            into.setdefault(DIRECT, {})[task] = (float(d["acc"]), float(d["se"]), path.name)


def family(task: str) -> str:
    return task.split(":", 1)[-1]


def print_rows(rows: Rows, families: list[str], title: str) -> None:
    print(f"\n**{title}** (direct: its accuracy; other rows: the paired difference from it; from: the fragment)\n")
    print("| family | row | value ± se | from |\n|---|---|---|---|")
    for name in families:
        for label in sorted(rows, key=lambda lb: (lb != DIRECT, lb)):
            for task, (value, se, source) in rows[label].items():
                if family(task) == name:
                    shown = f"{value:.3f}" if label == DIRECT else f"{value:+.3f}"  # an accuracy, or a difference
                    print(f"| {name} | {label} | {shown} ± {se:.3f} | {source} |")


def main() -> None:
    import families_rgym

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fragments", nargs="+", type=Path, help="local_pool.py fragments, later ones win")
    parser.add_argument("--fragment", type=Path, default=None, help="also write the tables to this markdown file")
    args = parser.parse_args()
    missing = [str(p) for p in args.fragments if not p.is_file()]
    if missing:
        parser.error(f"no such fragment: {', '.join(missing)}")
    rows: Rows = {}
    for path in args.fragments:
        read(path, rows)
    held = list(families_rgym.HELD_OUT)
    moved = list(families_rgym.MOVED_TO_TUNING)
    with tee_fragment(args.fragment):
        print(f"Held-out list: `bench/families_rgym.py` `HELD_OUT` ({len(held)} families); moved to tuning: "
              f"{', '.join(moved) or 'none'}. Fragments read, later ones winning: "
              f"{', '.join(p.name for p in args.fragments)}.")
        missing_rows = [n for n in held if not any(family(t) == n for t in rows.get(DIRECT, {}))]
        if missing_rows:
            print(f"\nNo row yet for: {', '.join(missing_rows)}.")
        print_rows(rows, held, "Held-out families")
        kept = {label: {t: (v, se) for t, (v, se, _) in per.items() if family(t) in held}
                for label, per in rows.items()}
        print(f"\n{BLOCK[0]}")  # the README shows this block (docs/gen_pages.py copies it)
        heldout_checks({label: per for label, per in kept.items() if per}, families_rgym.PROGRAM_DECIDES)
        print(f"\n{BLOCK[1]}")
        print_rows(rows, moved, "Moved to tuning (reported apart; no held-out claim rests on them)")


if __name__ == "__main__":
    main()
