"""OPOD: hindsight judgments, the hinted teacher context, the loss on a fixed batch, the CLI, one real run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the train extra is not installed")
import torch  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from orchestrion import (  # noqa: E402
    GenerateConfig,
    Message,
    Pool,
    ScriptedModel,
    ToolRegistry,
    TraceStore,
    solve,
)
from orchestrion.models.types import msg  # noqa: E402
from orchestrion.runtime.context import RunContext  # noqa: E402
from orchestrion.strategies.base import Answer, Strategy, Task  # noqa: E402
from orchestrion.train._opod_judge import followup, judge_records  # noqa: E402
from orchestrion.train._policy import Policy  # noqa: E402
from orchestrion.train.hindsight import hindsight  # noqa: E402
from orchestrion.train.opod import build_items, hinted, opod_loss  # noqa: E402
from orchestrion.train.records import load_records  # noqa: E402
from tests.helpers import LookupTool  # noqa: E402

HINT = "Ask the lookup tool for the city, not the country."


class Query(BaseModel):
    text: str


class Pick(BaseModel):
    answer: str


class LookupThenAnswer(Strategy):
    """Two short decisions around one tool call, so the trace has something after the first decision."""

    name = "test-lookup-then-answer"
    summary = "decide a lookup, run it, decide the answer"

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        first = await ctx.decide(Query, [msg("user", task.prompt)], max_repairs=0)
        found = await ctx.call_tool("lookup", {"text": first.action.text if first.action else "?"})
        second = await ctx.decide(Pick, [msg("user", f"{task.prompt}\nThe lookup said: {found.output}")], max_repairs=0)
        return Answer(second.action.answer if second.action else "")


def orchestrator(messages: Sequence[Message], config: GenerateConfig) -> str:
    if config.json_schema and "text" in config.json_schema.get("properties", {}):
        return json.dumps({"text": "France"})
    return json.dumps({"answer": "Paris"})


def judge_reply(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Flags every first decision (the lookup) with a hint; answers garbage about the others."""
    if '{"text": "France"}' in messages[-1]["content"]:
        return json.dumps({"needs_repair": True, "hint": HINT})
    return "looks fine to me"


def make_pool() -> Pool:
    return Pool.from_models([ScriptedModel(orchestrator, name="orch"), ScriptedModel(judge_reply, name="judge")],
                            orchestrator="orch", synthesizer="judge")


def fill_run(store: TraceStore, run_id: str = "r1") -> list[str]:
    """Two episodes of one run: the first graded correct, the second wrong."""

    async def go() -> list[str]:
        ids = []
        for i, correct in enumerate((True, False)):
            res = await solve(Task(id=f"t{i}", prompt="What is the capital of France?", answer="Paris"),
                              strategy=LookupThenAnswer(), pool=make_pool(), tools=ToolRegistry([LookupTool()]),
                              store=store, run_id=run_id)
            store.submit("UPDATE episodes SET meta = json_patch(meta, ?) WHERE id = ?",
                         (json.dumps({"score": float(correct), "correct": correct}), res.trace_id))
            ids.append(res.trace_id)
        await store.aflush()
        return ids

    return asyncio.run(go())


pytestmark = pytest.mark.usefixtures("one_thread")


def test_followup_shows_what_came_after(store: TraceStore) -> None:
    first_episode, _ = fill_run(store)
    seqs = sorted({r.seq for r in load_records(store, episode_ids=[first_episode])})
    trace, outcome = followup(store, first_episode, seqs[0])
    assert "lookup [ok]: found:France" in trace and '{"answer": "Paris"}' in trace
    assert trace.index("found:France") < trace.index('{"answer"')  # in time order
    assert "status ok" in outcome and "correct=True" in outcome and "'Paris'" in outcome
    last, _ = followup(store, first_episode, seqs[-1])
    assert "found:France" not in last and "nothing" in last


