"""What hindsight reads of the trace, through the store's typed queries (no SQL in train/)."""

from __future__ import annotations

from typing import Any

from orchestrion import TraceStore, Usage
from orchestrion.status import EpisodeStatus
from orchestrion.trace import Tracer
from orchestrion.train.hindsight import hindsight


def _episode(store: TraceStore, eid: str, *, run: str | None, prompt: str, started: float,
             score: float | None = None, units: float = 1.0, finished: bool = True,
             tools: tuple[tuple[str, EpisodeStatus], ...] = ()) -> None:
    store.start_episode(eid, run_id=run, task_id=eid, epoch=0, strategy="direct", task={"prompt": prompt},
                        started=started, meta={})
    tracer = Tracer(store, eid)
    for name, status in tools:
        tracer.start("tool", name).end(status)
    if finished:
        meta: dict[str, Any] = {} if score is None else {"score": score}
        store.finish_episode(eid, status=EpisodeStatus.OK, answer="a", error=None, ended=started + 1,
                             usage=Usage(cost_units=units), meta_patch=meta)


def test_the_run_side_queries(store: TraceStore) -> None:
    _episode(store, "e1", run="r1", prompt="p1", started=1.0, score=1.0)
    _episode(store, "e2", run="r1", prompt="p2", started=2.0, finished=False)
    _episode(store, "e3", run="r1", prompt="p1", started=3.0)  # finished, no score
    _episode(store, "e4", run="r2", prompt="p3", started=4.0, score=0.0)
    store.flush()
    assert store.episode_ids(run_id="r1", finished=True) == ["e1", "e3"]
    assert store.episode_ids(run_id="r1") == ["e1", "e2", "e3"]
    assert store.task_prompts("r1") == {"p1", "p2"} and store.task_prompts("nope") == set()
    assert [e.id for e in store.scored_episodes_of({"p1", "p3"})] == ["e1", "e4"]  # e3 has no score
    assert store.scored_episodes_of(set()) == []


def test_ok_tool_names_are_the_listed_tools_that_returned_ok_once_each_in_call_order(store: TraceStore) -> None:
    ok, err = EpisodeStatus.OK, EpisodeStatus.ERROR
    _episode(store, "e1", run="r", prompt="p", started=1.0, score=1.0,
             tools=(("python", err), ("calculator", ok), ("lookup", ok), ("python", ok), ("calculator", ok)))
    _episode(store, "e2", run="r", prompt="p", started=2.0, score=1.0, tools=(("python", err),))
    store.flush()
    found = store.ok_tool_names(["e1", "e2"], ("calculator", "python"))
    assert found == {"e1": ["calculator", "python"]}
    assert store.ok_tool_names(["e1"], ()) == {} and store.ok_tool_names([], ("python",)) == {}


def test_more_prompts_and_episodes_than_one_statement_may_bind(store: TraceStore) -> None:
    # SQLite binds at most 999 parameters per statement in older builds: the queries go in pieces
    for i in range(1200):
        _episode(store, f"e{i:04d}", run="r", prompt=f"p{i}", started=float(i), score=1.0,
                 tools=(("calculator", EpisodeStatus.OK),) if i % 2 else ())
    store.flush()
    rows = store.scored_episodes_of(store.task_prompts("r"))
    assert len(rows) == 1200 and [r.id for r in rows] == sorted(r.id for r in rows)
    assert len(store.ok_tool_names([r.id for r in rows], ("calculator",))) == 600


def test_hindsight_hints_the_tool_that_decided_a_lost_point(store: TraceStore) -> None:
    _episode(store, "mine", run="r1", prompt="What is 6*7?", started=1.0, score=0.0)
    _episode(store, "other", run="r0", prompt="What is 6*7?", started=2.0, score=1.0,
             tools=(("calculator", EpisodeStatus.OK),))
    _episode(store, "unfinished", run="r1", prompt="What is 6*7?", started=3.0, score=None, finished=False)
    store.flush()
    found = hindsight(store, "r1")
    assert list(found) == ["mine"]
    assert found["mine"].reason == "lost points" and "call calculator with the task's own numbers" in found["mine"].hint
