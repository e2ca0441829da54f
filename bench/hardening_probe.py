"""Issue 36's probes, run again by hand: each row's command as a user types it, and what it does now.

Every row runs the real command as a subprocess: ``orchestrion`` (row 21: bench/local_pool.py on the
local pool) against a loopback OpenAI-compatible backend in this process, whose answer the task
picks with ``probe:KIND`` (garbage, nochoices, whole, rate, brief, hang, slow, six; see ``_Handler``),
``serve`` and ``view`` on loopback ports, a file-size limit of 1 byte as the full disk, and signals
sent as a user sends them. Prints a markdown table sorted by row (command, exit code or HTTP
status, what the user sees: the last line written, the response, or the files afterwards), then
runs each row's tests in one pytest call and prints how many passed. Run it as root (rows 7 and 8
make device nodes in its temporary folder, never touching /dev).

    .venv/bin/python bench/hardening_probe.py              # about 2 minutes on 2 cores
    .venv/bin/python bench/hardening_probe.py --no-tests   # the table by hand only (about 1 minute)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SIX = {"thought": "six sums", "calls": [{"tool": "calculator", "input": f"{i}+{i}"} for i in range(6)], "final": False}
DONE = {"thought": "done", "calls": [], "final": True}

# each row's tests (tests/faults/ or beside the code), run at the end in one pytest call
F, C, T = "tests/faults/test_serve_hardening.py::test_", "tests/faults/test_cli_hardening.py::test_", "tests/"
TESTS = {row: ids.split() for row, ids in {
    "1": f"{F}a_200_without_an_answer_fails_the_call {F}a_json_completion_to_a_stream_request_is_read_whole "
         f"{F}serve_answers_502_when_the_backend_gave_no_answer "
         f"{F}serve_reads_a_json_reply_to_its_stream_request_as_the_answer",
    "2": f"{F}nested_unknown_fields_are_named_at_every_depth",
    "3": f"{F}an_option_naming_no_pool_model_is_a_400_before_any_episode "
         f"{T}strategies/test_options.py::test_an_option_naming_a_model_not_in_the_pool_is_refused_before_the_episode",
    "4": f"{F}ctrl_c_cancels_the_episodes_in_flight_and_tells_each_client",
    "5": f"{F}the_trace_writer_recovers_once_writes_succeed_again "
         f"{F}serve_says_its_store_fails_while_it_fails_and_recovers",
    "6": f"{F}serve_without_a_key_refuses_another_host_or_origin {F}serve_with_a_key_takes_any_host "
         f"{F}viewer_without_a_key_refuses_another_host_or_origin",
    "7": f"{C}output_that_is_a_special_file_is_refused",
    "8": f"{C}device_as_trace_database_is_refused_before_sqlite_opens_it",
    "9": f"{C}someone_elses_sqlite_file_is_left_as_it_was",
    "10": f"{T}test_cli.py::test_bad_budget_names_the_field_and_the_form",
    "11": f"{C}an_id_that_is_not_utf8_is_one_line",
    "12": f"{C}output_folder_that_is_a_file_is_refused "
          f"{T}train/test_export.py::test_export_files_are_owner_only_and_whole",
    "13": f"{T}strategies/test_para.py::test_max_calls_is_the_actions_limit_six_calls_run_in_one_round "
          f"{T}strategies/test_para.py::test_an_action_over_max_calls_is_invalid_and_repaired "
          f"{T}strategies/test_para.py::test_max_calls_out_of_range_is_refused_before_the_episode",
    "14": f"{T}strategies/test_auto.py::test_history_split_none_reads_every_scored_episode "
          f"{T}strategies/test_auto.py::test_an_unknown_history_split_is_refused",
    "15": f"{T}strategies/test_proactive.py::test_bad_options_are_refused_before_the_episode "
          f"{T}strategies/test_option_bounds.py",
    "16": f"{C}eval_refuses_duplicate_blank_and_boolean_values",
    "17": f"{T}strategies/test_auto.py::test_bad_arms_are_refused_before_the_episode",
    "18": f"{T}faults/test_model_faults.py::test_a_retry_after_beyond_the_timeout_fails_at_once_naming_it "
          f"{T}faults/test_model_faults.py::test_a_retry_that_waits_says_so_on_stderr",
    "19": f"{C}sigterm_cancels_the_episode_and_records_it {C}a_killed_run_is_marked_interrupted_by_the_next_command "
          f"{C}run_on_a_full_disk_is_one_line_and_the_next_command_marks_it",
    "20": f"{T}models/test_prefix_cache.py::test_the_store_makes_its_root_and_every_missing_parent_owner_only "
          f"{T}models/test_prefix_cache.py::test_the_default_root_under_the_cache_is_owner_only_and_tightened "
          f"{T}models/test_catalog.py::test_the_side_file_is_owner_only "
          f"{T}faults/test_model_faults.py::test_a_bad_prefix_cache_size_is_refused_before_any_episode",
    "21": f"{T}bench/test_local_pool_stop.py "
          f"{T}models/test_llama_cpp.py::test_closing_the_model_while_a_cancelled_call_decodes_does_not_crash",
    "22": f"{T}test_layering.py::test_only_the_trace_package_writes_sql "
          f"{T}test_layering.py::test_the_sql_rule_sees_sql",
    "23": f"{T}eval/test_resume.py::test_ctrl_c_marks_the_run_interrupted",
}.items()}


class Backend(ThreadingHTTPServer):
    """A loopback OpenAI-compatible backend; ``probe:KIND`` in a request's messages picks how it answers."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stop = threading.Event()
        self.seen: Counter[str] = Counter()
        threading.Thread(target=self.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: Backend

    def log_message(self, *args: Any) -> None:
        pass

    def send(self, status: int, kind: str, body: bytes, **headers: str) -> None:
        self.send_response(status)
        for key, value in {"Content-Type": kind, "Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        found = re.search(r"probe:(\w+)", json.dumps(body["messages"]))
        kind = found[1] if found else "ok"
        self.server.seen[kind] += 1
        if kind == "garbage":
            return self.send(200, "text/html", b"<html>hello</html>")
        if kind == "nochoices":
            return self.send(200, "application/json", b'{"id": "x", "object": "chat.completion", "choices": []}')
        if kind == "rate" or (kind == "brief" and self.server.seen[kind] == 1):
            wait = "3600" if kind == "rate" else "1"
            return self.send(429, "application/json", b'{"error": {"message": "slow down"}}', **{"Retry-After": wait})
        if kind in ("hang", "slow"):  # hang: until the probe ends; slow: 2 s, then an answer
            if self.server.stop.wait(2 if kind == "slow" else 300) or kind == "hang":
                return None
        text = f"Answer: {6 if kind == 'six' else 4}"  # a decision (para's action): six calls, then done
        text = json.dumps(SIX if kind == "six" and self.server.seen[kind] == 1 else DONE) if body.get(
            "response_format") else text
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        if body.get("stream") and kind != "whole":  # "whole": a JSON completion even to a stream request
            chunks: list[dict[str, Any]] = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, {"choices": [], "usage": usage}]
            sse = b"".join(b"data: " + json.dumps({"id": "c", "model": "m", **c}).encode() + b"\n\n" for c in chunks)
            return self.send(200, "text/event-stream", sse + b"data: [DONE]\n\n")
        answer = {"id": "c", "object": "chat.completion", "model": "m", "usage": usage,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        return self.send(200, "application/json", json.dumps(answer).encode())


class Probe:
    """The rows' commands, run in ``tmp`` against one trace database; rows are kept and printed sorted."""

    def __init__(self, tmp: Path, backend: Backend) -> None:
        self.tmp, self.backend, self.db, self.pool = tmp, backend, tmp / "t.db", tmp / "pool.yaml"
        self.pool.write_text(f"models:\n  - {{name: m1, base_url: '{backend.url}'}}\n")  # m1 is the backend
        self.rows: list[tuple[int, str]] = []

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "ORCHESTRION_DB": str(self.db), "COLUMNS": "200", **extra}

    def row(self, row: str, command: str, code: object, seen: str) -> None:
        cells = [c.replace(str(self.tmp), "$TMP").replace("|", "\\|") for c in (f"`{command}`", str(code), seen)]
        self.rows.append((int(row), f"| {row} | {' | '.join(cells)} |"))

    def cmd(self, args: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        env = kw.pop("env", None) or self.env()
        return subprocess.run([PY, "-m", "orchestrion", *args], capture_output=True, timeout=300, env=env, **kw)

    def ran(self, row: str, args: list[str], prefix: str = "", pick: str = "", **kw: Any) -> None:
        """``orchestrion ARGS`` as a row: its exit code and the last line it wrote (the last with ``pick`` in it)."""
        res = self.cmd(args, **kw)
        lines = [x for x in (res.stderr or res.stdout).decode("utf-8", "replace").splitlines() if pick in x]
        seen = (lines[-1].strip() if lines else "(nothing)")[:240] + (" [TRACEBACK]" * (b"Traceback" in res.stderr))
        shown = " ".join(a.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for a in args)
        self.row(row, f"{prefix}orchestrion {shown}", res.returncode, seen)

    def statuses(self, db: Path | None = None) -> list[str]:
        with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(db or self.db)) as conn:
            return [r[0] for r in conn.execute("SELECT status FROM episodes ORDER BY started")]
        return []

    def one(self, sql: str) -> Any:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return conn.execute(sql).fetchone()[0]

    @staticmethod
    def wait(ok: Callable[[], bool], limit_s: float = 60) -> bool:
        deadline = time.monotonic() + limit_s
        while not ok():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def start(self, args: list[str], **kw: Any) -> subprocess.Popen[str]:
        """A command left running; Ctrl-C reaches it as from a terminal (a background job has SIGINT ignored)."""
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env(),
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def said(res: httpx.Response) -> str:
    """What a response says: its error or answer (a stream: the text and the error events it sent)."""
    header = res.headers.get("x-orchestrion-status")
    status = f"x-orchestrion-status: {header}; " if header else ""
    if not res.headers.get("content-type", "").startswith("text/event-stream"):
        body = res.json()
        if body.get("error"):
            return f"{status}{body['error'].get('code')}: {body['error'].get('message')}"
        return f"{status}answer {body['choices'][0]['message']['content']!r}"
    events = [json.loads(line[6:]) for line in res.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices") or [])
    return f"{status}stream: text {text!r}, error events {[e['error']['code'] for e in events if 'error' in e]}"


def serve_rows(p: Probe) -> None:
    """Rows 1-6: `orchestrion serve` on the backend's pool (row 4 stops it), and `orchestrion view`."""
    proc = p.start([PY, "-m", "orchestrion", "serve", "--port", "0", "--pool", str(p.pool)])
    assert proc.stdout is not None
    url = proc.stdout.readline().split("listening on ")[1].split()[0]
    chat: dict[str, Any] = {"model": "orchestrion/direct", "messages": [{"role": "user", "content": "What is 2+2?"}]}

    def ask(task: str, **more: Any) -> dict[str, Any]:
        return {**chat, "messages": [{"role": "user", "content": task}], **more}

    def post(row: str, what: str, body: dict[str, Any], path: str = "/chat/completions", **headers: str) -> None:
        res = httpx.post(url + path, json=body, headers=headers, timeout=60)
        seen = said(res) if row != "2" else f"X-Orchestrion-Ignored-Fields: " \
            f"{res.headers.get('x-orchestrion-ignored-fields', '(none)')}"
        p.row(row, f"serve: POST {path} {what}", res.status_code, seen[:300])

    post("1", "direct, the backend answers 200 <html>", ask("probe:garbage 2+2?"))
    post("1", "direct, the backend answers 200 choices: []", ask("probe:nochoices 2+2?"))
    post("1", "stream: true, direct, the backend answers its stream request with a JSON completion",
         ask("probe:whole 2+2?", stream=True))
    nested: list[tuple[str, dict[str, Any], str]] = [
        ("stream_options.bogus", {**chat, "stream": True, "stream_options": {"bogus": 1}}, "/chat/completions"),
        ("response_format.bogus", {**chat, "response_format": {"type": "text", "bogus": 1}}, "/chat/completions"),
        ("messages[0].bogus", {**chat, "messages": [{**chat["messages"][0], "bogus": 1}]}, "/chat/completions"),
        ("responses text.bogus", {"model": "orchestrion/direct", "input": "hi", "text": {"bogus": 1}}, "/responses"),
        ("an input_text part's bogus", {"model": "orchestrion/direct", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "hi", "bogus": 1}]}]}, "/responses")]
    for what, body, path in nested:
        post("2", what, body, path)
    before = len(p.statuses())
    post("3", 'orchestrion.options.model: "bogus1"', {**chat, "orchestrion": {"options": {"model": "bogus1"}}})
    p.row("3", "episodes that request added", "-", str(len(p.statuses()) - before))
    post("6", "with Host: evil.example", chat, Host="evil.example")
    post("6", "with Origin: http://evil.example", chat, Origin="http://evil.example")
    view_rows(p)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]  # row 5: serve's files may not grow, as on a full disk
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, hard))
    post("5", "as the disk fills (its episode's writes fail)", chat)
    post("5", "while the disk is full", chat)
    health = httpx.get(url.removesuffix("/v1") + "/health", timeout=10)
    p.row("5", "serve: GET /health while the disk is full", health.status_code, str(health.json()))
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
    freed = time.monotonic()
    back = p.wait(lambda: httpx.get(url.removesuffix("/v1") + "/health", timeout=10).status_code == 200, 20)
    p.row("5", "serve: GET /health once space is back", 200 if back else "-",
          f"{'healthy' if back else 'still failing'} after {time.monotonic() - freed:.1f} s")
    post("5", "once space is back", chat)
    running = p.statuses().count("running")  # row 4: Ctrl-C with three requests in flight, one of them streamed
    with ThreadPoolExecutor(3) as calls:
        replies = [calls.submit(httpx.post, url + "/chat/completions", json=ask("probe:hang 2+2?", stream=i == 2),
                                timeout=60) for i in range(3)]
        p.wait(lambda: p.statuses().count("running") >= running + 3, 30)
        proc.send_signal(signal.SIGINT)
        _, log = proc.communicate(timeout=60)
        seen = [f"{r.result().status_code} {said(r.result())}" for r in replies]
    lines = [line for line in log.splitlines() if "cancelled" in line]
    p.row("4", "serve, 3 requests in flight (one streamed), then Ctrl-C", proc.returncode,
          f"clients: {' / '.join(seen)}; log: {len(lines)} 'cancelled' lines, {log.count('Traceback')} tracebacks; "
          f"episodes: {dict(Counter(p.statuses()[-3:]))}")


