"""GRPO: the update on a fixed batch, the loop on a scripted pool, the CLI, and one real run."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the train extra is not installed")
import torch  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore  # noqa: E402
from orchestrion.eval.scorers import Score  # noqa: E402
from orchestrion.models.types import msg  # noqa: E402
from orchestrion.runtime.context import RunContext  # noqa: E402
from orchestrion.strategies import base as strategy_base  # noqa: E402
from orchestrion.strategies.base import Answer, Strategy, Task  # noqa: E402
from orchestrion.train._policy import Policy  # noqa: E402
from orchestrion.train._types import TrainSample  # noqa: E402
from orchestrion.train.grpo import grpo_update, rollout_gap_stats, set_old_logprobs, train_grpo  # noqa: E402
from orchestrion.train.settings import GRPOSettings  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


class Pick(BaseModel):
    answer: str


class OneDecision(Strategy):
    """A strategy with one short orchestrator decision, so the policy trains on short prompts."""

    name = "test-one-decision"
    summary = "one decision; its answer is the answer"

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        decision = await ctx.decide(Pick, [msg("user", task.prompt)], max_repairs=0)
        return Answer(decision.action.answer if decision.action else "")


def by_seed(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Right ('4') for even decision seeds, wrong ('5') for odd: rewards in a group differ."""
    return json.dumps({"answer": "4" if (config.seed or 0) % 2 == 0 else "5"})


class Tasks:
    """A dataset-like object: tasks plus a scorer (1 when the answer equals the reference)."""

    name = "two-plus-two"

    def __init__(self, n: int) -> None:
        self.tasks = [Task(id=f"t{i}", prompt=f"What is 2+2? ({i})", answer="4") for i in range(n)]

    async def scorer(self, task: Task, output: str) -> Score:
        right = output.strip() == task.answer
        return Score(value=float(right), correct=right, extracted=output.strip())


pytestmark = pytest.mark.usefixtures("one_thread")


def fixed_samples(policy: Policy) -> list[TrainSample]:
    prompts = [policy.prompt_ids([{"role": "user", "content": q}]) for q in ("What is 2+2?", "Name a colour.")]
    outputs = ['{"answer": "4"}', '{"answer": "purple"}']
    return [TrainSample(prompt_ids=p, completion_ids=policy.text_ids(o), advantage=a)
            for p, o, a in zip(prompts, outputs, (1.0, -1.0))]


def test_two_updates_on_a_fixed_batch_lower_the_loss(policy: Policy) -> None:
    samples = fixed_samples(policy)
    set_old_logprobs(policy, samples)
    assert all(s.old_logprobs is not None and len(s.old_logprobs) == len(s.completion_ids) for s in samples)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    first = grpo_update(policy, optimizer, samples, micro_batch=1)
    # ratio 1 on the first update: the loss is minus the token-weighted mean advantage
    n0, n1 = (len(s.completion_ids) for s in samples)
    assert first["ratio"] == pytest.approx(1.0, abs=1e-5)
    assert first["loss"] == pytest.approx(-(n0 - n1) / (n0 + n1), abs=1e-4)
    second = grpo_update(policy, optimizer, samples, micro_batch=2)
    assert second["loss"] < first["loss"] - 1e-4
    # the update moved probability towards the positive sample and away from the negative one
    with torch.no_grad():
        now = policy.logprobs(policy.batch([s.prompt_ids for s in samples], [s.completion_ids for s in samples]))
    assert now[0, :n0].sum() > sum(samples[0].old_logprobs or [])
    assert now[1, :n1].sum() < sum(samples[1].old_logprobs or [])


def test_a_single_update_takes_the_old_policy_from_its_own_forward(policy: Policy) -> None:
    samples = fixed_samples(policy)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    with pytest.raises(ValueError, match="set_old_logprobs"):
        grpo_update(policy, optimizer, samples)
    n0, n1 = (len(s.completion_ids) for s in samples)
    samples[0].old_logprobs = [0.0] * n0  # as a rollout backend reports them: a gap to the HF policy
    with torch.no_grad():
        before = policy.logprobs(policy.batch([s.prompt_ids for s in samples], [s.completion_ids for s in samples]))
    stats = grpo_update(policy, optimizer, samples, micro_batch=1, on_policy=True)
    # the old policy is the one before the step: ratio 1, and the samples now carry its log-probs
    assert stats["ratio"] == pytest.approx(1.0, abs=1e-5)
    assert stats["loss"] == pytest.approx(-(n0 - n1) / (n0 + n1), abs=1e-4)
    assert samples[0].old_logprobs == pytest.approx(before[0, :n0].tolist(), abs=1e-4)
    assert samples[1].old_logprobs == pytest.approx(before[1, :n1].tolist(), abs=1e-4)
    assert samples[0].meta["rollout_logprobs"] == [0.0] * n0
    assert stats["rollout_gap"] == pytest.approx(-sum(before[0, :n0].tolist()) / n0, abs=1e-4)
    # the step log's disagreement: the same mean, and the 95th percentile of the per-token gaps
    gaps = sorted(-x for x in before[0, :n0].tolist())
    mean, p95 = rollout_gap_stats(samples) or (None, None)
    assert mean == pytest.approx(stats["rollout_gap"], abs=1e-6)
    assert p95 == pytest.approx(gaps[math.ceil(0.95 * n0) - 1], abs=1e-4) and min(gaps) <= p95 <= max(gaps)
    assert rollout_gap_stats(samples[1:]) is None  # its rollout backend gave no log-probs


