"""Counterfactual credit (LEMON): one-field spec edits, re-execution, contrasts, edited-span token weights."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrion import (
    ConfigError,
    EpisodeResult,
    GenerateConfig,
    Message,
    Pool,
    ScriptedModel,
    Task,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion._text import locate_json
from orchestrion.strategies.spec import OrchestrationSpec
from orchestrion.tools.agents import agent_tools
from orchestrion.train.counterfactual import (
    counterfactual_samples,
    counterfactuals,
    span_weights,
    spec_edits,
    token_char_spans,
)
from orchestrion.train.rollouts import decision_rows
from tests.helpers import echo_results, needs_train
from tests.train.test_rollouts import TokenModel, char_decode

TASK = Task(prompt="What is 6*7?", id="cf")
PRIMS = ["reasoner", "reviewer", "ensemble"]  # what agent_tools() allows without python or a corpus


def role(name: str, capacity: str, deps: list[str] | None = None, primitive: str = "reasoner") -> dict[str, Any]:
    return {"name": name, "duty": f"duty of {name}", "capacity": capacity, "primitive": primitive,
            "depends_on": deps or []}


def spec_text(writer_capacity: str = "high") -> str:
    return json.dumps({"roles": [role("researcher", "low"), role("writer", writer_capacity, ["researcher"])]})


def worker(model: str, prompt: str) -> str:
    """Executors: a reviewer never gives a number; otherwise the big model says 42, the small 41, the middle 40."""
    if prompt.startswith("You are a critical reviewer"):
        return "review: looks fine"
    return {"small": "small says 41", "big": "big says 42", "orch": "orch says 40"}[model]


def make_pool(spec: str) -> tuple[Pool, TokenModel]:
    def orch_reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is not None:
            return spec
        text = messages[-1]["content"]
        return echo_results(text) if text.startswith("A team worked") else worker("orch", text)

    orch = TokenModel(orch_reply, name="orch")
    small = ScriptedModel(lambda m, c: worker("small", m[-1]["content"]), name="small")
    big = ScriptedModel(lambda m, c: worker("big", m[-1]["content"]), name="big")
    pool = Pool.from_models([orch, small, big], orchestrator="orch")
    for name, tier in {"small": 1, "orch": 3, "big": 5}.items():
        pool.specs[name].tier = tier
    return pool, orch


async def only_42(result: EpisodeResult, task: Task) -> float:
    """1 when the answer has the big model's 42 and none of the other numbers."""
    return 1.0 if "42" in result.answer and "41" not in result.answer and "40" not in result.answer else 0.0


async def run_spec(store: TraceStore, spec: str) -> tuple[EpisodeResult, Pool, TokenModel]:
    pool, orch = make_pool(spec)
    res = await solve(TASK, strategy="spec", pool=pool, tools=ToolRegistry(agent_tools()), store=store)
    assert res.status == "ok", res.error
    return res, pool, orch


def test_spec_edits_change_one_field_and_stay_valid() -> None:
    out = "Here is the spec:\n```json\n" + spec_text() + "\n```\n"
    edits = spec_edits(out, PRIMS)
    summary = [(e.kind, e.role, e.old, e.new) for e in edits]
    assert summary == [
        ("role", "researcher", "reasoner", "reviewer"), ("role", "researcher", "reasoner", "ensemble"),
        ("role", "writer", "reasoner", "reviewer"), ("role", "writer", "reasoner", "ensemble"),
        ("capacity", "researcher", "low", "medium"), ("capacity", "writer", "high", "medium"),
        ("dependency", "writer", ["researcher"], []),  # researcher -> writer would close a cycle: not offered
    ]
    original = json.loads(spec_text())
    for e in edits:
        assert (
            e.output[: e.span[0]] == out[: e.span[0]]
            and e.output[e.span[1] + len(e.output) - len(out) :] == out[e.span[1] :]
        )
        edited = json.loads(e.output.split("```json\n")[1].split("```")[0])
        changed = [(i, k) for i, (a,
                                  b) in enumerate(zip(original["roles"], edited["roles"])) for k in a if a[k] != b[k]]
        assert len(changed) == 1 and changed[0][1] == e.field  # exactly one field of one agent
        assert out[e.span[0]: e.span[1]] == (json.dumps(e.old) if e.kind == "dependency" else e.old)
    assert [e.kind for e in spec_edits(out, PRIMS, fields=("capacity",))] == ["capacity", "capacity"]
    three = json.dumps({"roles": [role("a", "medium"), role("b", "low"), role("c", "low", ["a"])]})
    deps = [(e.role, e.new) for e in spec_edits(three, PRIMS, fields=("dependency",))]
    # a -> c is left out: c already depends on a, so it would close a cycle
    assert deps == [("a", ["b"]), ("b", ["a"]), ("b", ["c"]), ("c", []), ("c", ["a", "b"])]
    caps = [(e.role, e.new) for e in spec_edits(three, PRIMS, fields=("capacity",))]
    assert caps == [("a", "low"), ("a", "high"), ("b", "medium"), ("c", "medium")]
    with pytest.raises(ConfigError, match="unknown counterfactual field"):
        spec_edits(out, PRIMS, fields=("duty",))


