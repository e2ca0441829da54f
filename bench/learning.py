"""Does learning pay? A SmolLM2-135M orchestrator distilled from the local pool's 1.5B one, then RL.

The setting of the seeds at toy scale: the *teacher* is ``para`` with Qwen2.5-Coder-1.5B as its
orchestrator on the ``local`` pool; the *student* is the same strategy and the same workers with
SmolLM2-135M deciding, with no grammar and no schema added to its prompt (``structured: none``):
it sees the prompts the teacher saw, and its valid-action rate measures what it learned.
``--student-grammar`` (always on under ``--mixed``) decides under the action's JSON-schema
grammar instead, as a deployed student would (llama.cpp's grammar, vLLM's guided decoding): the
prompts are the same (a grammar adds no schema to them), its actions are valid by construction,
and the rows then measure what it decides rather than whether it writes JSON. Stages, each
recorded in ``OUT/state.json`` so that a rerun skips what is done and resumes an interrupted eval
run (a session that stops mid-way loses at most one stage):

1. ``teacher:T`` — the teacher on the *training* side (``@train``) of each training task;
2. ``export`` / ``sft`` — its successful decisions (``orchestrion train export``) and a LoRA on
   the student (``orchestrion train sft``);
3. ``grpo`` / ``opod`` — RL from the SFT adapter (``orchestrion train grpo``) and OPOD on the SFT
   student's own rollouts (``orchestrion train opod --hindsight``: the judge sees only episodes
   that lost points or overspent against ``direct`` on each model on the same examples, and what
   worked there), both on the mixture of every training task's ``@train`` side (one example of
   each in turn); a failing stage is reported, not fatal;
4. ``eval`` — every row below on the *held-out* side (``@test``) of each training task and on
   tasks never trained on, once per seed: the seed draws which held-out examples are used
   (decoding is greedy, so a seed that only changed sampling would change nothing).

Rows: the student before training, after SFT, GRPO and OPOD; the teacher; ``direct`` on each
pool model. Columns: accuracy (mean ± sd over seeds), valid-action rate (decision attempts
that parsed), orchestrator tokens and seconds per episode (decision spans only), and compute
units and dollars per episode (compute units: tokens / 1000 x each model's tier, plus the tools'
units; dollars: local models priced by CPU time). Verdicts, paired by seed: GRPO and OPOD
against SFT per task and on the held-out tasks together, and each trained student against the
teacher; a gain is an accuracy gain beyond the spread over seeds, or equal accuracy at 25% or more
fewer compute units. Writes ``OUT/learning.md``, ``OUT/learning.png`` and, once GRPO has run,
``OUT/grpo_curves.png`` (reward mean ± sd, valid-action rate and share of decisions trained per
step). GRPO runs with ``--engine loop`` (one sample per decision: every decision of an episode
is trained; TRL's engine packs decisions only while each prompt extends the last, which para's
rebuilt round prompts do not).

    .venv/bin/python bench/learning.py --quick     # one task, held out only, one seed, SFT only: <15 min
    .venv/bin/python bench/learning.py             # the default size (see SIZES)
    .venv/bin/python bench/learning.py --mixed     # four tasks whose right first decision differs
    .venv/bin/python bench/learning.py --seeds 1,2,3,4,5 --eval-limit 8 --out bench/out/learning-big
    .venv/bin/python bench/learning.py --train-tasks word_sorting --unseen-tasks object_counting --out ...
    .venv/bin/python bench/learning.py --table-only --fragment bench/out/learning/fragment.md

``--fragment PATH`` also writes the table to PATH, headed by the command, the commit, the date and
the machine (``bench/_fragment.py``), for ``docs/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _fragment import write_fragment

from orchestrion import EvalConfig, Pool, TraceStore, run_eval, summarize
from orchestrion.models.pool import PoolConfig
from orchestrion.models.presets import LOCAL_MODELS, preset_config
from orchestrion.status import RunStatus

STUDENT, TEACHER = "smollm2-135m", "qwen2.5-coder-1.5b"
SIZES: dict[str, dict[str, Any]] = {
    "quick": {"train": ["arithmetic/3_digit_multiplication"], "unseen": [],
              "train_limit": 5, "eval_limit": 2, "seeds": [1], "sft_steps": 24, "methods": ["sft"], "augment": 0.3},
    "default": {"train": ["arithmetic/3_digit_multiplication", "arithmetic/4_digit_addition"],
                "unseen": ["object_counting"], "train_limit": 8, "eval_limit": 3, "seeds": [1, 2, 3],
                "sft_steps": 60, "methods": ["sft", "grpo", "opod"], "augment": 0.3,
                "grpo": {"limit": 2, "group": 4, "steps": 2}, "opod": {"rollouts": 4, "steps": 2}},
    # issue 21: tasks whose right first decision differs (a tool decides products, a program the
    # orderings and dates, the strongest model alone the sports judgments). The student decides
    # under the action grammar (as a deployed one would, and vLLM's guided decoding on a GPU):
    # without it most of its attempts are invalid and RL has no choice to shape. GRPO rolls out one
    # example of each task per step (tasks_per_step 4 of the 8 drawn), ~10 minutes a step on 2 CPU
    # cores (a step's ~36 decisions of ~2,000 tokens are backpropagated on the CPU). It takes one
    # optimizer step per rollout step, so at the default lr (1e-4) four steps move the LoRA by ~4e-4
    # a weight, a fifteenth of what SFT's 30 steps at 2e-4 did; lr 5e-4 lets four steps count. The
    # untrained student's row is left out of the evaluation (the default size shows it: it almost
    # never writes a valid action). On a GPU, raise the steps.
    "mixed": {"train": ["arithmetic/3_digit_multiplication", "logical_deduction/three_objects",
                        "date_understanding", "sports_understanding"],
              "unseen": ["object_counting"], "train_limit": 6, "eval_limit": 2, "seeds": [1, 2, 3],
              "sft_steps": 30, "methods": ["sft", "grpo", "opod"], "augment": 0.3, "base_row": False,
              "student_grammar": True,
              "grpo": {"limit": 8, "group": 4, "steps": 4, "tasks_per_step": 4, "lr": 5e-4,
                       "rewards": "rewards_delegation.yaml"},
              "opod": {"rollouts": 8, "steps": 2}},
}
# max_invalid_rounds 1: a round without a valid action ends the orchestration (the synthesizer then
# answers alone), so an untrained student costs one round of failed attempts, not three
OPTIONS: dict[str, Any] = {"max_rounds": 3, "max_invalid_rounds": 1}
BUDGET = {"wall_s": 300}  # one stuck episode cannot eat the run; it is recorded as budget_exceeded


class Bench:
    def __init__(self, out: Path, size: dict[str, Any]) -> None:
        self.out, self.size = out, size
        self._clock: float | None = None  # set while this invocation runs: its time is counted at each save
        out.mkdir(parents=True, exist_ok=True)
        self.state_path = out / "state.json"
        self.state: dict[str, Any] = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {}
        self.db = out / "traces.db"
        self.store = TraceStore(self.db)
        self._metrics: dict[str, dict[str, float | None]] = {}

    def metrics(self, run_id: str) -> dict[str, float | None]:
        """:func:`run_metrics` of a run, read once: the table and the verdicts both use it."""
        cached = self._metrics.get(run_id)
        if cached is None or not cached["n"]:  # a run still under way is read again
            cached = self._metrics[run_id] = run_metrics(self.store, run_id)
        return cached

    def start_clock(self) -> None:
        """Count this invocation, and its time from now on, into the state's ``wall_s``."""
        self.state["invocations"] = self.state.get("invocations", 0) + 1
        self._clock = time.perf_counter()
        self.save()

    def save(self) -> None:
        # the time since the last save joins wall_s at every save (each eval run's start and end,
        # each stage), so a stop of any kind, kill -9 included, loses only the time since the last
        if self._clock is not None:
            now = time.perf_counter()
            self.state["wall_s"] = self.state.get("wall_s", 0.0) + now - self._clock
            self._clock = now
        self.state_path.write_text(json.dumps(self.state, indent=1))

    def log(self, line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    # -- pools ------------------------------------------------------------------------------
    def student_pool_file(self) -> Path:
        """The local pool with the student deciding: grammar off and no schema in its prompt, or
        (``student_grammar``) under the preset's grammar, which adds no schema to the prompt either."""
        path = self.out / "student_pool.yaml"
        config = preset_config("local")
        unconstrained = not self.size.get("student_grammar", False)
        models = [dict(m, structured="none") if m["name"] == STUDENT and unconstrained else m
                  for m in config["models"]]  # type: ignore[attr-defined]
        path.write_text(yaml.safe_dump({**config, "models": models, "orchestrator": STUDENT}))
        return path

    def pool(self, row: str) -> Pool:
        if row == "teacher":
            return Pool.preset("local")
        if row.startswith("direct:"):
            spec = next(m for m in Pool.preset("local").config.models if m.name == row[7:])
            return Pool(PoolConfig(models=[spec]), source=f"preset 'local', {spec.name} alone")
        pool = Pool.from_yaml(self.student_pool_file())
        adapter = self.state.get(f"adapter:{row.split(':', 1)[1]}") if ":" in row else None
        return pool.with_orchestrator_adapter(adapter) if adapter else pool

    # -- stages -----------------------------------------------------------------------------
    async def eval_run(self, key: str, dataset: str, strategy: str, row: str, limit: int, seed: int) -> str:
        """One eval run, resumed if it was started before; returns its run id."""
        from orchestrion.eval.runner import Observer

        config = EvalConfig(dataset=dataset, strategies=[strategy], limit=limit, seed=seed,
                            options=OPTIONS if strategy == "para" else {}, budget=BUDGET, concurrency=1)
        run_id = self.state.get(key)
        if run_id is not None:
            if self.store.runs_matching(run_id)[0].status == RunStatus.FINISHED:
                return str(run_id)
            self.log(f"{key}: resuming run {run_id}")
            return (await run_eval(config, self.store, resume=run_id, pool=lambda: self.pool(row))).run_id

        bench = self

        class Remember(Observer):
            def started(self, run_id: str, tally: Any, resumed: bool) -> None:
                bench.state[key] = run_id
                bench.save()
                bench.log(f"{key}: run {run_id} ({tally.total} episodes)")

        started = time.perf_counter()
        result = await run_eval(config, self.store, pool=lambda: self.pool(row), observer=Remember())
        self.save()  # counts its time
        self.log(f"{key}: done in {time.perf_counter() - started:.0f}s")
        return result.run_id

    def cli(self, key: str, args: list[str]) -> bool:
        """One ``orchestrion`` command, once; False (and the reason kept) when it fails."""
        if self.state.get(key) == "done":
            return True
        self.log(f"{key}: orchestrion {' '.join(args)}")
        exe = Path(sys.executable).with_name("orchestrion")
        log = self.out / (key.replace(':', '_').replace('/', '_') + '.log')
        self.log(f"{key}: its output goes to {log} as it runs")
        with log.open("w") as sink:  # written as it runs, so a long stage can be followed with tail -f
            proc = subprocess.run([str(exe), *args], stdout=sink, stderr=subprocess.STDOUT, text=True,
                                  env={**os.environ, "ORCHESTRION_DB": str(self.db)})
        if proc.returncode != 0:
            reason = (log.read_text().strip().splitlines() or ["exit " + str(proc.returncode)])[-1]
            self.state[f"failed:{key}"] = reason
            self.save()
            self.log(f"{key}: failed: {reason}")
            return False
        self.state[key] = "done"
        self.state.pop(f"failed:{key}", None)
        self.save()
        return True

    async def teach_and_train(self) -> None:
        data = self.out / "sft_data"
        for task in self.size["train"]:
            await self.eval_run(f"teacher:{task}", f"bigbench:{task}@train", "para", "teacher",
                                self.size["train_limit"], 7)
        if not (data / "train.jsonl").is_file():
            self.state["export_augment"] = self.size["augment"]  # saved with the first export's state
            parts = []
            for task in self.size["train"]:
                part = self.out / f"export_{task.replace('/', '_')}"
                if self.cli(f"export:{task}", ["train", "export", "--run", self.state[f"teacher:{task}"],
                                                "--out", str(part), "--augment", str(self.size["augment"])]):
                    parts.append(part / "train.jsonl")
            data.mkdir(exist_ok=True)
            (data / "train.jsonl").write_text("".join(p.read_text() for p in parts if p.is_file()))
        rows = sum(1 for _ in (data / "train.jsonl").open())
        self.log(f"sft data: {rows} decisions")
        methods = self.size["methods"]
        # --max-length 2048, as GRPO and OPOD: a para decision on a multiple-choice task is ~1,000-1,250
        # tokens, and SFT's default (1024) would leave most of them out
        if "sft" in methods and self.cli("sft", ["train", "sft", "--data", str(data), "--out", str(self.out / "sft"),
                                                 "--steps", str(self.size["sft_steps"]), "--max-length", "2048"]):
            self.state["adapter:sft"] = str(self.out / "sft")
        sft = self.state.get("adapter:sft")
        mixture = "+".join(f"bigbench:{t}@train" for t in self.size["train"])  # RL draws from every task in turn
        if sft and "grpo" in methods:
            g = {"limit": 3, "group": 4, "steps": 3, "rewards": "rewards.yaml", **self.size.get("grpo", {})}
            # ParaManager's mix by default; --mixed drops diversity and weighs compute units more
            rewards = Path(__file__).resolve().parent.parent / "examples" / g["rewards"]
            # --engine loop: one sample per decision. TRL's engine packs an episode's decisions into one
            # completion only while each prompt extends the last; para rebuilds its prompt every round,
            # so there it would train the first decision alone
            if self.cli("grpo", ["train", "grpo", "--engine", "loop", "--dataset", mixture, "--limit", str(g["limit"]),
                                 "--group", str(g["group"]), "--steps", str(g["steps"]),
                                 *(a for k in ("tasks_per_step", "updates", "lr") if k in g
                                   for a in ("--" + k.replace("_", "-"), str(g[k]))),
                                 "--pool", str(self.student_pool_file()), "--adapter", sft,
                                 "--out", str(self.out / "grpo-sampled"), "--set", "max_rounds=3",
                                 "--set", "max_invalid_rounds=1", "--rewards", str(rewards)]):
                self.state["adapter:grpo"] = str(self.out / "grpo-sampled")
        if sft and "opod" in methods:
            o = {"rollouts": 6, "steps": 4, **self.size.get("opod", {})}
            run = await self.eval_run("student-rollouts", mixture, "para", "student:sft",
                                      o["rollouts"], 11)
            for name in LOCAL_MODELS:  # the hindsight: each model alone on the same examples, scored
                await self.eval_run(f"evidence:{name}", mixture, "direct", f"direct:{name}", o["rollouts"], 11)
            if self.cli("opod", ["train", "opod", "--run", run, "--adapter", sft, "--steps", str(o["steps"]),
                                 "--hindsight",
                                 "--pool", str(self.student_pool_file()), "--out", str(self.out / "opod")]):
                self.state["adapter:opod"] = str(self.out / "opod")
        self.save()

    def rows(self) -> list[tuple[str, str]]:
        """(row key, strategy) in table order; trained rows only where training succeeded."""
        out = [("student:base", "para")] if self.size.get("base_row", True) else []
        out += [(f"student:{m}", "para") for m in self.size["methods"] if self.state.get(f"adapter:{m}")]
        out.append(("teacher", "para"))
        out += [(f"direct:{name}", "direct") for name in LOCAL_MODELS]
        return out

    def datasets(self) -> list[tuple[str, str]]:
        return ([(f"bigbench:{t}@test", "held-out") for t in self.size["train"]]
                + [(f"bigbench:{t}@test", "unseen task") for t in self.size["unseen"]])

    async def evaluate(self) -> None:
        for seed in self.size["seeds"]:
            for dataset, _ in self.datasets():
                for row, strategy in self.rows():
                    await self.eval_run(f"eval:{row}:{dataset}:{seed}", dataset, strategy, row,
                                        self.size["eval_limit"], seed)


# -- the table -----------------------------------------------------------------------------
def run_metrics(store: TraceStore, run_id: str) -> dict[str, float | None]:
    """Accuracy, valid-action rate, orchestrator tokens and seconds per episode, cost per episode."""
    summaries = summarize(store, run_id)
    if not summaries:  # started, nothing finished yet
        return {"accuracy": None, "valid": None, "orch_tokens": None, "orch_s": None, "wall_s": None,
                "cost": None, "units": None, "n": 0.0}
    summary = summaries[0]
    episodes = store.counted_episodes(run_id)  # as accuracy counts them: one cut short by a stop and rerun counts once
    ids = [e.id for e in episodes]
    valid = store.decision_validity(ids)
    tokens = seconds = 0.0
    for eid in ids:
        for span in store.spans(eid, kinds=("decision",), attrs=False):
            tokens += span.input_tokens + span.output_tokens
            seconds += (span.ended or span.started) - span.started
    n = max(1, len(ids))
    return {"accuracy": summary.accuracy, "valid": sum(valid) / len(valid) if valid else None,
            "orch_tokens": tokens / n, "orch_s": seconds / n, "wall_s": summary.mean_wall_s,
            "cost": None if summary.cost_usd is None else summary.cost_usd / n,
            "units": summary.cost_units / n, "n": float(len(ids))}


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {sd:.2f}"


def _mean(values: list[float | None], fmt: str) -> str:
    kept = [v for v in values if v is not None]
    return format(statistics.mean(kept), fmt) if kept else "-"


def table(bench: Bench) -> tuple[str, dict[str, dict[str, list[float]]]]:
    teacher_eps = len([t for t in bench.size["train"] if bench.state.get(f"teacher:{t}")])
    lines = [f"teacher runs on the @train side of {teacher_eps} task(s), {bench.size['train_limit']} episodes each; "
             f"SFT {bench.size['sft_steps']} steps, --augment {bench.state.get('export_augment', '?')}; "
             f"seeds {bench.size['seeds']}, {bench.size['eval_limit']} held-out examples per task and seed; "
             + ("the student decides under a JSON-schema grammar; " if bench.size.get("student_grammar") else "")
             + "".join(f"GRPO went on from {e['from']} to {e['to']} steps after minute {e['at_minute']}; "
                       for e in bench.state.get("grpo_extended", []))
             + "".join(f"{', '.join(e['methods'])} added after minute {e['at_minute']}; "
                       for e in bench.state.get("methods_added", []))
             + "accuracy is the mean ± sd over seeds of each seed's mean over tasks; "
             f"run time {bench.state.get('wall_s', 0.0) / 60:.0f} min in {bench.state.get('invocations', 0)} "
             "invocation(s)\n"]
    curves: dict[str, dict[str, list[float]]] = {}
    for group in ("held-out", "unseen task"):
        sets = [d for d, g in bench.datasets() if g == group]
        if not sets:
            continue
        lines += [f"\n**{group}** ({', '.join(d.split(':', 1)[1] for d in sets)})\n",
                  "| row | accuracy (mean ± sd over seeds) | valid actions | orchestrator tokens/ep "
                  "| orchestrator s/ep | s/ep | compute units/ep | $/ep (compute) | episodes |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row, _ in bench.rows():
            per_seed, metrics = [], []
            for seed in bench.size["seeds"]:
                runs = [bench.state.get(f"eval:{row}:{d}:{seed}") for d in sets]
                if not all(runs):
                    continue
                ms = [bench.metrics(str(r)) for r in runs]
                if not all(m["n"] for m in ms):  # a run still under way: the seed is not counted yet
                    continue
                per_seed.append(statistics.mean(float(m["accuracy"] or 0.0) for m in ms))
                metrics += ms
            curves.setdefault(group, {})[row] = per_seed
            if not metrics:
                lines.append(f"| {row} | not run | | | | | | | |")
                continue
            direct = row.startswith("direct:")
            lines.append(
                f"| {row} | {_mean_sd(per_seed)} | {'-' if direct else _mean([m['valid'] for m in metrics], '.3f')} "
                f"| {'-' if direct else _mean([m['orch_tokens'] for m in metrics], '.0f')} "
                f"| {'-' if direct else _mean([m['orch_s'] for m in metrics], '.1f')} "
                f"| {_mean([m['wall_s'] for m in metrics], '.1f')} | {_mean([m['units'] for m in metrics], '.1f')} "
                f"| {_mean([m['cost'] for m in metrics], '.6f')} "
                f"| {int(sum(float(m['n'] or 0) for m in metrics))} |")
    lines += verdicts(bench)
    lines += grpo_steps(bench.out / "grpo-sampled" / "train_log.json")
    lines += opod_hints(bench.out / "opod" / "train_log.json")
    failed = {k: v for k, v in bench.state.items() if k.startswith("failed:")}
    if failed:
        lines.append("\nStages that failed: " + "; ".join(f"`{k[7:]}`: {v}" for k, v in failed.items()))
    return "\n".join(lines), curves


def grpo_steps(log_path: Path) -> list[str]:
    """GRPO's steps from its train log: groups kept, reward mean ± sd, valid rate, decisions trained,
    and how far the sampler (llama.cpp, GGUF) and the learner (transformers) disagree on the
    sampled tokens' log-probs: mean / 95th percentile of the per-token gap."""
    if not log_path.is_file():
        return []
    steps = json.loads(log_path.read_text()).get("steps", [])
    lines = ["\n**GRPO's steps** (reward: mean ± sd over the step's episodes; a group is kept when its "
             "rewards differ; sampler gap: mean / p95 of |log p| sampler - learner per token)\n",
             "| step | episodes | groups kept | reward | valid actions | decisions trained | loss | sampler gap | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in steps:
        valid = "-" if s.get("valid_rate") is None else f"{s['valid_rate']:.3f}"
        loss = "-" if s.get("loss") is None else f"{s['loss']:.4f}"
        gap = "-" if s.get("rollout_gap") is None else f"{s['rollout_gap']:.3f}"
        if s.get("rollout_gap_p95") is not None:
            gap += f" / {s['rollout_gap_p95']:.3f}"
        lines.append(f"| {s['step']} | {s['episodes']} | {s['groups_kept']}/{s['groups']} "
                     f"| {s['mean_reward']:.3f} ± {s.get('reward_sd', 0.0):.3f} | {valid} "
                     f"| {s.get('trained', 0)}/{s.get('decisions', 0)} | {loss} | {gap} | {s.get('wall_s', 0.0):.0f} |")
    return lines


def opod_hints(log_path: Path, shown: int = 8) -> list[str]:
    """What OPOD's judge flagged, and the first ``shown`` hints it gave, from its train log."""
    if not log_path.is_file():
        return []
    log = json.loads(log_path.read_text())
    hints = log.get("hints", [])
    lines = [f"\n**OPOD's judge** judged {log.get('judged', 0)} decisions and flagged {log.get('flagged', 0)} "
             f"({log.get('judge_errors', 0)} unreadable judgments); its hints:\n"]
    lines += [f"- {h['hint']}" + (f" (hindsight: {h['hindsight']})" if h.get("hindsight") else "")
              for h in hints[:shown]]
    if len(hints) > shown:
        lines.append(f"- ... and {len(hints) - shown} more in {log_path}")
    return lines


def task_accuracy(bench: Bench, row: str, dataset: str) -> dict[int, float]:
    """Accuracy of one row on one dataset, per seed that has a run."""
    return seed_metric(bench, row, [dataset], "accuracy")


def seed_metric(bench: Bench, row: str, datasets: list[str], key: str) -> dict[int, float]:
    """Per seed that has a finished run on every one of ``datasets``: the mean of metric ``key``
    over them (accuracy, units, orch_s ...)."""
    out = {}
    for seed in bench.size["seeds"]:
        runs = [bench.state.get(f"eval:{row}:{d}:{seed}") for d in datasets]
        metrics = [bench.metrics(str(r)) for r in runs if r]
        if len(metrics) == len(datasets) and all(m["n"] for m in metrics):
            out[seed] = statistics.mean(float(m[key] or 0.0) for m in metrics)
    return out


def compare(bench: Bench, row: str, base_row: str, datasets: list[str]) -> str | None:
    """``row`` against ``base_row`` on ``datasets``, paired by seed: the accuracy difference (mean ±
    sd over seeds), the compute-unit and orchestrator-time ratios, and the verdict. A gain is an
    accuracy gain beyond the spread (mean > sd and > 0), or equal accuracy (mean >= -sd) at 25% or
    more fewer compute units."""
    acc, base = seed_metric(bench, row, datasets, "accuracy"), seed_metric(bench, base_row, datasets, "accuracy")
    seeds = sorted(set(acc) & set(base))
    if not seeds:
        return None
    diffs = [acc[k] - base[k] for k in seeds]
    mean, sd = statistics.mean(diffs), statistics.stdev(diffs) if len(diffs) > 1 else 0.0

    def ratio(key: str) -> float | None:
        mine, theirs = seed_metric(bench, row, datasets, key), seed_metric(bench, base_row, datasets, key)
        num, den = sum(mine.get(k, 0.0) for k in seeds), sum(theirs.get(k, 0.0) for k in seeds)
        return num / den if den > 0 else None

    units, orch = ratio("units"), ratio("orch_s")
    if len(diffs) < 2:
        verdict = "one seed, no spread to judge it by"
    elif mean > 0 and mean > sd:
        verdict = "a gain beyond the spread"
    elif mean >= -sd and units is not None and units <= 0.75:
        verdict = f"a gain: equal accuracy at {1 - units:.0%} fewer compute units"
    elif mean < -sd:
        verdict = "a loss beyond the spread"
    else:
        verdict = "no gain beyond the spread"
    cost = "" if units is None else f", compute units x{units:.2f}"
    cost += "" if orch is None else f", orchestrator time x{orch:.2f}"
    return f"{mean:+.2f} ± {sd:.2f} over {len(diffs)} seed(s){cost}: {verdict}"


def verdicts(bench: Bench) -> list[str]:
    """GRPO and OPOD against SFT (per task, and on the held-out set as a whole), and each trained
    student against the teacher, all paired by seed (see :func:`compare`)."""
    lines = ["\n**Gain over SFT** (paired by seed: method - SFT on the same examples, mean ± sd over seeds; "
             "a gain = mean > sd and > 0, or mean >= -sd at >= 25% fewer compute units)\n"]
    held_out = [d for d, g in bench.datasets() if g == "held-out"]
    for method in ("grpo", "opod"):
        if not bench.state.get(f"adapter:{method}"):
            lines.append(f"- {method.upper()}: not trained")
            continue
        if len(held_out) > 1 and (line := compare(bench, f"student:{method}", "student:sft", held_out)):
            lines.append(f"- {method.upper()} on the held-out set ({len(held_out)} tasks): {line}")
        for dataset, group in bench.datasets():
            if line := compare(bench, f"student:{method}", "student:sft", [dataset]):
                lines.append(f"- {method.upper()} on {dataset.split(':', 1)[1]} ({group}): {line}")
    lines.append("\n**Student against the teacher** (the 1.5B orchestrator; same pairing and rule)\n")
    for method in bench.size["methods"]:
        if not bench.state.get(f"adapter:{method}"):
            continue
        for group in ("held-out", "unseen task"):
            sets = [d for d, g in bench.datasets() if g == group]
            if sets and (line := compare(bench, f"student:{method}", "teacher", sets)):
                lines.append(f"- student after {method.upper()}, {group} ({len(sets)} task(s)): {line}")
    return lines


def _figure() -> tuple[Any, Any]:
    """A headless matplotlib figure and its axes, the size of every plot here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7, 4.2))


def _save(fig: Any, ax: Any, path: Path) -> None:
    """Legend, grid and layout, then the PNG; the figure is closed."""
    import matplotlib.pyplot as plt

    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot(curves: dict[str, dict[str, list[float]]], path: Path) -> None:
    fig, ax = _figure()
    for group, rows in curves.items():
        stages = [r for r in rows if r.startswith("student:") and rows[r]]
        xs = list(range(len(stages)))
        ys = [statistics.mean(rows[s]) for s in stages]
        sds = [statistics.stdev(rows[s]) if len(rows[s]) > 1 else 0.0 for s in stages]
        line = ax.errorbar(xs, ys, yerr=sds, marker="o", capsize=3, label=f"student, {group}")
        if rows.get("teacher"):
            ax.axhline(statistics.mean(rows["teacher"]), linestyle="--", color=line[0].get_color(),
                       label=f"teacher (1.5B), {group}")
        ax.set_xticks(xs, [s.split(":", 1)[1] for s in stages])
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("accuracy")
    ax.set_xlabel("student orchestrator (SmolLM2-135M) after each stage")
    ax.set_title("Learning curve: student vs teacher orchestrator on the local pool")
    _save(fig, ax, path)


def plot_rl(log_path: Path, path: Path) -> bool:
    """GRPO's reward (mean ± sd over the step's episodes), valid-action rate and share of decisions
    trained, per step, from its train log; False when there is no log yet."""
    if not log_path.is_file():
        return False
    steps = json.loads(log_path.read_text()).get("steps", [])
    xs = [s["step"] for s in steps]
    fig, ax = _figure()
    ax.errorbar(xs, [s["mean_reward"] for s in steps], yerr=[s.get("reward_sd", 0.0) for s in steps], marker="o",
                capsize=3, label="reward (mean ± sd)")
    ax.plot(xs, [s["valid_rate"] if s["valid_rate"] is not None else float("nan") for s in steps], marker="s",
            label="valid actions")
    ax.plot(xs, [s.get("trained", 0) / s["decisions"] if s.get("decisions") else float("nan") for s in steps],
            marker="^", label="share of decisions trained")
    ax.set_xlabel("GRPO step")
    ax.set_title("GRPO on the student orchestrator")
    _save(fig, ax, path)
    return True


def extend_grpo(bench: Bench, size: dict[str, Any]) -> bool:
    """Take ``size`` when it differs from the recorded one only by more GRPO steps: GRPO then resumes
    from its checkpoint (``--engine loop`` keeps one per step) and its adapter's rows are evaluated
    again; the raise is kept in the state's ``grpo_extended``. False for any other difference."""
    recorded = bench.state["size"]
    old, new = recorded.get("grpo", {}), size.get("grpo", {})
    same_but_steps = _same_but(recorded, size, "grpo") and _same_but(old, new, "steps")
    if not same_but_steps or new.get("steps", 0) <= old.get("steps", 0):
        return False
    for key in [k for k in bench.state if k in ("grpo", "adapter:grpo") or k.startswith("eval:student:grpo:")]:
        del bench.state[key]
    bench.state.setdefault("grpo_extended", []).append({"from": old.get("steps"), "to": new["steps"],
                                                        "at_minute": round(bench.state.get("wall_s", 0.0) / 60)})
    bench.state["size"] = bench.size = size
    bench.log(f"GRPO goes on from step {old.get('steps')} to {new['steps']}; its rows are evaluated again")
    return True


def _same_but(a: dict[str, Any], b: dict[str, Any], key: str) -> bool:
    """Whether two sizes (or two of their sub-dicts) are equal apart from ``key``."""
    return {k: v for k, v in a.items() if k != key} == {k: v for k, v in b.items() if k != key}


def add_methods(bench: Bench, size: dict[str, Any]) -> bool:
    """Take ``size`` when it differs from the recorded one only by more methods (a run made with
    ``--methods sft,grpo``, then the same command without it): the new methods' stages run and
    their rows join the evaluation; nothing recorded is dropped. The addition is kept in the
    state's ``methods_added``. False for any other difference."""
    recorded = bench.state["size"]
    old, new = list(recorded.get("methods", [])), list(size.get("methods", []))
    if not _same_but(recorded, size, "methods") or not set(old) < set(new):
        return False
    added = [m for m in new if m not in old]
    bench.state.setdefault("methods_added", []).append(
        {"methods": added, "at_minute": round(bench.state.get("wall_s", 0.0) / 60)})
    bench.state["size"] = bench.size = size
    bench.log(f"adding {', '.join(added)} to the recorded run (methods {', '.join(old)}); what is done is kept")
    return True


def _interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one task, held out only, one seed, SFT only (<15 min here)")
    ap.add_argument("--mixed", action="store_true", help="four training tasks whose right first decision differs "
                                                         "(issue 21), object_counting unseen")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default bench/out/learning[-quick])")
    ap.add_argument("--seeds", help="comma-separated held-out sampling seeds")
    ap.add_argument("--eval-limit", type=int, help="held-out examples per task and seed")
    ap.add_argument("--train-limit", type=int, help="teacher episodes per training task")
    ap.add_argument("--methods", help="comma-separated subset of sft,grpo,opod")
    ap.add_argument("--train-tasks", help="comma-separated BIG-bench tasks the teacher runs on (their @train side)")
    ap.add_argument("--unseen-tasks", help="comma-separated BIG-bench tasks never trained on")
    ap.add_argument("--sft-steps", type=int, help="LoRA steps of SFT")
    ap.add_argument("--student-grammar", action="store_true",
                    help="the student decides under the action's JSON-schema grammar (valid by construction; "
                         "--mixed always does)")
    ap.add_argument("--grpo-steps", type=int,
                    help="GRPO steps; on a finished run of the same size, more steps than it has continue its "
                         "GRPO from the checkpoint and evaluate the new adapter again")
    ap.add_argument("--table-only", action="store_true", help="print the table from what is recorded")
    ap.add_argument("--fragment", type=Path, default=None, metavar="PATH",
                    help="also write the table to PATH (markdown), headed by the command, commit, date and machine")
    args = ap.parse_args()
    if args.quick and args.mixed:
        sys.exit("error: --quick and --mixed are two sizes; choose one")
    name = "quick" if args.quick else "mixed" if args.mixed else "default"
    size = dict(SIZES[name])
    if args.seeds:
        size["seeds"] = [int(s) for s in args.seeds.split(",")]
    for key in ("eval_limit", "train_limit"):
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)
    if args.methods:
        size["methods"] = args.methods.split(",")
    if args.train_tasks:
        size["train"] = args.train_tasks.split(",")
    if args.unseen_tasks:
        size["unseen"] = args.unseen_tasks.split(",")
    if args.sft_steps:
        size["sft_steps"] = args.sft_steps
    if args.student_grammar:
        size["student_grammar"] = True
    if args.grpo_steps is not None:
        if args.grpo_steps < 1:
            sys.exit(f"error: --grpo-steps must be at least 1, not {args.grpo_steps}")
        size["grpo"] = {**size.get("grpo", {}), "steps": args.grpo_steps}
    out = args.out or Path("bench/out") / ("learning" if name == "default" else f"learning-{name}")
    if args.table_only and not (out / "state.json").is_file():
        sys.exit(f"error: nothing recorded in {out} (no state.json): run without --table-only first, "
                 "or pass the --out of an earlier run")
    bench = Bench(out, size)
    recorded = bench.state.setdefault("size", size)
    if recorded != size and not args.table_only and (extend_grpo(bench, size) or add_methods(bench, size)):
        recorded = size
    if recorded != size:  # a resumed run keeps its size; the state's keys mean nothing under another one
        if args.table_only or not any(getattr(args, k) for k in ("seeds", "eval_limit", "train_limit", "methods",
                                                                 "train_tasks", "unseen_tasks", "sft_steps",
                                                                 "student_grammar", "grpo_steps")):
            bench.size = recorded
        else:
            sys.exit(f"error: {out} holds a run of another size ({out / 'state.json'}, key 'size'); "
                     "rerun without size flags to resume it, or pass --out NEW_FOLDER")
    bench.save()
    if not args.table_only:
        # a stop by SIGTERM, or SIGINT in a background job (where the shell ignores it), still counts
        # this invocation's time in the state before the process ends
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        bench.start_clock()  # the run's time, summed over resumed invocations, for the table's header
        try:
            await bench.teach_and_train()
            await bench.evaluate()
        finally:
            bench.save()
    text, curves = table(bench)
    (out / "learning.md").write_text(text + "\n")
    plot(curves, out / "learning.png")
    if plot_rl(out / "grpo-sampled" / "train_log.json", out / "grpo_curves.png"):
        print(f"(GRPO curves: {out / 'grpo_curves.png'})", file=sys.stderr)
    print(text)
    print(f"\n(written to {out / 'learning.md'} and {out / 'learning.png'})", file=sys.stderr)
    if args.fragment is not None:
        write_fragment(args.fragment, text)
        print(f"(fragment written to {args.fragment})", file=sys.stderr)
    bench.store.close()


if __name__ == "__main__":
    asyncio.run(main())