def test_loop_on_a_scripted_pool(tmp_path: Path, store: TraceStore) -> None:
    pool = Pool.from_models([ScriptedModel(by_seed, name="orch")])
    lines: list[str] = []
    settings = GRPOSettings(engine="loop", out=tmp_path / "out", limit=2, group=2, steps=2, strategy=OneDecision(),
                            lr=1e-3)
    result = train_grpo(Tasks(2), settings, pool=pool, store=store, progress=lines.append)
    assert [s.groups_kept for s in result.steps] == [2, 2]
    assert all(s.loss is not None and s.samples == 4 and s.mean_reward == 0.5 for s in result.steps)
    assert all(s.reward_sd == 0.5 and (s.trained, s.decisions) == (4, 4) for s in result.steps)  # rewards 1,0,1,0
    assert all(s.valid_rate == 1.0 and s.rollout_policy == "pool" for s in result.steps)
    assert any("as is" in n for n in result.notes)  # the scripted orchestrator cannot run the adapter
    # every rollout is an episode of the training run, and the run is marked finished
    assert store.query("SELECT status, kind FROM runs WHERE id = ?",
                       (result.run_id,)) == [{"status": "finished", "kind": "grpo"}]
    episodes = store.query("SELECT answer, meta FROM episodes WHERE run_id = ?", (result.run_id,))
    assert len(episodes) == 8
    for ep in episodes:  # scored like an eval episode, with its GRPO credit
        meta = json.loads(ep["meta"])
        assert meta["correct"] == (ep["answer"] == "4") and meta["score"] == float(meta["correct"])
        assert meta["grpo"]["reward"] == meta["score"] and meta["grpo"]["advantage"] == pytest.approx(
            1.0 if meta["correct"] else -1.0, abs=1e-4)
    out = tmp_path / "out"
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert result.gguf_path == out / "adapter.gguf" and result.gguf_path.is_file()
    log = json.loads((out / "train_log.json").read_text())
    assert [s["step"] for s in log["steps"]] == [1, 2] and log["run_id"] == result.run_id
    assert any(line.startswith("step 2: loss=") and "reward=0.500±0.500" in line and "decisions trained=4/4" in line
               for line in lines)


def test_a_step_with_equal_rewards_is_skipped(tmp_path: Path, store: TraceStore) -> None:
    always_right = ScriptedModel([json.dumps({"answer": "4"})], name="orch")
    result = train_grpo(Tasks(1), GRPOSettings(engine="loop", out=tmp_path / "out", group=2, steps=1,
                                               strategy=OneDecision()),
                        pool=Pool.from_models([always_right]), store=store)
    (entry,) = result.steps
    assert entry.groups == 1 and entry.groups_kept == 0 and entry.loss is None
    assert "equal rewards" in entry.note and (entry.trained, entry.decisions, entry.reward_sd) == (0, 2, 0.0)
    assert (tmp_path / "out" / "adapter_config.json").is_file()


def test_cli_grpo_on_a_jsonl_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrion import cli
    from orchestrion.train import grpo

    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is 2+2? ({i})",
                                        "answer": "4"}) + "\n" for i in range(2)))
    monkeypatch.setitem(strategy_base._REGISTRY, OneDecision.name, OneDecision)
    monkeypatch.setattr(grpo, "load_pool", lambda _p: Pool.from_models([ScriptedModel(by_seed, name="orch")]))
    out = tmp_path / "adapter"
    res = CliRunner().invoke(cli.app, ["train", "grpo", "--dataset", f"jsonl:{data}", "--limit", "1", "--group", "2",
                                       "--steps", "1", "--strategy", OneDecision.name, "--out", str(out),
                                       "--db", str(tmp_path / "t.db")])
    assert res.exit_code == 0, res.output
    assert f"adapter: {out}" in res.output and "step 1: loss=" in res.output
    assert (out / "adapter.gguf").is_file() and (out / "train_log.json").is_file()


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    from orchestrion import cli

    res = CliRunner().invoke(cli.app,
                             ["train", "grpo", "--dataset", "jsonl:/nope.jsonl", "--db", str(tmp_path / "t.db")])
    assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["trl", "loop"])
