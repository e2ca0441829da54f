"""Every code block in README.md, run: the examples must work as written.

- ``python`` blocks are executed in a fresh interpreter, in an empty working directory. The
  default pool (ORCHESTRION_POOL) is the loopback one described below, so an HTTP session left
  open shows ("Unclosed client session" fails the test); a pool named in the code, such as
  ``load_pool("tiny")``, is the real embedded model.
- ``bash`` blocks run in a folder laid out as a checkout (the repository's ``examples/`` is copied
  there, so ``--corpus examples/corpus/`` reads the notes the repository ships). Each
  ``orchestrion ...`` line runs as a real subprocess. So that a dozen
  ``run`` lines stay cheap, ORCHESTRION_POOL names a pool.yaml whose one model is a loopback
  OpenAI-compatible server (tests/fake_openai_server.py) that answers decisions with "done" and
  prose with "156". ``<trace_id ...>`` placeholders get the trace id of the first ``run --json``.
  A line that is not run (downloads, long jobs, servers that never exit, destructive commands)
  must match an entry of ``SKIP``, each with its reason; any other line fails the test.
- ``yaml`` blocks are pool files: they must load as a pool.
- ``text`` blocks are shown output or layouts, not code; a block with no language fails the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrion import Pool

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai_server import FakeOpenAIServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ORCHESTRION = Path(sys.executable).parent / "orchestrion"
LANGUAGES = {"python", "bash", "yaml", "text"}

# Lines of bash blocks that are not run, by prefix, each with its reason.
SKIP: dict[str, str] = {
    "make ": "sets up the virtual environment (compiling llama.cpp, pulling models) or runs the whole suite",
    "orchestrion run \"Prove that 91 is not prime.\" --pool pool.yaml": "needs the servers pool.yaml names",
    "orchestrion serve": "a server that runs until stopped; tests/serve/test_server.py drives it",
    "python -c \"import openai": "a client of the server above",
    "orchestrion view                      ": "a server that runs until Ctrl-C; `view --export` runs here",
    "orchestrion auto learn --dataset reasoning-gym:fraction_simplification@train": (
        "80 episodes on the local pool's three models (minutes); tests/eval/test_learn.py runs the command"),
    "orchestrion eval --dataset reasoning-gym:fraction_simplification@test": (
        "20 auto episodes on the local pool, reading the history above; tests/test_cli.py runs eval"),
}
# Python blocks that are not run, by their first line, each with its reason.
SKIP_PYTHON: dict[str, str] = {}
DECISION_DONE = json.dumps({"thought": "done", "calls": [], "final": True})


@dataclass
class Block:
    lang: str
    code: str
    line: int


def readme_blocks() -> list[Block]:
    blocks: list[Block] = []
    lang, start, body = None, 0, []
    for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), n, []
            else:
                blocks.append(Block(lang, "\n".join(body) + "\n", start))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"README.md: the code block opened at line {start} is never closed"
    return blocks


def _skipped(line: str) -> str | None:
    return next((reason for prefix, reason in SKIP.items() if line.startswith(prefix)), None)


def bash_commands(code: str) -> list[tuple[int, str]]:
    """A bash block's commands with their line offsets: a line ending in a backslash goes on on the next."""
    commands: list[tuple[int, str]] = []
    start, parts = 0, list[str]()
    for offset, raw in enumerate(code.splitlines()):
        if not parts:
            start = offset
        parts.append(raw.strip().removesuffix("\\").strip())
        if not raw.rstrip().endswith("\\"):
            commands.append((start, " ".join(p for p in parts if p)))
            parts = []
    if parts:
        commands.append((start, " ".join(p for p in parts if p)))
    return commands


def test_every_block_has_a_known_language() -> None:
    unknown = [(b.line, b.lang) for b in readme_blocks() if b.lang not in LANGUAGES]
    assert not unknown, f"README.md blocks with no or an unknown language (use one of {sorted(LANGUAGES)}): {unknown}"


def test_every_skip_entry_still_matches_a_line() -> None:
    lines = [ln for b in readme_blocks() if b.lang == "bash" for _, ln in bash_commands(b.code)]
    firsts = [b.code.splitlines()[0] for b in readme_blocks() if b.lang == "python"]
    stale = [p for p in SKIP if not any(ln.startswith(p) for ln in lines)]
    stale += [p for p in SKIP_PYTHON if p not in firsts]
    assert not stale, f"SKIP entries that match no README line any more (remove them): {stale}"