def test_judgments_parse_and_fall_back(store: TraceStore) -> None:
    fill_run(store)
    records = [r for r in load_records(store, run_id="r1") if r.valid]
    pool = make_pool()
    judged = asyncio.run(judge_records(records, pool=pool, store=store))
    assert len(judged) == 4
    flagged = [j for j in judged if j.needs_repair]
    assert len(flagged) == 2 and all(j.hint == HINT for j in flagged)
    assert {r.decision_id for r in records if r.schema_name == "Query"} == {j.decision_id for j in flagged}
    garbage = [j for j in judged if not j.needs_repair]
    assert all(j.raw == "looks fine to me" and j.error and "unparseable" in j.error for j in garbage)
    # the judge read the decision, what followed it and the outcome
    judge = pool.get("judge")
    assert isinstance(judge, ScriptedModel)
    prompt = next(c[-1]["content"] for c in judge.calls if '{"text": "France"}' in c[-1]["content"])
    assert "found:France" in prompt and "What is the capital of France?" in prompt and "graded correct=" in prompt


def test_hindsight_finds_lost_points_and_overspending_and_the_judge_sees_it(store: TraceStore) -> None:
    ok, bad = fill_run(store)  # same prompt: ok scored 1, bad scored 0
    cheap = asyncio.run(solve(Task(id="t9", prompt="What is the capital of France?", answer="Paris"), strategy="direct",
                              pool=Pool.from_models([ScriptedModel(["Paris"], name="small")]), store=store,
                              run_id="elsewhere"))
    other = asyncio.run(solve(Task(id="t8", prompt="What is 2+2?", answer="4"), strategy="direct",
                              pool=Pool.from_models([ScriptedModel(["4"], name="small")]), store=store, run_id="r1"))
    for eid, score, units in ((ok, 1.0, 1.0), (bad, 0.0, 1.0), (cheap.trace_id, 1.0, 0.1), (other.trace_id, 1.0, 0.1)):
        store.submit("UPDATE episodes SET cost_units = ?, meta = json_patch(meta, ?) WHERE id = ?",
                     (units, json.dumps({"score": score}), eid))
    store.flush()
    found = hindsight(store, "r1")
    assert set(found) == {ok, bad}  # the 2+2 episode has no other episode of its task to compare with
    assert found[bad].reason == "lost points" and "send the task unchanged to small (solve_directly)" in found[bad].hint
    assert found[ok].reason == "overspent" and "10% of this episode's compute units" in found[ok].hint
    assert hindsight(store, "r1", saving=0.95).keys() == {bad}  # 90% saved is not 95%
    store.submit("UPDATE episodes SET meta = json_patch(meta, ?) WHERE id IN (?, ?)",
                 (json.dumps({"score": 0.0}), ok, cheap.trace_id))
    store.flush()
    assert not hindsight(store, "r1")  # all failed: a cheaper run that failed too is no lesson for either
    records = [r for r in load_records(store, run_id="r1") if r.valid and r.episode_id == bad]
    pool = make_pool()
    judged = asyncio.run(judge_records(records, pool=pool, store=store, evidence={bad: found[bad].hint}))
    assert all(j.hindsight == found[bad].hint for j in judged)
    judge = pool.get("judge")
    assert isinstance(judge, ScriptedModel)
    assert all("Hindsight from other episodes of the same task: This episode scored 0" in c[-1]["content"]
               for c in judge.calls)


def test_hint_goes_into_the_teacher_context() -> None:
    base = [msg("system", "s"), msg("user", "u")]
    got = hinted(base, "do X")
    assert got[-1]["content"].startswith("u\n\n") and "do X" in got[-1]["content"] and base[-1]["content"] == "u"
    after_assistant = hinted([msg("user", "u"), msg("assistant", "a")], "do Y")
    assert after_assistant[-1]["role"] == "user" and "do Y" in after_assistant[-1]["content"]


