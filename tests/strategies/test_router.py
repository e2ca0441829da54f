from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from orchestrion import ModelSpec, Pool, Price, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.strategies.router import Scored, cheapest_first, choose_model, parse_history
from orchestrion.tools._ranking import TfIdf, nearest, tokenize

MATH = ["What is 12+30?", "What is 7*9?", "Compute 144/12.", "What is 250-13?"]
TRIVIA = ["What is the capital of France?", "Who wrote Hamlet?", "What is the capital of Japan?"]


def seeded_history() -> list[Scored]:
    """'big' is good at arithmetic, 'small' at trivia."""
    rows = [Scored(p, "big", 1.0) for p in MATH] + [Scored(p, "small", 0.0) for p in MATH]
    rows += [Scored(p, "small", 1.0) for p in TRIVIA] + [Scored(p, "big", 0.5) for p in TRIVIA]
    return rows


# -- pure parts -----------------------------------------------------------------------

def test_tokenize_folds_numbers_and_keeps_operators() -> None:
    assert tokenize("What is 7+8?", arithmetic=True) == ["what", "is", "<num>", "+", "<num>"]
    assert tokenize("Pi is 3.14", arithmetic=True) == ["pi", "is", "<num>"]


def test_tfidf_cosine() -> None:
    index = TfIdf(["the cat sat", "a dog ran", "the cat sat"])
    sims = index.similarities("the cat sat")
    assert sims[0] == pytest.approx(1.0) and sims[2] == pytest.approx(1.0) and sims[1] == 0.0
    assert index.similarities("cat")[0] < 1.0
    # rare words weigh more than common ones
    idx = TfIdf(["what is the capital of france", "what is 3+4", "what is 5+6"])
    assert idx.idf["france"] > idx.idf["what"]


def test_nearest_ranks_by_similarity_and_drops_unrelated() -> None:
    docs = MATH + TRIVIA + ["Translate 'bonjour' into English."]
    found = nearest("What is 17+25?", docs, k=3)
    assert [docs[i] for i, _ in found][0] == "What is 12+30?"
    assert all(docs[i] in MATH for i, _ in found[:2])
    sims = [s for _, s in found]
    assert sims == sorted(sims, reverse=True) and len(found) == 3
    assert nearest("zebra", docs, k=5) == []
    assert nearest("x", [], k=5) == [] and nearest("What", docs, k=0) == []


def test_choose_model_picks_the_best_on_the_nearest_tasks() -> None:
    history = seeded_history()
    math = choose_model("What is 17+25?", history, ["small", "big"], k=3, fallback="small")
    assert math.model == "big" and math.reason == "knn"
    assert math.scores["big"] > math.scores["small"]
    trivia = choose_model("What is the capital of Italy?", history, ["small", "big"], k=2, fallback="big")
    assert trivia.model == "small" and trivia.reason == "knn"
    assert all(p in TRIVIA for p, _ in trivia.neighbours)


def test_choose_model_means_per_task_then_over_neighbours() -> None:
    history = [Scored("What is 1+1?", "a", 1.0), Scored("What is 1+1?", "a", 0.0), Scored("What is 1+1?", "a", 0.0),
               Scored("What is 2+2?", "a", 1.0), Scored("What is 1+1?", "b", 0.6), Scored("What is 2+2?", "b", 0.6)]
    choice = choose_model("What is 3+3?", history, ["a", "b"], k=5, fallback="a")
    assert choice.scores == {"a": pytest.approx((1 / 3 + 1) / 2), "b": pytest.approx(0.6)}
    assert choice.model == "a"   # a mean over episodes (0.5) would have picked b: repeats of one task do not dominate


def test_choose_model_ties_go_to_the_cheaper_model() -> None:
    history = [Scored("What is 1+1?", "pricey", 1.0), Scored("What is 1+1?", "cheap", 1.0)]
    assert choose_model("What is 2+2?", history, ["cheap", "pricey"], fallback="pricey").model == "cheap"
    assert choose_model("What is 2+2?", history, ["pricey", "cheap"], fallback="cheap").model == "pricey"


def test_choose_model_falls_back() -> None:
    assert choose_model("q", [], ["a", "b"], fallback="b").model == "b"
    gone = [Scored("What is 1+1?", "retired", 1.0)]              # history of models no longer in the pool
    choice = choose_model("What is 1+1?", gone, ["a", "b"], fallback="a")
    assert (choice.model, choice.reason) == ("a", "no_history")
    # history, but nothing similar: the best model overall
    choice = choose_model("Name a colour.", seeded_history(), ["small", "big"], fallback="small")
    assert choice.reason == "no_similar_task" and choice.model == "big" and choice.neighbours == []