def view_rows(p: Probe) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = p.start([PY, "-m", "orchestrion", "view", "--port", str(port)])
    url = f"http://127.0.0.1:{port}/api/episodes/{p.one('SELECT id FROM episodes')}/annotation"
    try:
        p.wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 30)
        for header, value in (("Host", "evil.example"), ("Origin", "http://evil.example"), ("Host", "127.0.0.1")):
            label = "mine" if value == "127.0.0.1" else "evil"
            res = httpx.post(url, json={"label": label, "note": ""}, headers={header: value}, timeout=10)
            p.row("6", f"view: POST /api/episodes/ID/annotation label={label}, {header}: {value}", res.status_code,
                  res.text[:160])
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    labels = p.one("SELECT json_group_array(json_extract(meta, '$.annotation.label')) FROM episodes "
                   "WHERE json_extract(meta, '$.annotation') IS NOT NULL")
    p.row("6", "annotation labels in the trace database afterwards", "-", labels)


def modes(paths: list[Path], base: Path) -> str:
    return ", ".join(f"{p.relative_to(base)} {stat.S_IMODE(p.stat().st_mode):04o}" for p in paths)


def cli_rows(p: Probe) -> None:
    """Rows 7-20 and 22: `orchestrion` commands, mostly on the backend's pool."""
    tmp, pool = p.tmp, str(p.pool)
    fifo, full, null, other, existing = tmp / "pipe", tmp / "full", tmp / "null", tmp / "other.sqlite", tmp / "x.txt"
    os.mkfifo(fifo)
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # the kernel's full and null devices, made here (root)
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # so that nothing can replace /dev's own
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    existing.write_text("mine")
    bad, run = os.fsdecode(b"\xff"), ["run", "What is 2+2?", "--pool", pool, "--strategy"]
    p.ran("7", ["trace", "export", "--out", str(full)])
    p.ran("7", ["trace", "export", "--out", str(fifo)])
    kept = ["a character device" if full.is_char_device() else "REPLACED",
            "a FIFO" if stat.S_ISFIFO(fifo.stat().st_mode) else "REPLACED"]
    p.row("7", "$TMP/full and $TMP/pipe afterwards", "-", ", ".join(kept))
    p.ran("8", [*run, "direct", "--db", str(null)])
    p.row("8", "$TMP/null-journal afterwards", "-", "exists" if (tmp / "null-journal").exists() else "absent")
    p.ran("9", [*run, "direct", "--db", str(other)])
    with contextlib.closing(sqlite3.connect(other)) as conn:
        tables = ", ".join(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))
    p.row("9", "tables of other.sqlite afterwards", "-", tables)
    for budget in ("tokens", "steps"):
        p.ran("10", [*run, "direct", "--budget", f"{budget}=99999999999999999999999"])
    for args in (["trace", "show", bad], ["trace", "export", bad], ["report", bad], ["eval", "--resume", bad],
                 ["train", "export", "--run", bad, "--out", str(tmp / "o")]):
        p.ran("11", args)
    data = tmp / "d.jsonl"
    data.write_text("".join(json.dumps({"id": i, "prompt": f"What is {i}+1?", "answer": "4"}) + "\n" for i in "ab"))
    p.ran("12", ["eval", "--dataset", f"jsonl:{data}", "--pool", pool, "--strategies", "para"])
    para_run = p.one("SELECT id FROM runs WHERE kind = 'eval' ORDER BY created DESC")
    p.ran("12", ["train", "export", "--run", para_run, "--out", str(existing)])
    p.ran("12", ["train", "export", "--run", para_run, "--out", str(tmp / "export")])
    p.row("12", "modes of the export", "-", modes([tmp / "export", *sorted((tmp / "export").iterdir())], tmp))
    args = ["run", "probe:six Add 0+0 ... 5+5", "--pool", pool, "--strategy", "para", "--set", "max_calls=6", "--json"]
    res = p.cmd(args)
    meta = json.loads(res.stdout)["meta"] if res.returncode == 0 else res.stderr.decode()[-200:]
    tools = p.one("SELECT json_group_array(name) FROM spans WHERE kind = 'tool' AND episode_id = "
                  "(SELECT id FROM episodes ORDER BY started DESC LIMIT 1)")
    p.row("13", f"orchestrion {' '.join(args)}", res.returncode, f"meta: {meta}; tool spans: {tools}")
    p.ran("13", [*run, "para", "--set", "max_calls=65"])
    p.ran("14", ["eval", "--dataset", f"jsonl:{data}", "--pool", pool, "--strategies", "direct"])
    for split in ("none", "train"):
        args = [*run, "auto", "--set", 'arms=["direct:m1"]', "--set", f"history_split={split}", "--json"]
        res = p.cmd(args)
        why = json.loads(res.stdout)["meta"]["auto"]["reason"] if res.returncode == 0 else res.stderr.decode()[-200:]
        p.row("14", f"orchestrion {' '.join(args)}", res.returncode, f"meta.auto.reason: {why}")
    p.ran("14", [*run, "auto", "--set", "history_split=bogus"])
    for option in ("max_active=0", "max_invalid=0", "stall_steps=-1", "decision_tokens=0", "worker_model=bogus"):
        p.ran("15", [*run, "proactive", "--set", option])
    clamps = r"grep -rnE '\b(max|min)\([^)]*\bopt(ion)?s\.' src/orchestrion/strategies --include=*.py"
    found = subprocess.run(clamps, shell=True, capture_output=True, text=True, cwd=ROOT)
    p.row("15", clamps, found.returncode, found.stdout.strip() or "nothing found")
    for more in (["direct,direct"], [""], ["para", "--set", "max_rounds=true"]):
        p.ran("16", ["eval", "--dataset", f"jsonl:{data}", "--pool", pool, "--strategies", *more])
    for option in ('arms=["bogus"]', 'arms=["direct:nope"]', 'arm_options={"para": {"max_rounds": -1}}'):
        p.ran("17", [*run, "auto", "--set", option])
    started = time.monotonic()
    p.ran("18", ["run", "probe:rate 2+2?", "--pool", pool, "--strategy", "direct"])
    p.row("18", "how long that took", "-", f"{time.monotonic() - started:.1f} s (Retry-After: 3600, default retries)")
    p.ran("18", ["run", "probe:brief 2+2?", "--pool", pool, "--strategy", "direct"], pick="etry")
    cache = tmp / "cache" / "new"  # row 20: the cache, its parents, and what a run writes there
    p.ran("20", ["run", "What is 2+2?", "--pool", "tiny", "--strategy", "para", "--set", "max_rounds=1"],
          "ORCHESTRION_CACHE=$TMP/cache/new ", env=p.env(ORCHESTRION_CACHE=str(cache)))
    made = [tmp / "cache", cache, *sorted(x for x in cache.rglob("*") if x.is_dir() or x.suffix in (".verified",
                                                                                                     ".kvs"))]
    p.row("20", "modes under $TMP/cache afterwards", "-", modes(made, tmp))
    p.ran("20", ["run", "hi", "--pool", "tiny", "--strategy", "direct"], "ORCHESTRION_PREFIX_CACHE_MB=abc ",
          env=p.env(ORCHESTRION_PREFIX_CACHE_MB="abc"))
    sql = "grep -rnE '\"(SELECT|INSERT|UPDATE|DELETE|CREATE) ' src/orchestrion --include=*.py | grep -v /trace/"
    found = subprocess.run(sql, shell=True, capture_output=True, text=True, cwd=ROOT)
    p.row("22", sql, found.returncode, found.stdout.strip() or "nothing found")