def test_locate_json_keeps_positions_like_the_parser_reads() -> None:
    text = 'note {"a": [1, -2.5e1, true, null], "b": {"c": "x\\"y"}} tail'
    node = locate_json(text)
    assert node is not None and node.value == {"a": [1, -25.0, True, None], "b": {"c": 'x"y'}}
    a, c = node.get("a"), node.keys["b"].get("c")
    assert a is not None and c is not None
    assert text[a.start: a.end] == "[1, -2.5e1, true, null]" and text[c.start: c.end] == '"x\\"y"'
    assert locate_json("no json here") is None


async def test_counterfactuals_reexecute_each_edit_and_contrast_rewards(store: TraceStore) -> None:
    res, pool, orch = await run_spec(store, spec_text())
    assert await only_42(res, TASK) == 1.0
    calls_before = len(orch.calls)
    cfs = await counterfactuals(res.trace_id, store=store, pool=pool, reward_fn=only_42,
                                tools=ToolRegistry(agent_tools()))
    assert len(cfs) == 7 and all(cf.applied for cf in cfs)
    contrast = {(cf.edit.kind, cf.edit.role, str(cf.edit.new)): cf.contrast for cf in cfs}
    assert contrast == {
        ("role", "researcher", "reviewer"): 0.0, ("role", "researcher", "ensemble"): 0.0,
        ("role", "writer", "reviewer"): 1.0,  # the reviewer gives no number: the original was better
        ("role", "writer", "ensemble"): 0.0,
        ("capacity", "researcher", "medium"): 0.0,
        ("capacity", "writer", "medium"): 1.0,  # the middle model says 40
        ("dependency", "writer", "[]"): 1.0,  # researcher becomes a sink and its 41 reaches the answer
    }
    spec_calls = [c for c in orch.calls[calls_before:] if "JSON schema" in c[-1]["content"]]
    assert spec_calls == []  # every edited spec was replayed, not sampled
    for cf in cfs:  # each re-execution ran the original spec with that one field changed
        expected = OrchestrationSpec.model_validate_json(spec_text())
        setattr(next(r for r in expected.roles if r.name == cf.edit.role), cf.edit.field, cf.edit.new)
        assert OrchestrationSpec.model_validate(cf.edited.meta["spec"]) == expected
        assert expected != OrchestrationSpec.model_validate_json(spec_text())
        row = decision_rows(store, cf.edited.trace_id)[0]
        assert row.replayed and row.output == cf.edit.output and row.valid
        assert cf.original_reward == 1.0 and cf.decision_id == decision_rows(store, res.trace_id)[0].id


async def test_contrast_is_negative_when_the_edit_is_better(store: TraceStore) -> None:
    res, pool, _ = await run_spec(store, spec_text("medium"))
    cfs = await counterfactuals(res.trace_id, store=store, pool=pool, reward_fn=only_42, fields=("capacity",),
                                tools=ToolRegistry(agent_tools()))
    by_new = {(cf.edit.role, cf.edit.new): cf.contrast for cf in cfs}
    assert by_new == {("researcher", "medium"): 0.0, ("writer", "low"): 0.0, ("writer", "high"): -1.0}


async def test_samples_weight_exactly_the_edited_value(store: TraceStore) -> None:
    res, pool, _ = await run_spec(store, spec_text())
    cfs = await counterfactuals(res.trace_id, store=store, pool=pool, reward_fn=only_42, max_edits=3,
                                tools=ToolRegistry(agent_tools()))
    assert [cf.edit.kind for cf in cfs] == ["role", "capacity", "dependency"]  # a limit keeps every kind
    samples = counterfactual_samples(cfs, store, tokenizer=char_decode)
    assert len(samples) == 3
    (row,) = decision_rows(store, res.trace_id)
    for cf, sample in zip(cfs, samples):
        assert sample.advantage == cf.contrast and sample.decision_id == row.id
        assert char_decode(sample.completion_ids) == row.output  # the original output's stored ids
        weights = sample.weights()
        # one token per character: the weighted tokens are exactly the edited value's characters
        assert [i for i, w in enumerate(weights) if w] == list(range(*cf.edit.span))
        assert "".join(row.output[i] for i, w in enumerate(weights) if w) == (
            json.dumps(cf.edit.old) if cf.edit.kind == "dependency" else cf.edit.old)
    plain_pool = Pool.from_models([ScriptedModel(lambda m, c: spec_text() if c.json_schema else "42", name="p")])
    plain = await solve(TASK, strategy="spec", pool=plain_pool, tools=ToolRegistry(agent_tools()), store=store)
    cfs = await counterfactuals(plain.trace_id, store=store, pool=plain_pool, reward_fn=only_42, max_edits=1,
                                tools=ToolRegistry(agent_tools()))
    assert counterfactual_samples(cfs, store, tokenizer=char_decode) == []  # no token ids recorded


