"""`orchestrion train grpo` and `orchestrion train opod`: policy training of the orchestrator.

The trainers (and torch) are imported inside the commands, so the CLI starts fast.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..train.hf import require_training_extra
from ..train.settings import GRPOSettings, OPODSettings
from ._common import DbOpt, PoolOpt, err, friendly, out, out_folder, parse_settings, utf8_text
from ._flags import settings_flags
from ._render import RichStepBar

# the settings fields each command sets from its flags (defaults, bounds and help on the fields)
GRPO_FLAGS = ("limit", "group", "steps", "strategy", "adapter", "out", "lr", "clip", "kl_beta", "rewards", "seed",
              "updates", "micro_batch", "concurrency", "max_length", "lora_r", "engine", "tasks_per_step",
              "max_steps_now")
OPOD_FLAGS = ("steps", "adapter", "lam", "judge", "out", "lr", "batch_size", "max_new_tokens", "max_decisions",
              "hindsight", "seed", "lora_r", "max_steps_now")
RENAMED = {"strategy": ("--strategy", "-s"), "lam": ("--lambda",), "max_steps_now": ("--stop-after",)}


def _print(line: str) -> None:
    err.print(line, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add ``grpo`` and ``opod`` to the ``train`` app."""

    @app.command("grpo")
    @friendly
    @settings_flags(GRPOSettings, GRPO_FLAGS, flags=RENAMED)
    def grpo(
        dataset: Annotated[str, typer.Option(
            "--dataset", help="tasks: bigbench:TASK or TASK/SUBTASK, humaneval, reasoning-gym:FAMILY, jsonl:PATH")],
        pool: PoolOpt = None,
        db: DbOpt = None,
        settings: Annotated[list[str], typer.Option("--set", help="strategy option KEY=VALUE (repeatable)")] = [],  # noqa: B006
        **values: Any,
    ) -> None:
        """GRPO: sample groups of episodes with the current policy, train on group-normalised rewards.

        Rerun with the same --out to continue an interrupted run from its last saved step. On GPUs:
        `accelerate launch -m orchestrion train grpo ...` (engine trl).
        """
        out_folder("--out")(values.get("out"))  # a file or a device there: one line before torch loads
        require_training_extra()
        from ..trace.store import TraceStore
        from ..train.grpo import train_grpo

        config = GRPOSettings.build(options=parse_settings(settings), **values)
        result = train_grpo(dataset, config, pool=pool, store=TraceStore(db), progress=_print, bar=RichStepBar())
        updated = sum(1 for s in result.steps if s.loss is not None and s.groups_kept)
        out.print(f"adapter: {result.adapter_dir}", highlight=False)
        if result.gguf_path is not None:
            out.print(f"llama.cpp adapter: {result.gguf_path}", highlight=False)
        _print(f"run {result.run_id}: {len(result.steps)} steps, {updated} with an update;"
               f" log in {result.adapter_dir / 'train_log.json'}")

    @app.command("opod")
    @friendly
    @settings_flags(OPODSettings, OPOD_FLAGS, flags=RENAMED)
    def opod(
        run: Annotated[str, typer.Option("--run", callback=utf8_text("--run"),
                                         help="run id whose decisions are judged and trained on")],
        pool: PoolOpt = None,
        db: DbOpt = None,
        **values: Any,
    ) -> None:
        """OPOD: hindsight hints from a judge, distilled on-policy (reverse KL) plus reward-weighted regression."""
        out_folder("--out")(values.get("out"))
        require_training_extra()
        from ..trace.store import TraceStore
        from ..train.opod import train_opod

        settings = OPODSettings.build(**values)
        result = train_opod(run, settings, pool=pool, store=TraceStore(db), progress=_print, bar=RichStepBar())
        flagged = sum(1 for j in result.judgments if j.needs_repair)
        out.print(f"adapter: {result.adapter_dir}", highlight=False)
        if result.gguf_path is not None:
            out.print(f"llama.cpp adapter: {result.gguf_path}", highlight=False)
        _print(f"judged {len(result.judgments)} decisions, {flagged} flagged for repair; "
               f"trained on {result.opd_items} hinted + {result.rwr_items} successful decisions")