def signal_rows(p: Probe) -> None:
    """Rows 19, 23 and 21: `run` stopped by SIGTERM, kill -9 or a full disk; `eval` and local_pool.py by Ctrl-C."""
    args = [PY, "-m", "orchestrion", "run", "probe:hang 2+2?", "--pool", str(p.pool), "--strategy", "direct"]
    for how in ("SIGTERM", "kill -9", "a full disk"):
        n = len(p.statuses())
        task = "probe:slow 2+2?" if how == "a full disk" else "probe:hang 2+2?"  # slow: answers after 2 s
        proc = p.start([*args[:4], task, *args[5:]])
        p.wait(lambda n=n: len(p.statuses()) > n, 30)  # type: ignore[misc]
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        elif how == "kill -9":
            proc.kill()
        else:  # its files may not grow any more before its episode ends
            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        _, err = proc.communicate(timeout=60)
        last = (err.strip().splitlines() or ["(nothing)"])[-1]
        p.row("19", f"orchestrion run '{task}' --pool {p.pool} --strategy direct, then {how}", proc.returncode,
              f"{last}; its episode: {p.statuses()[n]}")
        if how != "SIGTERM":
            p.ran("19", ["run", "What is 2+2?", "--pool", str(p.pool), "--strategy", "direct"], pick="note")
            p.row("19", "that stopped episode afterwards", "-", p.statuses()[n])
    data = p.tmp / "d.jsonl"  # row 23: two examples finish, the third hangs
    data.write_text(data.read_text() + json.dumps({"id": "c", "prompt": "probe:hang 1+3?", "answer": "4"}) + "\n")
    args = ["eval", "--dataset", f"jsonl:{data}", "--pool", str(p.pool), "--strategies", "direct"]
    n = len(p.statuses())
    proc = p.start([PY, "-m", "orchestrion", *args])
    p.wait(lambda: p.statuses()[n:].count("ok") >= 2 and "running" in p.statuses()[n:], 60)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    p.row("23", f"orchestrion {' '.join(args)}, then Ctrl-C", proc.returncode, " / ".join(err.split("\n\n")).strip())
    from orchestrion.models.presets import missing  # row 21: Ctrl-C while the first local model answers

    args = ["bench/local_pool.py", "--tasks", "reasoning-gym:gcd", "--train", "1", "--limit", "1", "--out", "$TMP/lp"]
    if missing():
        p.row("21", "python " + " ".join(args), "-", f"not run: {', '.join(missing())} not pulled")
        return
    proc = p.start([PY, *[a.replace("$TMP", str(p.tmp)) for a in args]], cwd=ROOT)
    began = p.wait(lambda: "running" in p.statuses(p.tmp / "lp" / "traces.db"), 120)
    time.sleep(1.0)  # into its model call
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    what = " / ".join(err.strip().splitlines()[-2:]) + ("" if began else " (no episode had started)")
    p.row("21", f"python {' '.join(args)}, then Ctrl-C", proc.returncode,
          what + " [SEGFAULT]" * (proc.returncode == -signal.SIGSEGV))


