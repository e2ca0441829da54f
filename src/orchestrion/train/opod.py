"""OPOD (POrchestra): on-policy orchestration distillation from hindsight hints, plus RWR.

From the decisions of a recorded run:

1. **Attribution** (:mod:`._opod_judge`). A judge model (a pool model; by default the pool's synthesizer) reads
   each valid decision with what followed it in its episode (later decisions, tool and
   worker results, the final answer, status and score) and answers
   ``{"needs_repair": bool, "hint": str}`` (``prompts/opod_judge.md``). Unparseable output
   counts as ``needs_repair: false``; every judgment is written to ``judgments.jsonl``. With
   ``hindsight``, only episodes that lost points or overspent against other scored episodes of
   their task are judged, and the judge also sees what worked there (:mod:`.hindsight`).
2. **Self-teacher.** The teacher is the frozen starting model (base, or base + ``adapter``)
   given the decision's context with the hint added (``prompts/opod_hint.md``).
3. **Training.** The student (a LoRA initialised from the same adapter) samples an action at
   the stored context; the loss is the token-level reverse KL(student || teacher) over the
   full vocabulary along the student's own tokens (decisions flagged for repair), plus
   ``lam`` times reward-weighted regression on the stored outputs of decisions from
   successful episodes. Each loss is averaged over the tokens of a decision, then over the
   decisions that have that supervision.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .._errors import ConfigError
from .._prompts import render
from ..models.pool import Pool, load_pool
from ..models.types import Message, msg
from ..trace.store import TraceStore
from ._checkpoint import CHECKPOINT, load_checkpoint, read_state, save_checkpoint
from ._losses import reverse_kl, rwr_loss
from ._opod_judge import Judgment, judge_records
from ._policy import Policy, cycle
from ._progress import StepBar, StepDisplay
from .hindsight import hindsight
from .settings import OPODSettings

Log = Callable[[str], None]


@dataclass
class OPDItem:
    """A decision flagged for repair: the student's context, the hinted teacher context, the student's sample."""

    decision_id: str
    student_ids: list[int]
    teacher_ids: list[int]
    hint: str
    sampled: list[int] | None = None


@dataclass
class RWRItem:
    decision_id: str
    prompt_ids: list[int]
    output_ids: list[int]
    reward: float


@dataclass
class OPODStep:
    step: int
    loss: float
    opd: float | None
    rwr: float | None
    opd_decisions: int
    rwr_decisions: int
    sampled_tokens: float
    wall_s: float


@dataclass
class OPODResult:
    adapter_dir: Path
    gguf_path: Path | None
    judgments: list[Judgment]
    opd_items: int
    rwr_items: int
    steps: list[OPODStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- attribution ---------------------------------------------------------------------------
def hinted(messages: Sequence[Message], hint: str) -> list[Message]:
    """The decision context with the hint added to its last user turn (the self-teacher's context)."""
    note = render("opod_hint", hint=hint)
    out = [dict(m) for m in messages]
    if out and out[-1]["role"] == "user":
        out[-1]["content"] = f"{out[-1]['content']}\n\n{note}"
        return out  # type: ignore[return-value]
    return [*out, msg("user", note)]  # type: ignore[list-item]


def build_items(policy: Policy, records: Sequence[Any], judgments: Sequence[Judgment], *,
                max_length: int = 2048) -> tuple[list[OPDItem], list[RWRItem]]:
    """OPD items for decisions judged in need of repair; RWR items for valid decisions of successful episodes."""
    from .records import RecordFilter, filter_records

    by_id = {r.decision_id: r for r in records}
    opd = []
    for j in judgments:
        rec = by_id.get(j.decision_id)
        if rec is None or not j.needs_repair:
            continue
        student = list(rec.prompt_token_ids or policy.prompt_ids(rec.messages))
        teacher = policy.prompt_ids(hinted(rec.messages, j.hint))
        if max(len(student), len(teacher)) < max_length:
            opd.append(OPDItem(rec.decision_id, student, teacher, j.hint))
    rwr = []
    flt = RecordFilter(successful_only=True, keep_recoverable=True, max_tool_share=None, dedupe=True, valid_only=True)
    for rec in filter_records(records, flt):
        prompt = list(rec.prompt_token_ids or policy.prompt_ids(rec.messages))
        output = list(rec.token_ids or policy.text_ids(rec.output))
        if not output or output[-1] != policy.eos_id:
            output.append(policy.eos_id)  # a finished decision ends its turn
        if len(prompt) + len(output) <= max_length:
            rwr.append(RWRItem(rec.decision_id, prompt, output, rec.score if rec.score is not None else 1.0))
    return opd, rwr


# -- the loss and one step -------------------------------------------------------------------
def opod_loss(policy: Policy, opd: Sequence[OPDItem], rwr: Sequence[RWRItem], *, lam: float = 1.0,
              micro_batch: int = 2, backward: bool = True) -> dict[str, float]:
    """Reverse KL to the hinted teacher on the student's samples (``opd``, already sampled) plus
    ``lam`` x RWR on stored outputs; gradients accumulate when ``backward``. Returns the losses."""
    stats: dict[str, float] = {"loss": 0.0}
    if opd:
        total = 0.0
        for i in range(0, len(opd), micro_batch):
            chunk = opd[i:i + micro_batch]
            sampled = [c.sampled or [policy.eos_id] for c in chunk]
            sb = policy.batch([c.student_ids for c in chunk], sampled)
            tb = policy.batch([c.teacher_ids for c in chunk], sampled)
            part = reverse_kl(policy.logits(sb), policy.frozen_logits(tb), sb.mask) * (len(chunk) / len(opd))
            if backward:
                part.backward()  # type: ignore[no-untyped-call]
            total += float(part.detach())
        stats["opd"] = total
        stats["loss"] += total
    if rwr and lam:
        total = 0.0
        for i in range(0, len(rwr), micro_batch):
            chunk2 = rwr[i:i + micro_batch]
            batch = policy.batch([c.prompt_ids for c in chunk2], [c.output_ids for c in chunk2])
            rewards = torch.tensor([c.reward for c in chunk2], dtype=torch.float32, device=policy.device)
            part = rwr_loss(policy.logprobs(batch), rewards, batch.mask) * (len(chunk2) / len(rwr))
            if backward:
                (lam * part).backward()  # type: ignore[no-untyped-call]
            total += float(part.detach())
        stats["rwr"] = total
        stats["loss"] += lam * total
    return stats


def sample_actions(policy: Policy, items: Sequence[OPDItem], *, max_new_tokens: int, temperature: float) -> None:
    """Let the current student sample an action at each item's stored context."""
    for item in items:
        item.sampled = policy.sample(item.student_ids, max_new_tokens=max_new_tokens, temperature=temperature)


# -- the command ---------------------------------------------------------------------------
async def atrain_opod(
    run_id: str,
    settings: OPODSettings | None = None,
    *,
    pool: Pool | str | Path | None = None,
    store: TraceStore | str | Path | None = None,
    progress: Log | None = None,
    bar: StepDisplay | None = None,
) -> OPODResult:
    """Train the orchestrator with OPOD on run ``run_id``; see the module docstring.

    After every step the LoRA, the optimizer state and the step counter are saved under
    ``OUT/checkpoint``; called again with the same ``out`` (and settings) it continues from
    there, reusing ``judgments.jsonl`` instead of judging again. ``bar`` draws a progress bar
    with an ETA, the log lines above it (the CLI passes its rich bar on stderr).
    """
    s = settings or OPODSettings()
    the_store = store if isinstance(store, TraceStore) else TraceStore(store)
    try:
        return await _train_opod(run_id, s, pool, the_store, progress, bar)
    finally:
        if the_store is not store:  # opened here by name: closed here, failures included (as solve does)
            await asyncio.to_thread(the_store.close)


async def _train_opod(run_id: str, s: OPODSettings, pool: Pool | str | Path | None, the_store: TraceStore,
                      progress: Log | None, bar: StepDisplay | None) -> OPODResult:
    from .records import load_records

    if not the_store.episode_ids(run_id=run_id, limit=1):
        raise ConfigError(
            f"run '{run_id}' has no episodes in {the_store.path}; give the id of an eval run recorded in that store"
        )
    records = load_records(the_store, run_id=run_id)
    if not records:
        raise ConfigError(f"run '{run_id}' has no recorded orchestrator decisions;"
                          " use a strategy that makes them (para, proactive, ...)")
    the_pool = load_pool(pool)
    out_dir = Path(s.out)
    config = {"run": run_id, **s.record(), "judge": s.judge or the_pool.synthesizer, "pool": the_pool.source}
    state = read_state(out_dir, config)
    with StepBar(s.steps, int(state["step"]) if state else 0, progress, display=bar, label="opod") as steps_bar:
        log = steps_bar.log
        judgments = await _judgments(run_id, records, s, the_pool, the_store, out_dir, log, resumed=state is not None)
        log(f"loading the policy ({'adapter ' + str(s.adapter) if s.adapter else 'base model, fresh LoRA'}) ...")
        policy = Policy.load(s.adapter, lora_r=s.lora_r, lora_alpha=s.lora_alpha, gguf_path=s.gguf_path, seed=s.seed)
        opd, rwr = build_items(policy, records, judgments, max_length=s.max_length)
        notes = _check_items(run_id, opd, rwr, s.lam)
        for n in notes:
            log(n)
        log(f"{len(opd)} decisions to distil (hinted teacher), {len(rwr)} to reinforce (RWR)")
        optimizer = torch.optim.AdamW(policy.parameters(), lr=s.lr)
        history: list[OPODStep] = []
        first = 0
        if state is not None:
            load_checkpoint(out_dir, policy, optimizer)
            history = [OPODStep(**e) for e in state.get("history", [])]
            first = int(state["step"])
            log(f"resuming from {out_dir / CHECKPOINT} after step {first} of {s.steps}")
        last = s.steps if s.max_steps_now is None else min(s.steps, first + s.max_steps_now)
        for step in range(first, last):
            steps_bar.status(f"step {step + 1}: sampling")
            entry = _opod_step(policy, optimizer, opd, rwr, s, step)
            history.append(entry)
            opd_text = "-" if entry.opd is None else f"{entry.opd:.4f}"
            rwr_text = "-" if entry.rwr is None else f"{entry.rwr:.4f}"
            log(f"step {entry.step}: loss={entry.loss:.4f} reverse_kl={opd_text} rwr={rwr_text} "
                f"decisions={entry.opd_decisions}+{entry.rwr_decisions} {entry.wall_s:.1f}s")
            save_checkpoint(out_dir, policy, optimizer, step + 1,
                            {"settings": config, "history": [asdict(e) for e in history]})
            steps_bar.advance()
    adapter_dir, gguf, why = policy.save(out_dir)
    if why:
        notes.append(why)
    body = {"trainer": "opod", "config": config, "steps": [asdict(e) for e in history], "notes": notes,
            "judged": len(judgments), "flagged": sum(1 for j in judgments if j.needs_repair),
            "judge_errors": sum(1 for j in judgments if j.error), "opd_items": len(opd), "rwr_items": len(rwr),
            "hints": [{"hindsight": j.hindsight, "hint": j.hint} for j in judgments if j.needs_repair]}
    (out_dir / "train_log.json").write_text(json.dumps(body, indent=2), encoding="utf-8")
    return OPODResult(adapter_dir, gguf, judgments, len(opd), len(rwr), history, notes)


async def _judgments(run_id: str, records: Sequence[Any], s: OPODSettings, pool: Pool, store: TraceStore,
                     out_dir: Path, log: Log, *, resumed: bool) -> list[Judgment]:
    """The judge's verdicts: read back from ``judgments.jsonl`` on a resume, else judged and written there."""
    file = out_dir / "judgments.jsonl"
    if resumed and file.is_file():
        found = [Judgment(**json.loads(line)) for line in file.read_text(encoding="utf-8").splitlines() if line]
        log(f"{len(found)} judgments read back from {file}")
        await pool.aclose()
        return found
    evidence: dict[str, str] = {}
    to_judge = [r for r in records if r.valid]
    if s.hindsight:
        hints = hindsight(store, run_id, saving=s.hindsight_saving)
        evidence = {e: h.hint for e, h in hints.items()}
        to_judge = [r for r in to_judge if r.episode_id in evidence]
        reasons = Counter(h.reason for h in hints.values())
        log(f"hindsight: {reasons['lost points']} episode(s) lost points and {reasons['overspent']} overspent "
            f"against other episodes of their tasks; only their decisions are judged")
    to_judge = to_judge[:s.max_decisions]
    log(f"{len(records)} decision attempts; judging {len(to_judge)} with '{s.judge or pool.synthesizer}'")
    try:
        judgments = await judge_records(to_judge, pool=pool, store=store, judge=s.judge, log=log, evidence=evidence)
    finally:
        await pool.aclose()
    out_dir.mkdir(parents=True, exist_ok=True)
    with file.open("w", encoding="utf-8") as fh:
        for j in judgments:
            fh.write(json.dumps(asdict(j)) + "\n")
    return judgments


def _check_items(run_id: str, opd: list[OPDItem], rwr: list[RWRItem], lam: float) -> list[str]:
    notes: list[str] = []
    if not lam:
        rwr.clear()
    if not opd and not rwr:
        raise ConfigError(f"nothing to train on in run '{run_id}': the judge flagged no decision for repair and "
                          "no episode succeeded (score the run with `orchestrion eval`, or try another --judge)")
    if not opd:
        notes.append("the judge flagged no decision for repair: this is RWR only")
    if not rwr:
        notes.append("no successful episode (or --lambda 0): this is OPD only")
    return notes


def _opod_step(policy: Policy, optimizer: torch.optim.Optimizer, opd: Sequence[OPDItem], rwr: Sequence[RWRItem],
               s: OPODSettings, step: int) -> OPODStep:
    start = time.perf_counter()
    batch_opd = cycle(opd, step * s.batch_size, min(s.batch_size, len(opd)))
    batch_rwr = cycle(rwr, step * s.batch_size, min(s.batch_size, len(rwr)))
    sample_actions(policy, batch_opd, max_new_tokens=s.max_new_tokens, temperature=s.temperature)
    optimizer.zero_grad(set_to_none=True)
    stats = opod_loss(policy, batch_opd, batch_rwr, lam=s.lam, micro_batch=s.micro_batch)
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    lengths = [len(i.sampled or []) for i in batch_opd]
    return OPODStep(step + 1, stats["loss"], stats.get("opd"), stats.get("rwr"), len(batch_opd), len(batch_rwr),
                    sum(lengths) / len(lengths) if lengths else 0.0, time.perf_counter() - start)


def train_opod(run_id: str, settings: OPODSettings | None = None, **kwargs: Any) -> OPODResult:
    """:func:`atrain_opod` with its own event loop."""
    return asyncio.run(atrain_opod(run_id, settings, **kwargs))
