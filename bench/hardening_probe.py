"""Issue 36's probes, run again by hand: each row's command as a user types it, and what it does now.

Rows that need a misbehaving backend, a full disk or a signal at the right moment (1-6, 18, 19,
21, 23) run their test in tests/ instead, which does exactly that; the table says which. Prints a
markdown table: row, command, exit code and the line the user sees.

    python bench/hardening_probe.py            # about a minute on 2 cores
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = {
    "1-6": "tests/faults/test_serve_hardening.py",
    "18": "tests/faults/test_model_faults.py",
    "19": "tests/faults/test_cli_hardening.py -k 'sigterm or killed'",
    "21": "tests/bench/test_local_pool_stop.py",
    "23": "tests/eval/test_resume.py -k ctrl_c",
}


def orchestrion(args: list[str], db: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ORCHESTRION_DB": str(db), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "orchestrion", *args], capture_output=True, timeout=120, env=env)


def last_line(res: subprocess.CompletedProcess[bytes]) -> str:
    text = (res.stderr or res.stdout).decode("utf-8", "replace").strip().splitlines()
    shown = text[-1] if text else "(nothing)"
    tb = " [TRACEBACK]" if b"Traceback" in res.stderr else ""
    return f"{shown[:160]}{tb}"


def probes(tmp: Path) -> list[tuple[str, list[str]]]:
    fifo, full, null = tmp / "pipe", tmp / "full", tmp / "null"
    os.mkfifo(fifo)
    # the kernel's full and null devices, made here (as root) so that nothing can replace /dev's own
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    other = tmp / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    existing = tmp / "existing.txt"
    existing.write_text("mine")
    bad = os.fsdecode(b"\xff")
    run = ["run", "hi", "--strategy", "direct", "--pool", "tiny"]
    return [
        ("7", ["trace", "export", "--out", str(full)]),
        ("7", ["trace", "export", "--out", str(fifo)]),
        ("8", [*run, "--db", str(null)]),
        ("9", [*run, "--db", str(other)]),
        ("10", [*run, "--budget", "tokens=99999999999999999999999"]),
        ("10", [*run, "--budget", "steps=99999999999999999999999"]),
        ("11", ["trace", "show", bad]),
        ("11", ["trace", "export", bad]),
        ("11", ["report", bad]),
        ("11", ["eval", "--resume", bad]),
        ("11", ["train", "export", "--run", bad, "--out", str(tmp / "o")]),
        ("12", ["train", "export", "--run", "x", "--out", str(existing)]),
        ("13", ["run", "hi", "--strategy", "para", "--pool", "tiny", "--set", "max_calls=99"]),
        ("14", ["run", "hi", "--strategy", "auto", "--pool", "tiny", "--set", "history_split=bogus"]),
        ("15", ["run", "hi", "--strategy", "proactive", "--pool", "tiny", "--set", "max_active=0"]),
        ("15", ["run", "hi", "--strategy", "proactive", "--pool", "tiny", "--set", "stall_steps=-1"]),
        ("15", ["run", "hi", "--strategy", "proactive", "--pool", "tiny", "--set", "worker_model=bogus"]),
        ("16", ["eval", "--dataset", "bigbench:navigate", "--pool", "tiny", "--strategies", "direct,direct"]),
        ("16", ["eval", "--dataset", "bigbench:navigate", "--pool", "tiny", "--strategies", ""]),
        ("16", ["eval", "--dataset", "bigbench:navigate", "--pool", "tiny", "--strategies", "para",
                "--set", "max_rounds=true"]),
        ("17", ["run", "hi", "--strategy", "auto", "--pool", "tiny", "--set", 'arms=["bogus"]']),
        ("17", ["run", "hi", "--strategy", "auto", "--pool", "tiny", "--set", 'arms=["direct:nope"]']),
        ("17", ["run", "hi", "--strategy", "auto", "--pool", "tiny", "--set",
                'arm_options={"para": {"max_rounds": -1}}']),
        ("20", ["run", "hi", "--strategy", "direct", "--pool", "tiny"]),  # with ORCHESTRION_PREFIX_CACHE_MB=abc
    ]


def main() -> None:
    print("| row | command | exit | what the user sees |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        db = tmp / "t.db"
        orchestrion(["run", "What is 2+2?", "--strategy", "direct", "--pool", "tiny"], db)  # one episode to export
        for row, args in probes(tmp):
            if row == "20":
                os.environ["ORCHESTRION_PREFIX_CACHE_MB"] = "abc"
            res = orchestrion(args, db)
            os.environ.pop("ORCHESTRION_PREFIX_CACHE_MB", None)
            shown = " ".join(a.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                             for a in args).replace(str(tmp), "$TMP")
            prefix = "ORCHESTRION_PREFIX_CACHE_MB=abc " if row == "20" else ""
            line = last_line(res).replace(str(tmp), "$TMP").replace("|", "\\|")
            print(f"| {row} | `{prefix}orchestrion {shown}` | {res.returncode} | {line} |")
        kept = "a character device" if (tmp / "full").is_char_device() else "REPLACED"
        print(f"| 7 | $TMP/full afterwards | - | {kept} |")
        print(f"| 8 | $TMP/null-journal afterwards | - | {'exists' if (tmp / 'null-journal').exists() else 'absent'} |")
        tables = [r[0] for r in sqlite3.connect(tmp / "other.sqlite").execute("SELECT name FROM sqlite_master")]
        print(f"| 9 | tables of other.sqlite afterwards | - | {', '.join(tables)} |")
    grep = subprocess.run(
        "grep -rnE '\"(SELECT|INSERT|UPDATE|DELETE|CREATE) ' src/orchestrion --include=*.py | grep -v /trace/",
        shell=True, capture_output=True, text=True, cwd=ROOT)
    print(f"| 22 | raw SQL outside trace/ | {grep.returncode} | {grep.stdout.strip() or 'nothing found'} |")
    for row, spec in TESTS.items():
        res = subprocess.run(f"{sys.executable} -m pytest -q -p no:cacheprovider {spec}", shell=True,
                             capture_output=True, text=True, cwd=ROOT)
        summary = [line for line in res.stdout.splitlines() if " passed" in line or " failed" in line]
        print(f"| {row} | `pytest {spec}` | {res.returncode} | {summary[-1] if summary else res.stdout[-200:]} |")


if __name__ == "__main__":
    main()
