"""Tree rollouts (E3-Orch): the replay hook, the tree's shape, and hand-computed node advantages."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from orchestrion import (
    ConfigError,
    GenerateConfig,
    Message,
    Pool,
    Task,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion.train.rollouts import decision_rows
from orchestrion.train.settings import TreeSettings
from orchestrion.train.tree import collect_tree, tree_samples
from tests.helpers import LookupTool, echo_results
from tests.train.test_rollouts import TokenModel, char_decode, has_42, lookup

TASK = Task(prompt="Find the number.", id="tree")
OPTS = {"max_rounds": 2}


def queued(values: list[str]) -> TokenModel:
    """Decisions look up the next value of ``values`` in call order; the synthesis echoes the results in its prompt."""
    queue = list(values)

    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            return lookup(queue.pop(0))
        return echo_results(messages[-1]["content"])

    return TokenModel(reply, name="orch")


async def test_replay_hook_reuses_outputs_without_model_calls(store: TraceStore) -> None:
    orch = queued(["sampled"])
    replayed = lookup("42")
    res = await solve(TASK, strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([LookupTool()]),
                      store=store, options={**OPTS, "replay_decisions": [replayed]})
    assert res.status == "ok" and "found:42" in res.answer and "found:sampled" in res.answer
    decision_calls = [c for c in orch.calls if "JSON schema" in c[-1]["content"]]
    assert len(decision_calls) == 1  # only the second decision called the model
    rows = decision_rows(store, res.trace_id)
    assert [r.replayed for r in rows] == [True, False]
    assert rows[0].output == replayed and rows[0].valid and rows[0].action["calls"][0]["input"] == "42"
    assert rows[0].model == "orch" and rows[0].token_ids is None  # model name kept, nothing generated
    assert rows[1].token_ids is not None and rows[0].messages[0] == rows[1].messages[0]
    spans = {s.id: s for s in store.spans(res.trace_id)}
    attrs = [json.loads(spans[r.span_id].attrs) for r in rows]
    assert attrs[0]["replayed"] is True and attrs[0]["replayed_attempts"] == [0] and "replayed" not in attrs[1]
    first = spans[rows[0].span_id]
    assert first.input_tokens == 0 and first.output_tokens == 0  # no tokens billed
    assert not [s for s in spans.values() if s.kind == "call" and s.parent_id == first.id]


async def test_replay_option_must_be_a_list(store: TraceStore) -> None:
    with pytest.raises(ConfigError, match=r"option .replay_decisions. = .*: expected list\[str\]"):
        await solve(TASK, strategy="para", pool=Pool.from_models([queued(["1"])]), store=store,
                    options={"replay_decisions": lookup("1")})


async def test_replayed_invalid_output_is_repaired_like_a_sampled_one(store: TraceStore) -> None:
    orch = queued(["fixed"])
    res = await solve(TASK, strategy="para", pool=Pool.from_models([orch]), tools=ToolRegistry([LookupTool()]),
                      store=store, options={"max_rounds": 1, "replay_decisions": ["not json"]})
    rows = decision_rows(store, res.trace_id)
    assert [(r.attempt, r.valid, r.replayed) for r in rows] == [(0, False, True), (1, True, False)]
    assert "not json" in rows[1].messages[-2]["content"]  # the repair prompt shows the replayed output
    assert "found:fixed" in res.answer


async def test_tree_shape_shared_prefix_and_hand_computed_advantages(store: TraceStore) -> None:
    # canonical order: E0 root; E1, E2 branch at depth 0; E3, E4 at depth 1 (replay E0's first decision);
    # E5, E6 branch E1 at depth 1; E7, E8 branch E2 at depth 1. Values are what each decision call looks up.
    values = ["x", "y",  # E0 -> reward 0
              "42", "y",  # E1 -> 1
              "z", "y",  # E2 -> 0
              "42",  # E3 (replays x) -> 1
              "w",  # E4 (replays x) -> 0
              "a", "b",  # E5, E6 (replay 42) -> 1, 1
              "42", "c"]  # E7, E8 (replay z) -> 1, 0
    orch = queued(values)
    ticks: list[tuple[int, int]] = []
    tree = await collect_tree(TASK, TreeSettings(strategy="para", branching=2, max_depth=2, options=OPTS),
                              pool=Pool.from_models([orch]), store=store, reward_fn=has_42,
                              tools=ToolRegistry([LookupTool()]), progress=lambda d, t: ticks.append((d, t)))
    eps = tree.episodes
    assert len(eps) == 9 and ticks[-1] == (9, 9)
    assert [(e.parent, e.branch_depth) for e in eps] == [(None, 0), (0, 0), (0, 0), (0, 1), (0, 1),
                                                         (1, 1), (1, 1), (2, 1), (2, 1)]
    assert [e.reward for e in eps] == [0, 1, 0, 1, 0, 1, 1, 1, 0]
    decision_calls = [c for c in orch.calls if "JSON schema" in c[-1]["content"]]
    assert len(decision_calls) == 12  # 18 decisions in all, 6 of them replayed
    for e in eps:  # the replayed prefix is the parent's decisions, output for output
        if e.parent is not None:
            prefix = eps[e.parent].decisions[: e.branch_depth]
            assert [r.output for r in e.decisions[: e.branch_depth]] == [r.output for r in prefix]
            assert all(r.replayed for r in e.decisions[: e.branch_depth])
            assert not any(r.replayed for r in e.decisions[e.branch_depth:])
    seeds = [json.loads(store.episode(e.result.trace_id).meta)["options"]["seed"] for e in eps]  # type: ignore[union-attr]
    assert seeds == list(range(9))

    nodes = {(n.episode, n.depth): n for n in tree.nodes}
    assert len(nodes) == 12  # one per sampled decision
    # depth 0, owner E0: V(E0,0) = mean(E0, E3, E4) = 1/3; V(E1,0) = mean(E1, E5, E6) = 1;
    # V(E2,0) = mean(E2, E7, E8) = 1/3
    third = 1 / 3
    expected = {(0, 0): (third, third - 5 / 9), (1, 0): (1.0, 1 - 5 / 9), (2, 0): (third, third - 5 / 9),
                # depth 1, owner E0: E0 alone 0, E3 1, E4 0 -> mean 1/3
                (0, 1): (0.0, -third), (3, 1): (1.0, 2 * third), (4, 1): (0.0, -third),
                # depth 1, owner E1: all 1 -> flat; owner E2: E2 0, E7 1, E8 0
                (1, 1): (1.0, 0.0), (5, 1): (1.0, 0.0), (6, 1): (1.0, 0.0),
                (2, 1): (0.0, -third), (7, 1): (1.0, 2 * third), (8, 1): (0.0, -third)}
    for key, (value, adv) in expected.items():
        assert nodes[key].value == pytest.approx(value) and nodes[key].advantage == pytest.approx(adv), key
    assert {n.owner for n in tree.group(nodes[(3, 1)])} == {0} and len(tree.group(nodes[(3, 1)])) == 3
    assert all(n.same_context for n in tree.nodes)  # the lookup tool is deterministic

    samples = tree_samples(tree, store)
    assert len(samples) == 9  # 12 nodes minus the flat group under E1
    by_id = {s.decision_id: s for s in samples}
    for key, (value, adv) in expected.items():
        node = nodes[key]
        if adv == 0.0:
            assert node.decision_id not in by_id
            continue
        s = by_id[node.decision_id]
        assert s.advantage == pytest.approx(adv) and s.reward == pytest.approx(value) and s.meta["depth"] == key[1]
        row = eps[key[0]].decisions[key[1]]
        assert char_decode(s.completion_ids) == row.output and not row.replayed
    assert len(tree_samples(tree, store, keep_zero=True)) == 12


async def test_tree_stops_at_short_episodes_and_depth_zero(store: TraceStore) -> None:
    orch = queued(["1"] * 20)
    tree = await collect_tree(TASK, TreeSettings(strategy="para", branching=3, max_depth=0, options=OPTS),
                              pool=Pool.from_models([orch]), store=store, reward_fn=has_42,
                              tools=ToolRegistry([LookupTool()]))
    assert len(tree.episodes) == 1 and all(n.advantage is None for n in tree.nodes)
    assert tree_samples(tree, store) == []
    # one decision per episode (max_rounds=1) with max_depth 3: only depth 0 can branch
    tree = await collect_tree(TASK, TreeSettings(strategy="para", branching=2, max_depth=3, options={"max_rounds": 1}),
                              pool=Pool.from_models([queued(["42", "1", "2"])]), store=store, reward_fn=has_42,
                              tools=ToolRegistry([LookupTool()]))
    assert [(e.parent, e.branch_depth) for e in tree.episodes] == [(None, 0), (0, 0), (0, 0)]
    assert [n.advantage for n in tree.nodes] == pytest.approx([2 / 3, -1 / 3, -1 / 3])