def run_tests() -> None:
    """Each row's tests, in one pytest call."""
    ids = [t for tests in TESTS.values() for t in tests]
    res = subprocess.run([PY, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *ids], capture_output=True,
                         text=True, cwd=ROOT)
    outcome = [line.split(" ", 2)[:2] for line in res.stdout.splitlines()
               if line.split(" ")[0] in ("PASSED", "FAILED", "ERROR", "SKIPPED")]
    print("\n| row | tests | passed | not passed |\n|---|---|---|---|")
    for row, tests in TESTS.items():
        mine = [(o, t) for o, t in outcome if any(t.startswith(x) for x in tests)]
        bad = [f"{o} {t}" for o, t in mine if o != "PASSED"]
        print(f"| {row} | {'<br>'.join(tests)} | {len(mine) - len(bad)} | {'<br>'.join(bad) or '-'} |")
    print(f"\npytest: {res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-300:]}")


def main() -> None:
    backend = Backend()
    with tempfile.TemporaryDirectory() as folder:
        p = Probe(Path(folder), backend)
        try:
            p.cmd(["run", "What is 2+2?", "--pool", str(p.pool), "--strategy", "direct"])  # an episode to export
            serve_rows(p)
            cli_rows(p)
            signal_rows(p)
        finally:
            backend.stop.set()
            backend.shutdown()
            print("$TMP/pool.yaml: one model, m1, the probe's backend; `probe:KIND` in a task says how it answers.\n")
            print("| row | command | exit or HTTP status | what the user sees |\n|---|---|---|---|")
            print("\n".join(line for _, line in sorted(p.rows, key=lambda r: r[0])))
    if "--no-tests" not in sys.argv:
        run_tests()


if __name__ == "__main__":
    main()
