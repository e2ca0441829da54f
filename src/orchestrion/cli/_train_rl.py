"""`orchestrion train grpo` and `orchestrion train opod`: policy training of the orchestrator.

The trainers (and torch) are imported inside the commands, so the CLI starts fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..train.hf import require_training_extra
from ._common import DbOpt, PoolOpt, err, friendly, out, parse_settings

AdapterOpt = Annotated[Path | None, typer.Option(
    "--adapter", help="PEFT adapter dir to start from (e.g. from `train sft`); default: a fresh LoRA")]
LrOpt = Annotated[float, typer.Option("--lr", min=0.0, help="learning rate (AdamW)")]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed of the LoRA init and of the rollouts")]
LoraROpt = Annotated[int, typer.Option("--lora-r", min=1, help="LoRA rank of a fresh adapter")]
StopOpt = Annotated[int | None, typer.Option(
    "--stop-after", min=1, help="stop after N steps in this call; a rerun with the same --out continues")]


def _print(line: str) -> None:
    err.print(line, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add ``grpo`` and ``opod`` to the ``train`` app."""

    @app.command("grpo")
    @friendly
    def grpo(
        dataset: Annotated[str, typer.Option(
            "--dataset", help="tasks: bigbench:TASK or TASK/SUBTASK, humaneval, jsonl:PATH")],
        limit: Annotated[int | None, typer.Option("--limit", min=1, help="first N tasks")] = 4,
        group: Annotated[int, typer.Option("--group", min=2, help="episodes per task per step (G)")] = 4,
        steps: Annotated[int, typer.Option("--steps", min=1, help="rollout + update rounds")] = 2,
        strategy: Annotated[str, typer.Option(
            "--strategy", "-s", help="strategy whose orchestrator is trained")] = "para",
        pool: PoolOpt = None,
        adapter: AdapterOpt = None,
        out_dir: Annotated[Path, typer.Option(
            "--out", help="where the adapter, adapter.gguf, train_log.json and the resume checkpoints go; "
                          "rerun with the same --out to continue an interrupted run")] = Path("grpo-adapter"),
        lr: LrOpt = 1e-4,
        clip: Annotated[float, typer.Option("--clip", min=0.0, help="PPO/GRPO ratio clip epsilon")] = 0.2,
        kl_beta: Annotated[float, typer.Option(
            "--kl-beta", min=0.0, help="weight of the KL to the starting policy")] = 0.0,
        rewards: Annotated[Path | None, typer.Option(
            "--rewards", help="reward config YAML (see examples/rewards.yaml); default: the score")] = None,
        seed: SeedOpt = 0,
        db: DbOpt = None,
        settings: Annotated[list[str], typer.Option("--set", help="strategy option KEY=VALUE (repeatable)")] = [],  # noqa: B006
        updates: Annotated[int, typer.Option("--updates", min=1, help="optimizer steps per batch of rollouts")] = 1,
        micro_batch: Annotated[int, typer.Option("--micro-batch", min=1, help="decisions per forward pass")] = 2,
        concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="episodes at once")] = 1,
        max_length: Annotated[int, typer.Option(
            "--max-length", min=16, help="longest decision (prompt + output tokens) trained on")] = 2048,
        lora_r: LoraROpt = 8,
        engine: Annotated[str, typer.Option(
            "--engine", help="trl: TRL's GRPOTrainer with an Orchestrion rollout_func, one sample per episode "
                             "(scales with accelerate); loop: the hand-written loop, one sample per decision")] = "trl",
        tasks_per_step: Annotated[int, typer.Option(
            "--tasks-per-step", min=0, help="tasks rolled out per step (0: all of them)")] = 0,
        stop_after: StopOpt = None,
    ) -> None:
        """GRPO: sample groups of episodes with the current policy, train on group-normalised rewards.

        Rerun with the same --out to continue an interrupted run from its last saved step. On GPUs:
        `accelerate launch -m orchestrion train grpo ...` (engine trl).
        """
        require_training_extra()
        from ..trace.store import TraceStore
        from ..train.grpo import train_grpo
        from ..train.settings import GRPOSettings

        config = GRPOSettings.build(
            engine=engine, out=out_dir, limit=limit, group=group, steps=steps, tasks_per_step=tasks_per_step,
            strategy=strategy, adapter=adapter, lr=lr, clip=clip, kl_beta=kl_beta, rewards=rewards, seed=seed,
            options=parse_settings(settings), updates=updates, micro_batch=micro_batch, concurrency=concurrency,
            max_length=max_length, lora_r=lora_r, lora_alpha=2 * lora_r, max_steps_now=stop_after)
        result = train_grpo(dataset, config, pool=pool, store=TraceStore(db), progress=_print, bar=True)
        updated = sum(1 for s in result.steps if s.loss is not None and s.groups_kept)
        out.print(f"adapter: {result.adapter_dir}", highlight=False)
        if result.gguf_path is not None:
            out.print(f"llama.cpp adapter: {result.gguf_path}", highlight=False)
        _print(f"run {result.run_id}: {len(result.steps)} steps, {updated} with an update;"
               f" log in {result.adapter_dir / 'train_log.json'}")

    @app.command("opod")
    @friendly
    def opod(
        run: Annotated[str, typer.Option("--run", help="run id whose decisions are judged and trained on")],
        steps: Annotated[int, typer.Option("--steps", min=1, help="optimizer steps")] = 2,
        adapter: Annotated[Path | None, typer.Option(
            "--adapter", help="the SFT adapter dir: teacher and student start there; default: base model")] = None,
        lam: Annotated[float, typer.Option(
            "--lambda", min=0.0, help="weight of reward-weighted regression next to the reverse KL")] = 1.0,
        judge: Annotated[str | None, typer.Option(
            "--judge", help="pool model that attributes hindsight hints; default: the synthesizer")] = None,
        pool: PoolOpt = None,
        out_dir: Annotated[Path, typer.Option(
            "--out",
            help="where the adapter, adapter.gguf, judgments.jsonl, train_log.json and the resume checkpoint go; "
                 "rerun with the same --out to continue an interrupted run")] = Path("opod-adapter"),
        db: DbOpt = None,
        lr: LrOpt = 1e-4,
        batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="decisions of each kind per step")] = 4,
        max_new_tokens: Annotated[int, typer.Option(
            "--max-new-tokens", min=1, help="longest action the student samples")] = 128,
        max_decisions: Annotated[int | None, typer.Option(
            "--max-decisions", min=1, help="judge at most N decisions")] = None,
        seed: SeedOpt = 0,
        lora_r: LoraROpt = 8,
        stop_after: StopOpt = None,
    ) -> None:
        """OPOD: hindsight hints from a judge, distilled on-policy (reverse KL) plus reward-weighted regression."""
        require_training_extra()
        from ..trace.store import TraceStore
        from ..train.opod import train_opod
        from ..train.settings import OPODSettings

        settings = OPODSettings.build(
            steps=steps, out=out_dir, adapter=adapter, lam=lam, judge=judge, lr=lr, batch_size=batch_size,
            max_new_tokens=max_new_tokens, max_decisions=max_decisions, seed=seed, lora_r=lora_r,
            lora_alpha=2 * lora_r, max_steps_now=stop_after)
        result = train_opod(run, settings, pool=pool, store=TraceStore(db), progress=_print, bar=True)
        flagged = sum(1 for j in result.judgments if j.needs_repair)
        out.print(f"adapter: {result.adapter_dir}", highlight=False)
        if result.gguf_path is not None:
            out.print(f"llama.cpp adapter: {result.gguf_path}", highlight=False)
        _print(f"judged {len(result.judgments)} decisions, {flagged} flagged for repair; "
               f"trained on {result.opd_items} hinted + {result.rwr_items} successful decisions")