def test_cheapest_first() -> None:
    specs = [
        ModelSpec(name="unknown", backend="scripted"),
        ModelSpec(name="dear", backend="scripted", price=Price(input_per_mtok=3, output_per_mtok=15)),
        ModelSpec(name="free-big", backend="scripted", tier=4, price=Price(input_per_mtok=0, output_per_mtok=0)),
        ModelSpec(name="free-small", backend="scripted", tier=1, price=Price(input_per_mtok=0, output_per_mtok=0)),
    ]
    assert cheapest_first(specs) == ["free-small", "free-big", "dear", "unknown"]


def test_parse_history_reads_top_level_and_result_fields() -> None:
    task = json.dumps({"prompt": "What is 1+1?"})
    rows = [SimpleNamespace(task=task, meta=meta) for meta in (
        json.dumps({"score": 1.0, "result": {"model": "a"}}),
        json.dumps({"result": {"model": "b", "score": 0}}),
        json.dumps({"model": "c", "score": 0.5, "result": {"model": "ignored"}}),
        json.dumps({"score": True, "model": "d"}),      # not a number
        json.dumps({"score": 1.0}),                     # no model
        "{not json",
    )] + [SimpleNamespace(task="null", meta=json.dumps({"score": 1.0, "model": "e"}))]
    assert parse_history(rows) == [Scored("What is 1+1?", "a", 1.0), Scored("What is 1+1?", "b", 0.0),
                                    Scored("What is 1+1?", "c", 0.5)]


# -- the strategy on a seeded trace store -------------------------------------------------

def seed(store: TraceStore, history: list[Scored], *, finished: int = 1) -> None:
    for i, h in enumerate(history):
        store.submit(
            "INSERT INTO episodes (id, task, strategy, status, finished, ended, meta) VALUES (?,?,?,?,?,?,?)",
            (f"seed-{finished}-{i}", json.dumps({"prompt": h.prompt}), "direct", "ok", finished, float(i),
             json.dumps({"pool": "x", "result": {"model": h.model}, "score": h.score})),
        )
    store.flush()


def pool() -> tuple[Pool, ScriptedModel, ScriptedModel]:
    small, big = ScriptedModel(["small says"], name="small"), ScriptedModel(["big says"], name="big")
    return Pool.from_models([small, big], orchestrator="small"), small, big


async def test_router_routes_each_task_to_the_model_that_did_best_nearby(store: TraceStore) -> None:
    seed(store, seeded_history())
    p, small, big = pool()
    res = await solve("What is 17+25?", strategy="router", pool=p, tools=ToolRegistry([]), store=store)
    assert res.status == "ok" and res.answer == "big says" and res.meta["model"] == "big"
    assert len(big.calls) == 1 and not small.calls
    assert res.meta["route"] == "knn" and res.meta["history"] == len(seeded_history())
    assert res.meta["neighbours"][0]["prompt"] in MATH

    res = await solve("What is the capital of Spain?", strategy="router", pool=p, tools=ToolRegistry([]), store=store,
                      options={"k": 2})
    assert res.answer == "small says" and res.meta["model"] == "small" and len(small.calls) == 1
    assert any(e.kind == "route" for e in store.events(res.trace_id))


async def test_router_without_history_uses_the_fallback(store: TraceStore) -> None:
    seed(store, [Scored("What is 1+1?", "big", 1.0)], finished=0)   # unfinished episodes are not history
    p, small, big = pool()
    res = await solve("What is 1+1?", strategy="router", pool=p, tools=ToolRegistry([]), store=store)
    assert res.meta["model"] == "small" and res.meta["route"] == "no_history" and res.answer == "small says"
    res = await solve("What is 1+1?", strategy="router", pool=p, tools=ToolRegistry([]), store=store,
                      options={"fallback": "big"})
    assert res.meta["model"] == "big" and res.answer == "big says"


async def test_scored_router_episodes_become_history(store: TraceStore) -> None:
    p, _, _ = pool()
    first = await solve("What is 2+2?", strategy="router", pool=p, tools=ToolRegistry([]), store=store)
    assert first.meta["model"] == "small"
    # the eval harness scores the episode; the runner stored Answer.meta under meta.result
    store.submit("UPDATE episodes SET meta = json_set(meta, '$.score', 0.25) WHERE id = ?", (first.trace_id,))
    store.flush()
    second = await solve("What is 3+3?", strategy="router", pool=p, tools=ToolRegistry([]), store=store)
    assert second.meta["route"] == "knn" and second.meta["history"] == 1
    assert second.meta["model_scores"] == {"small": 0.25}