async def test_non_spec_or_missing_episode_is_a_clear_error(store: TraceStore) -> None:
    pool = Pool.from_models([ScriptedModel(["42"], name="m")])
    res = await solve(TASK, strategy="direct", pool=pool, store=store)
    with pytest.raises(ConfigError, match="used strategy 'direct'; counterfactual edits need 'spec'"):
        await counterfactuals(res.trace_id, store=store, pool=pool, reward_fn=only_42)
    with pytest.raises(ConfigError, match="is not in the trace store"):
        await counterfactuals("nope", store=store, pool=pool, reward_fn=only_42)


@needs_train
def test_token_spans_on_the_real_tokenizer_token_by_token() -> None:
    from orchestrion.train.hf import load_tokenizer

    tok = load_tokenizer()
    spec = {"roles": [
        {"name": "planner", "duty": "Plan the steps 🙂 for café", "capacity": "medium", "primitive": "reasoner",
         "depends_on": []},
        {"name": "solver", "duty": "Compute 2+3", "capacity": "high", "primitive": "reviewer",
         "depends_on": ["planner"]},
    ]}
    text = json.dumps(spec, ensure_ascii=False)
    ids = tok.encode(text, add_special_tokens=False)

    def decode(x: list[int]) -> str:
        return str(tok.decode(x, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    assert decode(ids) == text
    spans = token_char_spans(ids, decode)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] or b[0] == a[1] - 1 for a,
               b in itertools.pairwise(spans))  # contiguous (partial chars overlap)
    edits = spec_edits(text, ["reasoner", "reviewer", "ensemble"])
    assert {e.kind for e in edits} == {"role", "capacity", "dependency"}
    for edit in edits:
        weights = span_weights(spans, edit.span)
        marked = [i for i, w in enumerate(weights) if w]
        assert marked == list(range(marked[0], marked[-1] + 1))  # one run of tokens
        value = text[edit.span[0]: edit.span[1]]
        run = decode(ids[marked[0]: marked[-1] + 1])
        assert value in run  # the run covers the whole value ...
        assert value not in decode(ids[marked[0] + 1: marked[-1] + 1]) or len(marked) == 1
        assert value not in decode(ids[marked[0]: marked[-1]]) or len(marked) == 1  # ... and is minimal
        for i, w in enumerate(weights):  # token by token: marked iff its own text overlaps the value
            start = len(decode(ids[:i]))
            piece = decode(ids[i: i + 1])
            overlaps = start < edit.span[1] and start + len(piece) > edit.span[0]
            assert bool(w) == overlaps, (i, piece, edit.kind)


@pytest.mark.integration
async def test_counterfactual_on_a_real_spec_decision(store: TraceStore) -> None:
    from orchestrion import Budget
    from orchestrion.train.hf import load_tokenizer

    pool = Pool.default()
    budget = Budget(tokens=4000, wall_s=150)
    # one role and no python tool (no coder): this spec and its edited rerun stay a few model calls
    tools = ToolRegistry(agent_tools())
    for seed in range(4):  # the tiny model does not always write a valid spec; a few seeds are enough
        res = await solve(Task(prompt="What is 2+3?"), strategy="spec", pool=pool, store=store, budget=budget,
                          tools=tools,
                          options={"seed": seed, "max_roles": 1, "decision_temperature": 0.7})  # seeds must differ
        if res.meta.get("spec"):
            break
    assert res.meta.get("spec"), f"no valid spec in 4 tries: {res.status} {res.meta.get('error')}"

    async def has_5(result: EpisodeResult, task: Task) -> float:
        return 1.0 if "5" in result.answer else 0.0

    cfs = await counterfactuals(res.trace_id, store=store, pool=pool, reward_fn=has_5, fields=("capacity",),
                                tools=tools, max_edits=1)
    assert len(cfs) == 1 and cfs[0].applied and cfs[0].contrast in (-1.0, 0.0, 1.0)
    (sample,) = counterfactual_samples(cfs, store)  # the real tokenizer on llama.cpp's stored ids
    tok = load_tokenizer()
    marked = [i for i, w in enumerate(sample.weights()) if w]
    run = tok.decode(sample.completion_ids[marked[0]: marked[-1] + 1], skip_special_tokens=False,
                     clean_up_tokenization_spaces=False)
    assert cfs[0].edit.old in run and len(marked) <= 4
    assert sample.advantage == cfs[0].contrast
