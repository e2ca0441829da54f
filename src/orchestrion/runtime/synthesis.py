"""Answer synthesis, shared by strategies: the trajectory's results become the final answer.

Grounding (invariant 7): every result is shown with a label (``[R1]``, ``[R2]``, ...) and
its status, and the synthesizer may cite a label instead of retyping the result. The
citation is replaced by the result itself, so a small model cannot miscopy a number it
was given. Synthesis decodes at the synthesis role's temperature (greedy by default).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._prompts import render
from ..models._types import msg
from .context import RunContext

_CITE = re.compile(r"\[\s*R(\d+)\s*\]")
_BARE = re.compile(r"^(?:answer:\s*)?R(\d+)\.?$", re.IGNORECASE)
_ANSWER = re.compile(r"^\s*(?:final answer|answer)\s*:\s*", re.IGNORECASE)
# a label that only points at the answer line right after it: "[R1] Answer: 156"
_POINTER = re.compile(r"\[\s*R(\d+)\s*\]\s*(?=(?:final answer|answer)\s*:)", re.IGNORECASE)
MAX_RESULTS = 12


@dataclass(frozen=True)
class Evidence:
    """One result shown to the synthesizer: ``text`` is what it reads, ``value`` what a citation
    inserts (``None``: taken from ``text``, after ``status=OK`` or ``(ok):`` when present)."""

    text: str
    value: str | None = None

    def citable(self) -> str:
        raw = self.value if self.value is not None else _value_of(self.text)
        lines = [ln.strip() for ln in raw.strip().splitlines() if ln.strip()]
        # agents put their result on the last line; a multi-line output is cited by it
        last = lines[-1] if lines else ""
        return _ANSWER.sub("", last).strip()


def _value_of(text: str) -> str:
    for marker in ("status=OK ", "(ok): "):
        if marker in text:
            return text.split(marker, 1)[1]
    return text


def ground(text: str, evidence: Sequence[Evidence]) -> tuple[str, list[int]]:
    """``text`` with each citation ``[Rn]`` replaced by result n; and the cited numbers."""
    cited: list[int] = []

    def drop(m: re.Match[str]) -> str:
        if 1 <= int(m.group(1)) <= len(evidence):
            cited.append(int(m.group(1)))
            return ""
        return m.group(0)

    text = _POINTER.sub(drop, text)

    def swap(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if not 1 <= n <= len(evidence):
            return m.group(0)
        cited.append(n)
        return evidence[n - 1].citable()

    out = _CITE.sub(swap, text)
    lines = out.rstrip().splitlines()
    if lines:
        bare = _BARE.match(lines[-1].strip())
        if bare and 1 <= int(bare.group(1)) <= len(evidence):  # "R2" alone on the answer line
            n = int(bare.group(1))
            cited.append(n)
            lines[-1] = f"Answer: {evidence[n - 1].citable()}"
            out = "\n".join(lines)
    return out, cited


async def synthesize(task: str, results: Sequence[str | Evidence], ctx: RunContext) -> str:
    """Turn a trajectory's results into the final answer on the synthesis model.

    The last :data:`MAX_RESULTS` results are shown, labelled; citations in the reply are
    replaced by the results they name, and recorded on the synthesis span (``cited``).
    """
    shown = [r if isinstance(r, Evidence) else Evidence(r) for r in results][-MAX_RESULTS:]
    body = "\n".join(f"[R{i}] {e.text}" for i, e in enumerate(shown, 1))
    with ctx.tracer.span("answer", "synthesis", results=len(shown)) as span:
        out = await ctx.generate(
            [msg("user",
                 render("synthesize", task=task, results=body or "(no results: answer from your own knowledge)"))],
            model=ctx.strategy_options.synthesizer or ctx.pool.synthesizer,
            config=ctx.config("synthesis", ctx.strategy_options.max_tokens),
            name="synthesis",
        )
        text, cited = ground(out.text.strip(), shown)
        span.set(cited=[f"R{n}" for n in cited], output=text)
    return text