def test_grpo_on_the_embedded_model(tmp_path: Path, engine: str) -> None:
    """Two steps on the real model: base rollouts, then rollouts with the trained adapter in llama.cpp."""
    from orchestrion import cli

    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "a", "prompt": "What is 3 + 4?", "answer": "7"}) + "\n")
    # a short output-token budget in the reward, so that two episodes rarely tie
    rewards = tmp_path / "rewards.yaml"
    rewards.write_text("weights: {outcome: 1.0, efficiency_tokens: 1.0}\ntokens_target: 40\ntoken_measure: output\n")
    out = tmp_path / "adapter"
    res = CliRunner().invoke(cli.app, ["train", "grpo", "--dataset", f"jsonl:{data}", "--limit", "1", "--group", "2",
                                       "--steps", "2", "--set", "max_rounds=1", "--set", "max_calls=1",
                                       "--rewards", str(rewards), "--out", str(out), "--db", str(tmp_path / "t.db"),
                                       "--engine", engine])
    assert res.exit_code == 0, res.output
    log = json.loads((out / "train_log.json").read_text())
    assert log["engine"] == engine and [s["rollout_policy"] for s in log["steps"]] == ["base", "adapter"]
    assert all(s["episodes"] == 2 and s["valid_rate"] is not None for s in log["steps"])
    for step in log["steps"]:
        assert "tokenized here" not in step["note"]  # llama.cpp's recorded ids, never re-tokenized
        assert step["decisions"] >= 2  # decisions trained: some when the group's rewards differed, else none
        assert (0 < step["trained"] <= step["decisions"]) if step["groups_kept"] else step["trained"] == 0
        if engine == "trl":  # TRL updates every step (equal rewards: zero advantage); one sample per episode
            assert step["loss"] is not None and step["samples"] == 2
        elif step["groups_kept"]:  # the episodes' rewards differed: an update on llama.cpp's exact token ids
            assert step["loss"] is not None and step["samples"] > 0 and step["rollout_gap"] is not None
            assert step["rollout_gap_p95"] is not None  # the disagreement's tail, beside its mean
            assert step["rollout_gap"] < 0.5  # HF and llama.cpp agree on the log-probs of the same ids
    assert (out / "adapter.gguf").is_file()
    # the second step's decisions were made by the adapted orchestrator
    store = TraceStore(tmp_path / "t.db")
    models = {r["model"] for r in store.query("SELECT d.model FROM decisions d JOIN episodes e ON e.id = d.episode_id "
                                              "WHERE e.run_id = ?", (log["run_id"],))}
    assert any(m.endswith("+adapter") for m in models) and any(not m.endswith("+adapter") for m in models)


def test_trl_engine_resumes_after_an_interruption(tmp_path: Path, store: TraceStore) -> None:
    """GRPOTrainer(rollout_func=...) on a scripted pool: stop after step 1, rerun, it continues at step 2."""
    pool = Pool.from_models([ScriptedModel(by_seed, name="orch")])
    settings = GRPOSettings(out=tmp_path / "out", limit=2, group=2, steps=2, strategy=OneDecision(), lr=1e-3,
                            max_steps_now=1)
    lines: list[str] = []
    first = train_grpo(Tasks(2), settings, pool=pool, store=store, progress=lines.append)
    assert [s.step for s in first.steps] == [1] and first.steps[0].loss is not None
    assert first.steps[0].episodes == 4 and first.steps[0].groups_kept == 2 and first.steps[0].samples == 4
    assert "4 episodes tokenized here" in first.steps[0].note  # scripted models give no token ids
    assert store.query("SELECT status FROM runs WHERE id = ?", (first.run_id,)) == [{"status": "interrupted"}]
    assert any(f"training again into {tmp_path / 'out'} continues" in n for n in first.notes)
    assert (tmp_path / "out" / "checkpoints" / "checkpoint-1" / "optimizer.pt").is_file()

    settings.max_steps_now = None
    again = train_grpo(Tasks(2), settings, pool=pool, store=store, progress=lines.append)
    assert again.run_id == first.run_id and [s.step for s in again.steps] == [1, 2]
    assert any(line.startswith("resuming from") and "after step 1 of 2" in line for line in lines)
    episodes = store.query("SELECT meta FROM episodes WHERE run_id = ?", (first.run_id,))
    steps = sorted(json.loads(e["meta"])["grpo"]["step"] for e in episodes)
    assert steps == [1, 1, 1, 1, 2, 2, 2, 2]  # step 1 was not rolled out again
    assert store.query("SELECT status FROM runs WHERE id = ?", (first.run_id,)) == [{"status": "finished"}]
    log = json.loads((tmp_path / "out" / "train_log.json").read_text())
    assert log["engine"] == "trl" and [s["step"] for s in log["steps"]] == [1, 2]
    assert (tmp_path / "out" / "adapter.gguf").is_file()