def test_items_and_two_steps_on_a_fixed_batch_lower_the_loss(store: TraceStore, policy: Policy) -> None:
    fill_run(store)
    records = load_records(store, run_id="r1")
    judged = asyncio.run(judge_records([r for r in records if r.valid], pool=make_pool(), store=store))
    opd, rwr = build_items(policy, records, judged)
    assert len(opd) == 2 and len(rwr) == 2  # both lookups flagged; the correct episode's two decisions reinforced
    assert all(HINT in policy.tokenizer.decode(i.teacher_ids) and HINT not in policy.tokenizer.decode(i.student_ids)
               for i in opd)
    assert all(i.output_ids[-1] == policy.eos_id and i.reward == 1.0 for i in rwr)
    for item in opd:  # a fixed "student sample", so the two steps see the same batch
        item.sampled = policy.text_ids('{"text": "the capital"}') + [policy.eos_id]
    optimizer = torch.optim.AdamW(policy.parameters(), lr=2e-3)

    def two_steps(lam: float) -> list[dict[str, float]]:
        losses = []
        for _ in range(2):
            optimizer.zero_grad()
            losses.append(opod_loss(policy, opd, rwr, lam=lam))
            optimizer.step()
        return losses

    distil = two_steps(0.0)  # the reverse KL alone
    assert "rwr" not in distil[0] and distil[0]["opd"] > 0  # the hint changes the teacher's distribution
    assert distil[1]["opd"] < distil[0]["opd"]
    joint = two_steps(1.0)  # reverse KL + RWR, the default
    assert joint[1]["loss"] < joint[0]["loss"]
    assert joint[0]["loss"] == pytest.approx(joint[0]["opd"] + joint[0]["rwr"])


def test_student_and_teacher_start_from_the_same_adapter(tmp_path: Path) -> None:
    first = Policy.load(seed=1)
    with torch.no_grad():
        for name, param in first.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.02)
    first.save(tmp_path / "sft")
    policy = Policy.load(tmp_path / "sft")
    prompt = [policy.prompt_ids([msg("user", "What is 2+2?")])]
    batch = policy.batch(prompt, [policy.text_ids('{"answer": "4"}')])
    with torch.no_grad():
        student, teacher = policy.logits(batch), policy.frozen_logits(batch)
        with policy.model.disable_adapter():
            base = policy.logits(batch)
    assert torch.allclose(student, teacher, atol=1e-4)  # both are base + the SFT adapter
    assert not torch.allclose(student, base, atol=1e-3)  # and the adapter was really applied
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    optimizer.zero_grad()
    (-policy.logprobs(batch).sum()).backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    with torch.no_grad():
        assert not torch.allclose(policy.logits(batch), student, atol=1e-4)  # the student moved
        assert torch.equal(policy.frozen_logits(batch), teacher)  # the teacher did not