def test_yaml_blocks_load_as_pools(tmp_path: Path) -> None:
    yamls = [b for b in readme_blocks() if b.lang == "yaml"]
    assert yamls
    for b in yamls:
        path = tmp_path / "pool.yaml"
        path.write_text(b.code, encoding="utf-8")
        pool = Pool.from_yaml(path)
        assert pool.describe(), f"README.md line {b.line}: the pool has no models"


@pytest.mark.integration
def test_python_blocks_run_as_written(tmp_path: Path, fake_pool: Path) -> None:
    ran = 0
    for b in readme_blocks():
        if b.lang != "python" or b.code.splitlines()[0] in SKIP_PYTHON:
            continue
        script = tmp_path / f"readme_{b.line}.py"
        script.write_text(b.code, encoding="utf-8")
        # the default pool is the loopback one (an HTTP session that must be closed); named pools stay real
        env = {**os.environ, "ORCHESTRION_POOL": str(fake_pool), "PYTHONWARNINGS": "error::ResourceWarning"}
        res = subprocess.run([sys.executable, "-X", "dev", str(script)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=240, env=env)
        assert res.returncode == 0, f"README.md line {b.line}:\n{res.stdout}\n{res.stderr}"
        assert "Traceback" not in res.stderr and "Unclosed" not in res.stderr, f"README.md line {b.line}:\n{res.stderr}"
        ran += 1
    assert ran >= 1


@pytest.fixture
def fake_pool(tmp_path: Path) -> Iterator[Path]:
    """A pool.yaml whose one model is a loopback server answering decisions with "done", prose with "156"."""
    def reply(body: dict[str, Any]) -> str:
        return DECISION_DONE if body.get("response_format") else "156"

    started = threading.Event()
    stop: list[Any] = []
    urls: list[str] = []

    async def serve() -> None:
        async with FakeOpenAIServer(replies=reply, keep_requests=False) as server:
            urls.append(server.base_url)
            done = asyncio.Event()
            stop.append((asyncio.get_running_loop(), done))
            started.set()
            await done.wait()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    assert started.wait(15), "the loopback server did not start"
    pool = tmp_path / "fake-pool.yaml"
    pool.write_text(f"models:\n  - name: fake\n    backend: openai-api\n    base_url: {urls[0]}\n"
                    "    description: loopback test server\n    price: {input_per_mtok: 1, output_per_mtok: 2}\n")
    try:
        yield pool
    finally:
        loop, done = stop[0]
        loop.call_soon_threadsafe(done.set)
        thread.join(10)


def test_bash_blocks_run_as_written(tmp_path: Path, fake_pool: Path) -> None:
    work = tmp_path / "work"  # laid out as a checkout: `tool retrieve ... --corpus examples/corpus/`
    work.mkdir()
    shutil.copytree(ROOT / "examples", work / "examples")
    yamls = [b for b in readme_blocks() if b.lang == "yaml"]
    (work / "pool.yaml").write_text(yamls[0].code, encoding="utf-8")  # `pool --pool pool.yaml`
    env = {**os.environ, "ORCHESTRION_POOL": str(fake_pool), "ORCHESTRION_DB": str(tmp_path / "traces.db"),
           "COLUMNS": "200"}
    trace_id = ""
    ran, skipped = [], []
    for b in readme_blocks():
        if b.lang != "bash":
            continue
        for offset, line in bash_commands(b.code):
            where = f"README.md line {b.line + 1 + offset}: {line}"
            if (reason := _skipped(line)) is not None:
                skipped.append((line, reason))
                continue
            words = shlex.split(re.sub(r"<trace_id[^>]*>", trace_id or "<no trace id yet>", line), comments=True)
            if not words:
                continue
            assert words[0] == "orchestrion", f"{where}: not an orchestrion command; add it to SKIP with a reason"
            args = words[1:]
            assert not any(a.startswith("<") for a in args), f"{where}: a placeholder with no value"
            res = subprocess.run([str(ORCHESTRION), *args], cwd=work, capture_output=True, text=True, timeout=120,
                                 env=env)
            assert res.returncode == 0, f"{where}\nexit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
            assert "Traceback" not in res.stderr, f"{where}\n{res.stderr}"
            if args[:1] == ["run"] and "--json" in args and not trace_id:
                trace_id = json.loads(res.stdout)["trace_id"]
            ran.append(line)
    assert trace_id and len(ran) >= 15, ran
    assert (work / "traces.jsonl").is_file() and (work / "view-out" / "index.html").is_file()
    print(f"\nREADME: ran {len(ran)} commands, skipped {len(skipped)}:")
    for line, reason in skipped:
        print(f"  skipped {line!r}: {reason}")
