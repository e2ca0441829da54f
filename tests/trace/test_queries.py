"""The store's typed interface: runs, episodes, spans and decisions by name, no SQL in callers."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from orchestrion import TraceStore, Usage
from orchestrion.trace import Tracer


def _episode(store: TraceStore, eid: str, run: str | None, started: float, task_id: str = "t",
             status: str | None = None, meta: dict[str, Any] | None = None) -> None:
    store.start_episode(eid, run_id=run, task_id=task_id, epoch=0, strategy="direct", task={"prompt": eid},
                        started=started, meta={"pool": "tiny"})
    if status is not None:
        store.finish_episode(eid, status=status, answer="a", error=None, ended=started + 1,
                             usage=Usage(input_tokens=2, output_tokens=3, cost_units=1.0), meta_patch=meta or {})


def test_runs_are_created_read_and_updated(store: TraceStore) -> None:
    store.create_run("run-a1", "eval", {"strategies": ["direct"]}, created=1.0)
    store.create_run("run-a2", "serve", {}, created=2.0)
    store.create_run("other", "eval", {}, created=3.0)
    store.set_run_status("run-a1", "finished")
    store.flush()
    assert [r.id for r in store.runs_matching("run-a")] == ["run-a1", "run-a2"]
    (a1,) = store.runs_matching("run-a1")
    assert a1.status == "finished" and a1.config_value() == {"strategies": ["direct"]}
    assert [r.id for r in store.runs()] == ["run-a1", "run-a2", "other"]
    assert [r.id for r in store.runs(kind="eval", newest_first=True, limit=1)] == ["other"]


def test_episodes_open_close_and_filter(store: TraceStore) -> None:
    _episode(store, "e1", "r1", 1.0, status="ok", meta={"score": 1.0})
    _episode(store, "e2", "r1", 2.0)  # never finished
    _episode(store, "e3", None, 3.0, status="cancelled")
    _episode(store, "e4", "r1", 4.0, task_id="t2", status="ok")
    store.patch_episode_meta("e4", {"grpo": {"reward": 0.5}})
    store.flush()
    e1 = store.episode("e1")
    assert e1 is not None and e1.finished == 1 and e1.input_tokens == 2 and e1.cost_units == 1.0
    assert json.loads(e1.meta) == {"pool": "tiny", "score": 1.0}
    assert json.loads(store.episode("e4").meta)["grpo"] == {"reward": 0.5}  # type: ignore[union-attr]
    assert [e.id for e in store.episodes(run_id="r1")] == ["e1", "e2", "e4"]
    assert [e.id for e in store.episodes(newest_first=True)] == ["e4", "e3", "e2", "e1"]
    assert [e.id for e in store.episodes(no_run=True)] == ["e3"]
    assert [e.id for e in store.episodes(run_id="r1", ids=["e2", "e3"])] == ["e2"]
    assert store.episodes(ids=[]) == []
    assert store.episode_ids() == ["e1", "e2", "e3", "e4"] and store.episode_ids(run_id="r1", limit=1) == ["e1"]
    assert store.episode_run_ids("r") == ["r1"]
    assert store.episode_for_task("r1", "t2").id == "e4"  # type: ignore[union-attr]
    assert store.episode_for_task("r1", "nope") is None
    assert [e.id for e in store.scored_history(10)] == ["e1"]
    assert [(e.id, e.meta_value()["pool"]) for e in store.counted_episodes("r1")] == [("e1", "tiny"), ("e4", "tiny")]
    store.mark_interrupted("r1")
    store.flush()
    assert [e.status for e in store.episodes(run_id="r1")] == ["ok", "interrupted", "ok"]
    assert [e.id for e in store.episodes(newest_first=True, limit=2)] == ["e4", "e3"]
    assert store.episode("e1").meta_value() == {"pool": "tiny", "score": 1.0}  # type: ignore[union-attr]
    assert store.episode("e1").task_value() == {"prompt": "e1"}  # type: ignore[union-attr]


def test_an_annotation_is_set_replaced_and_cleared_in_meta(store: TraceStore) -> None:
    _episode(store, "e1", None, 1.0)  # still running: the closing update keeps the annotation
    store.annotate_episode("e1", label=" keep ", note="good plan", at=5.0)
    _episode(store, "e2", None, 2.0, status="ok")
    store.finish_episode("e1", status="ok", answer="a", error=None, ended=2.0, usage=Usage(), meta_patch={"score": 1})
    store.flush()
    assert store.episode("e1").meta_value() == {  # type: ignore[union-attr]
        "pool": "tiny", "score": 1, "annotation": {"label": "keep", "note": "good plan", "at": 5.0}}
    store.annotate_episode("e1", label="retry", note=None, at=6.0)  # replaced whole: the old note goes
    store.flush()
    assert store.episode("e1").meta_value()["annotation"] == {"label": "retry", "at": 6.0}  # type: ignore[union-attr]
    store.annotate_episode("e1", label="", note="  ")
    store.flush()
    assert "annotation" not in store.episode("e1").meta_value()  # type: ignore[union-attr]
    assert "annotation" not in store.episode("e2").meta_value()  # type: ignore[union-attr]


def test_spans_and_decisions_by_filter(store: TraceStore) -> None:
    tracer = Tracer(store, "ep")
    with tracer.span("episode", "root") as root:
        with tracer.span("decision", "d1") as d:
            d.set(replayed_attempts=[0])
            tracer.decision(d, {"output": "{}", "valid": False, "attempt": 0})
            tracer.decision(d, {"output": "{}", "valid": True, "attempt": 1})
        with tracer.span("tool", "calc", tool="calculator"):
            pass
    root.end()
    store.flush()
    assert [s.name for s in store.spans("ep")] == ["root", "d1", "calc"]
    assert [s.name for s in store.spans("ep", kinds=("tool",))] == ["calc"]
    light = store.spans("ep", exclude_kinds=("episode",), attrs=False)
    assert [s.name for s in light] == ["d1", "calc"] and light[0].attrs is None
    assert store.spans("ep", since=light[1].started)[-1].name == "calc"
    rows = store.decisions("ep", span_attrs=True)
    assert [r.valid for r in rows] == [0, 1] and json.loads(rows[0].span_attrs)["replayed_attempts"] == [0]
    assert store.decision_validity(["ep", "none"]) == [False, True] and store.decision_validity([]) == []


def test_a_typed_row_is_the_stored_row_column_for_column(store: TraceStore) -> None:
    # the JSONL export writes dataclasses.asdict(row): the same keys, in the same order, as SELECT *
    _episode(store, "e1", "r1", 1.0, status="ok", meta={"score": 1.0})
    tracer = Tracer(store, "e1")
    with tracer.span("decision", "d1", model="m") as d:
        tracer.event("note", {"x": 1}, span=d)
        tracer.decision(d, {"output": "{}", "valid": True, "messages": [{"role": "user", "content": "q"}],
                            "token_ids": [1, 2], "action": {"a": 1}})
    store.flush()
    rows = {"episodes": [store.episode("e1")], "spans": store.spans("e1"), "events": store.events("e1"),
            "decisions": store.decisions("e1")}
    for table, typed in rows.items():
        stored = store.query(f"SELECT * FROM {table} WHERE {'id' if table == 'episodes' else 'episode_id'} = 'e1'")
        assert [list(dataclasses.asdict(r).items()) for r in typed] == [list(r.items()) for r in stored], table
    (d,) = store.decisions("e1")
    assert d.messages_value() == [{"role": "user", "content": "q"}] and d.token_ids_value() == [1, 2]
    assert d.prompt_token_ids_value() is None and d.logprobs_value() is None and d.action_value() == {"a": 1}
    (e,) = store.events("e1")
    assert e.data_value() == {"x": 1} and store.spans("e1")[0].attrs_value()["model"] == "m"
