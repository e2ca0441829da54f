"""Results fragments: what a bench printed on stdout, as a markdown file that says how it was made.

A bench that feeds a results page takes ``--fragment PATH`` and wraps its work in
``with tee_fragment(args.fragment): ...``. Everything it prints on stdout (its markdown tables)
still goes to the terminal, and, when the work ends without an error, is also written to PATH
under a header naming the command line (as typed from the repository root), the git commit
(with "+ uncommitted changes" when ``src/`` or ``bench/`` differ from it), the date (UTC) and the
machine (CPUs, CPU model, memory). A run that fails, is interrupted or prints nothing leaves PATH as
it was.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    try:
        res = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return res.stdout.strip() if res.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def commit() -> str:
    """``abc1234``, ``abc1234 + uncommitted changes`` (under src/ or bench/), or ``unknown``."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", "src", "bench")
    return f"{head} + uncommitted changes" if dirty else head


def command(argv: Sequence[str] | None = None) -> str:
    """The command line as a user would type it from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    cwd, python = Path.cwd().resolve(), Path(sys.executable)
    if cwd != ROOT:  # paths in the arguments are relative to where it ran: say where
        return f"cd {shlex.quote(str(cwd))} && {shlex.join([str(python), *argv])}"
    exe = str(python.relative_to(ROOT)) if python.is_relative_to(ROOT) else "python"
    script = Path(argv[0]).resolve()
    return shlex.join([exe, str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else argv[0], *argv[1:]])


def machine() -> str:
    """``2 CPUs (AMD EPYC ...), 7.8 GiB RAM``, with whatever /proc tells."""
    model, mem = "", ""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
        kib = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                   if ln.startswith("MemTotal:"))
        mem = f", {kib / 2**20:.1f} GiB RAM"
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    return f"{os.cpu_count() or '?'} CPUs" + (f" ({model})" if model else "") + mem


def header(argv: Sequence[str] | None = None) -> str:
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    script = Path((sys.argv if argv is None else argv)[0]).name
    return (f"<!-- written by bench/{script} --fragment; rerun the command to refresh it, do not edit by hand -->\n\n"
            f"- command: `{command(argv)}`\n- commit: `{commit()}`\n- date: {date}\n- machine: {machine()}\n")


def write_fragment(path: Path, body: str, argv: Sequence[str] | None = None) -> None:
    """Write ``body`` under the header to ``path`` in one step (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(header(argv) + "\n" + body.strip("\n") + "\n", encoding="utf-8")
    os.replace(tmp, path)


class _Tee:
    """stdout, with a copy of what is written; anything else (isatty, encoding, fileno) is stdout's."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.seen = out, io.StringIO()

    def write(self, text: str) -> int:
        self.seen.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.out, name)


@contextmanager
def tee_fragment(path: Path | None) -> Iterator[None]:
    """Copy stdout into the fragment at ``path`` (nothing when ``path`` is None); written on success only."""
    if path is None:
        yield
        return
    tee, real = _Tee(sys.stdout), sys.stdout
    sys.stdout = tee
    try:
        yield
    finally:
        sys.stdout = real
    body = tee.seen.getvalue()
    if not body.strip():  # e.g. --history-only: no tables, and a page of tables is not replaced by none
        print(f"(nothing was printed: {path} left as it was)", file=sys.stderr)
        return
    write_fragment(path, body)
    print(f"(fragment written to {path})", file=sys.stderr)
