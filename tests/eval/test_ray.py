"""The Ray executor on a local Ray instance gives the same records as the local executor."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrion import ConfigError, GenerateConfig, Message, Pool, ScriptedModel, TraceStore
from orchestrion.eval.executors import LocalExecutor, RayExecutor, make_executor
from orchestrion.eval.runner import EvalConfig, run_eval
from orchestrion.eval.summary import summarize

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"id": f"t{i}", "prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(3)]


def deterministic_reply(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Right for even task numbers, wrong for odd ones; the same in every process."""
    text = messages[-1]["content"]
    i = next(int(ch) for ch in text.split("What is ", 1)[1] if ch.isdigit())
    return f"Answer: {2 * i if i % 2 == 0 else 2 * i + 1}"


def scripted_pool() -> Pool:
    """Module level, so Ray workers can import it by name."""
    return Pool.from_models([ScriptedModel(deterministic_reply, name="m")])


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    import ray  # the ray extra is part of the test environment; missing, this fails (no skip)

    # workers import this test module (for scripted_pool) from the repository root
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def records(store: TraceStore, run_id: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Per (task, strategy, epoch): what an episode recorded, without ids and times."""
    out = {}
    for ep in store.query("SELECT * FROM episodes WHERE run_id = ? AND finished = 1", (run_id,)):
        meta = json.loads(ep["meta"])
        meta.pop("pool")
        spans = store.spans(ep["id"])
        out[(ep["task_id"], ep["strategy"], ep["epoch"])] = {
            "status": ep["status"], "answer": ep["answer"], "score": meta["score"], "meta": meta,
            "tokens": (ep["input_tokens"], ep["output_tokens"]),
            "spans": sorted((s.kind, s.name, s.status, s.input_tokens) for s in spans),
            "root_parent": [s.parent_id for s in spans if s.kind == "episode"],
            "parents_known": all(s.parent_id in {x.id for x in spans} for s in spans if s.kind != "episode"),
            "events": len(store.events(ep["id"])),
            "decisions": len(store.decisions(ep["id"])),
        }
    return out


async def test_ray_gives_the_same_records_as_local(tmp_path: Path, ray_instance: None) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    config = EvalConfig(dataset=str(data), strategies=["direct", "cot"], epochs=2, concurrency=2)
    local_store, ray_store = TraceStore(tmp_path / "local.db"), TraceStore(tmp_path / "ray.db")
    local = await run_eval(config, local_store, pool=scripted_pool, executor=LocalExecutor(2))
    remote = await run_eval(config, ray_store, pool=scripted_pool, executor=RayExecutor(2))
    expected = records(local_store, local.run_id)
    got = records(ray_store, remote.run_id)
    assert len(got) == 12 and got == expected
    assert {k: v["score"] for k, v in got.items()} == {
        (f"t{i}", s, e): (1.0 if i % 2 == 0 else 0.0) for i in range(3) for s in ("direct", "cot") for e in (0, 1)}
    assert all(v["root_parent"] == [None] and v["parents_known"] and v["events"] == expected[k]["events"]
               for k, v in got.items())
    assert [s.accuracy for s in summarize(ray_store, remote.run_id)] == pytest.approx([2 / 3, 2 / 3])
    assert ray_store.query("SELECT status FROM runs") == [{"status": "finished"}]


def test_missing_ray_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'orchestrion\[ray\]'"):
        make_executor("ray", concurrency=2)
    assert isinstance(make_executor("local", concurrency=2), LocalExecutor)
    with pytest.raises(ConfigError, match="choose local or ray"):
        make_executor("dask", concurrency=2)


async def test_episode_rows_move_between_stores_in_one_piece(tmp_path: Path) -> None:
    """What a Ray worker sends back: every row of the episode, imported once, events renumbered."""
    from orchestrion import TraceError, solve

    source, target = TraceStore(tmp_path / "worker.db"), TraceStore(tmp_path / "driver.db")
    target.submit("INSERT INTO events (episode_id, kind, data) VALUES ('other', 'x', '{}')")  # ids already taken
    decide = json.dumps({"thought": "t", "calls": [{"tool": "calculator", "input": "2+2"}], "final": False})
    orch = ScriptedModel(["not json", decide, json.dumps({"thought": "t", "calls": [], "final": True}), "4"], name="o")
    res = await solve("What is 2+2?", strategy="para", pool=Pool.from_models([orch]), store=source, run_id="r")
    for i in range(2):  # para writes no events of its own; give the episode two
        source.submit("INSERT INTO events (episode_id, ts, kind, data) VALUES (?,?,?,?)",
                      (res.trace_id, i, f"k{i}", "{}"))
    source.flush()
    rows = source.export_episode_rows(res.trace_id)
    assert len(rows["episodes"]) == 1 and len(rows["events"]) == 2 and rows["spans"]
    assert [d["valid"] for d in rows["decisions"]] == [0, 1, 1]  # the invalid attempt travels too
    target.import_rows(rows)
    target.flush()
    moved = target.export_episode_rows(res.trace_id)
    for table in ("episodes", "spans", "decisions"):
        assert moved[table] == rows[table]
    strip = [{k: v for k, v in e.items() if k != "id"} for e in rows["events"]]
    assert [{k: v for k, v in e.items() if k != "id"} for e in moved["events"]] == strip
    with pytest.raises(TraceError, match="already there"):
        target.import_rows(rows)
    target.submit("INSERT INTO runs (id) VALUES ('still-writable')")
    target.flush()  # the writer survived the refused import
    assert len(target.query("SELECT id FROM spans")) == len(rows["spans"])
