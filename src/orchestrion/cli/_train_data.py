"""`orchestrion train export`: a run's orchestrator decisions as TRL or verl training data."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError
from ._common import DbOpt, err, friendly, out, out_folder, utf8_text

if TYPE_CHECKING:
    from ..trace.store import TraceStore
    from ..train.records import DecisionRecord


def register(app: typer.Typer) -> None:
    """Add ``export`` to the ``train`` app."""
    app.command("export")(export)


@friendly
def export(
    run: Annotated[str, typer.Option("--run", callback=utf8_text("--run"),
                                     help="run id (an eval run); its episodes' decisions are exported")],
    out_dir: Annotated[Path, typer.Option("--out", callback=out_folder("--out"),
                                          help="output folder (made owner-only; files in it are replaced whole)")],
    fmt: Annotated[str, typer.Option("--format", help="trl (JSONL prompt-completion) or verl (parquet)")] = "trl",
    db: DbOpt = None,
    all_records: Annotated[bool, typer.Option(
        "--all", help="no filters: every attempt of every episode, invalid ones included")] = False,
    one_per_task: Annotated[bool, typer.Option(
        "--one-per-task", help="at most one episode per task (the best scored)")] = False,
    max_tool_share: Annotated[float, typer.Option(
        "--max-tool-share", min=0.0, max=1.0,
        help="no tool in more than this share of rows (ParaManager-style cap, e.g. 0.5); 1 = no cap")] = 1.0,
    include_failed: Annotated[bool, typer.Option(
        "--include-failed", help="keep episodes that were not successful")] = False,
    grounded_only: Annotated[bool, typer.Option(
        "--grounded-only", help="only episodes whose answer is grounded on a tool or agent result of their own "
                                "trajectory (evidence_correct, from an eval run's scoring)")] = False,
    labels: Annotated[list[str] | None, typer.Option(
        "--label", callback=utf8_text("--label"),
        help="only episodes annotated with this label (in the viewer); repeat for any of several")] = None,
    rewards: Annotated[Path | None, typer.Option(
        "--rewards", help="rewards.yaml for meta.reward (default weights otherwise)")] = None,
    gguf: Annotated[Path | None, typer.Option(
        "--gguf", help="tokenizer of this GGUF (default: the embedded orchestrator)")] = None,
    augment: Annotated[float, typer.Option(
        "--augment", min=0.0, max=1.0,
        help="add a format-drift repair copy of this share of valid first attempts (ParaManager's "
             "recoverable failures; see orchestrion.train.augment)")] = 0.0,
) -> None:
    """Export a run's decisions (exact context, raw output, token ids, loss mask) for TRL or verl."""
    from ..trace.store import TraceStore
    from ..train.records import RecordFilter, filter_steps, load_records
    from ..train.rewards import episode_reward, load_reward_config

    if fmt not in ("trl", "verl"):
        raise ConfigError(f"--format '{fmt}': choose trl or verl")
    cfg = load_reward_config(rewards)
    store = TraceStore(db)
    run_id = _resolve_run(store, run)
    records = load_records(store, run_id=run_id)
    out.print(f"records read: {len(records)} decision attempts from {len({r.episode_id for r in records})} episodes "
              f"of run {run_id}", highlight=False)
    if not records:
        raise ConfigError(f"run {run_id} has no recorded orchestrator decisions (its strategies made none); "
                          "export a run of a strategy such as para, milestone or proactive")
    wanted = tuple(dict.fromkeys(" ".join(x.split()) for x in labels or [] if x.strip()))
    flt = RecordFilter(successful_only=False, keep_recoverable=True, max_tool_share=None, dedupe=False,
                       valid_only=False, sampled_only=False, labels=wanted) if all_records else RecordFilter(
        successful_only=not include_failed, one_per_task=one_per_task, grounded_only=grounded_only,
        max_tool_share=max_tool_share if max_tool_share < 1.0 else None, labels=wanted)
    kept = records
    removed: dict[str, int] = {}
    for step, now in filter_steps(records, flt):
        removed[step] = len(kept) - len(now)
        kept = now
        out.print(f"  kept after {step}: {len(kept)} (removed {removed[step]})", highlight=False)
        if not kept:
            raise ConfigError(_why_empty(step, run_id, records))
    if augment > 0:
        from ..train.augment import augment_records

        before = len(kept)
        kept = augment_records(kept, augment)
        out.print(f"  repair copies added (--augment {augment:g}): {len(kept) - before}", highlight=False)
    episode_rewards = {eid: episode_reward(store, eid, cfg) for eid in dict.fromkeys(r.episode_id for r in kept)}
    info = {"run_id": run_id, "records_read": len(records), "filters": flt.__dict__, "removed_by_filter": removed,
            "rewards_config": cfg.model_dump(), "augment": augment}
    with err.status(f"writing {len(kept)} rows..."):
        path = _write(fmt, kept, out_dir, episode_rewards, info, gguf)
    out.print(
        f"wrote {path} ({len(kept)} rows, {len(episode_rewards)} episodes) and {path.parent / 'dataset_info.json'}",
        highlight=False,
    )


def _write(fmt: str, kept: list[DecisionRecord], out_dir: Path, rewards: dict[str, float],
           info: dict[str, object], gguf: Path | None) -> Path:
    from ..train.export import export_trl, export_verl

    if fmt == "verl":
        return export_verl(kept, out_dir, rewards=rewards, info=info)
    from ..train.hf import load_tokenizer

    return export_trl(kept, out_dir, tokenizer=load_tokenizer(gguf), rewards=rewards, info=info)


def _resolve_run(store: TraceStore, run: str) -> str:
    """The run id itself, or the one run whose id starts with ``run``."""
    ids = store.episode_run_ids(run)
    if run in ids:
        return run
    if len(ids) == 1:
        return str(ids[0])
    if len(ids) > 1:
        raise ConfigError(f"run id prefix '{run}' matches {len(ids)} runs; give more characters")
    raise ConfigError(f"run '{run}' not found in {store.path}: no episode has that run id; check --run and --db")


def _why_empty(step: str, run_id: str, records: list[DecisionRecord]) -> str:
    episodes = {r.episode_id: r for r in records}.values()
    if step.startswith("successful"):
        unscored = sum(1 for r in episodes if r.score is None and r.correct is None)
        note = f" ({unscored} of {len(episodes)} episodes are unscored)" if unscored else ""
        return f"no successful episodes in run {run_id}{note}; pass --include-failed to export them anyway"
    if step.startswith("answer grounded"):
        unmeasured = sum(1 for r in episodes if r.evidence_correct is None)
        note = (f" ({unmeasured} of {len(episodes)} episodes have no grounding measure: it is computed when eval "
                "scores an episode that has tool or agent results, and not for code tasks)") if unmeasured else ""
        return f"no episode of run {run_id} has its answer grounded on a result of its own trajectory{note}; " \
               "leave out --grounded-only"
    if step.startswith("labelled"):
        found = sorted({r.label for r in episodes if r.label})
        have = f"its labels are {', '.join(found)}" if found else "none of its episodes is annotated"
        return f"no episode of run {run_id} is {step} ({have}); annotate episodes in `orchestrion view`, or " \
               "change --label"
    if step.startswith("valid"):
        return f"no valid orchestrator output left in run {run_id}; pass --all to export invalid attempts too"
    if step.startswith("no tool"):
        return (f"the tool cap removed every row of run {run_id} (one tool is in nearly all of them); "
                "raise --max-tool-share, e.g. --max-tool-share 1")
    return f"no records of run {run_id} left after '{step}'; relax that filter"