def test_cli_opod_on_a_scripted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrion import cli
    from orchestrion.train import opod

    db = tmp_path / "t.db"
    store = TraceStore(db)
    fill_run(store, "run-a")
    store.close()
    monkeypatch.setattr(opod, "load_pool", lambda _p: make_pool())
    out = tmp_path / "adapter"
    res = CliRunner().invoke(cli.app, ["train", "opod", "--run", "run-a", "--steps", "1", "--batch-size", "1",
                                       "--max-new-tokens", "4", "--out", str(out), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "judged 4 decisions, 2 flagged for repair" in res.output and "step 1: loss=" in res.output
    assert (out / "adapter_config.json").is_file() and (out / "adapter.gguf").is_file()
    lines = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and sum(x["needs_repair"] for x in lines) == 2
    log = json.loads((out / "train_log.json").read_text())
    assert log["flagged"] == 2 and log["judge_errors"] == 2 and log["steps"][0]["opd_decisions"] == 1
    # --hindsight: only the episode that lost points against the other one of its task is judged
    hinted_out = tmp_path / "hinted"
    res = CliRunner().invoke(cli.app, ["train", "opod", "--run", "run-a", "--steps", "1", "--batch-size", "1",
                                       "--max-new-tokens", "4", "--out", str(hinted_out), "--db", str(db),
                                       "--hindsight"])
    assert res.exit_code == 0, res.output
    assert "hindsight: 1 episode(s) lost points and 0 overspent" in res.output
    assert "judged 2 decisions, 1 flagged for repair" in res.output
    log = json.loads((hinted_out / "train_log.json").read_text())
    assert [h["hint"] for h in log["hints"]] == [HINT] and "scored 0" in log["hints"][0]["hindsight"]


def test_cli_opod_unknown_run(tmp_path: Path) -> None:
    from orchestrion import cli

    res = CliRunner().invoke(cli.app, ["train", "opod", "--run", "nope", "--db", str(tmp_path / "t.db")])
    assert res.exit_code == 2 and "run 'nope' has no episodes" in res.output


@pytest.mark.integration
def test_opod_on_the_embedded_model(tmp_path: Path) -> None:
    """A real para episode, judged by the embedded model, then one OPOD step."""
    from orchestrion import cli

    db = tmp_path / "t.db"
    store = TraceStore(db)
    res = asyncio.run(solve(Task(id="a", prompt="What is 3 + 4?", answer="7"), strategy="para", store=store,
                            run_id="real", options={"max_rounds": 1, "max_calls": 1}))
    # graded a success by hand, so RWR has data whatever the judge says
    store.submit("UPDATE episodes SET meta = json_patch(meta, ?) WHERE id = ?",
                 ('{"score": 1.0, "correct": true}', res.trace_id))
    store.close()
    out = tmp_path / "adapter"
    res2 = CliRunner().invoke(cli.app, ["train", "opod", "--run", "real", "--steps", "1", "--max-new-tokens", "8",
                                        "--max-decisions", "2", "--out", str(out), "--db", str(db)])
    assert res2.exit_code == 0, res2.output
    judged = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    assert judged and all(j["raw"] or j["error"] for j in judged)  # every judge output is kept
    log = json.loads((out / "train_log.json").read_text())
    assert log["rwr_items"] >= 1 and log["steps"][0]["loss"] is not None
    assert (out / "adapter.gguf").is_file()


def test_cli_opod_resumes_from_its_last_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after step 1, the rerun continues at step 2, with the saved judgments and a bar with an ETA."""
    from orchestrion import cli
    from orchestrion.train import opod

    db = tmp_path / "t.db"
    store = TraceStore(db)
    fill_run(store, "run-a")
    store.close()
    pools: list[Pool] = []
    monkeypatch.setattr(opod, "load_pool", lambda _p: pools.append(make_pool()) or pools[-1])
    out = tmp_path / "adapter"
    args = ["train", "opod", "--run", "run-a", "--steps", "2", "--batch-size", "1", "--max-new-tokens", "4",
            "--out", str(out), "--db", str(db)]
    first = CliRunner().invoke(cli.app, [*args, "--stop-after", "1"])
    assert first.exit_code == 0, first.output
    assert "step 1: loss=" in first.output and "step 2:" not in first.output
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert state["step"] == 1 and (out / "checkpoint" / "trainer_state.pt").is_file()
    second = CliRunner().invoke(cli.app, args)
    assert second.exit_code == 0, second.output
    assert "after step 1 of 2" in second.output and "step 1: loss=" not in second.output
    assert "step 2: loss=" in second.output and "judgments read back" in second.output
    assert "ETA" in second.output and "2/2" in second.output  # the rich bar, on stderr
    judge = pools[1].get("judge")
    assert isinstance(judge, ScriptedModel) and not judge.calls  # nothing judged twice
    log = json.loads((out / "train_log.json").read_text())
    assert [s["step"] for s in log["steps"]] == [1, 2] and log["flagged"] == 2
    # another setting than the checkpoint's is refused, naming it
    third = CliRunner().invoke(cli.app, [*args, "--lr", "0.5"])
    assert third.exit_code == 2 and "lr=0.0001" in third.output and "another --out" in third.output
