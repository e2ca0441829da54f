"""Answer synthesis, shared by strategies: the trajectory's results become the final answer.

Grounding ("answers are grounded", a design invariant): every result is shown with a label
(``[R1]``, ``[R2]``, ...) and its status, and the synthesizer may cite a label instead of
retyping the result. The citation is replaced by the result itself, so a small model cannot
miscopy a number it was given. Synthesis decodes at the synthesis role's temperature (greedy
by default).

The caller of an episode (``orchestrion serve``) may pass an :class:`AnswerChannel` to the
episode (:func:`orchestrion.runtime.episode.run_episode`, held by its run context as
``ctx.answer``). The episode's synthesis then streams the answer
into it token by token, grounded as it goes (a possible citation is held back until it is
resolved, so the pieces joined are exactly the final answer), and, when the channel asks for
a JSON answer, writes it through the structured-output path: the backend's constrained
decoding where it has one, else the schema in the prompt and bounded repairs. An episode
that ends without a synthesis gets one JSON-conforming synthesis from :func:`conform_answer`.

No evidence, no harm ("orchestration does no harm", a design invariant): an episode none of
whose tool or agent calls returned a result (``ctx.results`` is empty) is answered by
:func:`answer_directly`, the ``direct`` baseline's own prompt and decoding on the synthesizer
model, so orchestrating that found nothing never answers worse than not orchestrating. The
same holds for a synthesis whose
answer line no result supports (:func:`orchestrion.runtime.support.supported`): the synthesizer
answered from its own knowledge, distracted by results that did not decide the task, so the
answer is ``direct``'s instead (event ``unsupported_answer``; outside an answer channel only,
because a streamed answer has already been sent). An orchestrator's own final answer goes
through :func:`settle_answer`: kept when a result supports it, else synthesised from the
results, else answered directly. For a multi-part task (``ctx.multipart``) an answer's labelled
lines are its answer lines, and one part that a result supports is enough (:mod:`.support`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from .._prompts import render
from .._text import extract_json, marked_answer
from ..models.structured import repair_messages, schema_prompt
from ..models.types import Completion, GenerateConfig, Message, msg
from .answer import AnswerChannel
from .context import RunContext
from .parts import is_multipart, parse_parts
from .support import supported
from .types import Task

_CITE = re.compile(r"\[\s*R(\d+)\s*\]")
_BARE = re.compile(r"^(?:answer:\s*)?R(\d+)\.?$", re.IGNORECASE)
_ANSWER = re.compile(r"^\s*(?:final answer|answer)\s*:\s*", re.IGNORECASE)
# a label that only points at the answer line right after it: "[R1] Answer: 156"
_POINTER = re.compile(r"\[\s*R(\d+)\s*\]\s*(?=(?:final answer|answer)\s*:)", re.IGNORECASE)
MAX_RESULTS = 12
JSON_REPAIRS = 2
_OPEN_CITE = re.compile(r"\s*(?:R(?:\d+\s*)?)?")  # what may follow "[" in a citation not yet closed
_BARE_SOON = re.compile(r"r(?:\d+\.?)?")  # a last line that may still become a bare "R2"


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


def _inline(text: str, evidence: Sequence[Evidence], cited: list[int]) -> str:
    """``text`` with pointer labels dropped and citations replaced (not the bare last-line rule)."""

    def drop(m: re.Match[str]) -> str:
        if 1 <= int(m.group(1)) <= len(evidence):
            cited.append(int(m.group(1)))
            return ""
        return m.group(0)

    def swap(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if not 1 <= n <= len(evidence):
            return m.group(0)
        cited.append(n)
        return evidence[n - 1].citable()

    return _CITE.sub(swap, _POINTER.sub(drop, text))


def ground(text: str, evidence: Sequence[Evidence]) -> tuple[str, list[int]]:
    """``text`` with each citation ``[Rn]`` replaced by result n; and the cited numbers."""
    cited: list[int] = []
    out = _inline(text, evidence, cited)
    lines = out.rstrip().splitlines()
    if lines:
        bare = _BARE.match(lines[-1].strip())
        if bare and 1 <= int(bare.group(1)) <= len(evidence):  # "R2" alone on the answer line
            n = int(bare.group(1))
            cited.append(n)
            lines[-1] = f"Answer: {evidence[n - 1].citable()}"
            out = "\n".join(lines)
    return out, cited


class GroundedStream:
    """Grounds a synthesis output while it streams: each piece fed in may release text.

    What is released is always a prefix of ``ground(whole_output.strip())``: leading and
    trailing whitespace, an open ``[R..`` that may become a citation, a citation that may
    still point at an ``Answer:`` line, and a last line that may become a bare ``R2`` (beyond
    what it shares with the ``Answer: `` that line would start with) are held back until more
    output decides them.
    """

    def __init__(self, evidence: Sequence[Evidence], emit: Callable[[str], None]) -> None:
        self.evidence = evidence
        self._emit = emit
        self.raw = ""
        self.sent = ""

    def feed(self, piece: str) -> None:
        self.raw += piece
        target = _inline(_settled(self.raw.lstrip()), self.evidence, [])
        if len(target) > len(self.sent) and target.startswith(self.sent):
            self._emit(target[len(self.sent):])
            self.sent = target


def _settled(text: str) -> str:
    """The longest prefix of ``text`` whose grounding no later output can change."""
    while True:
        before = text
        text = text.rstrip()
        start = text.rfind("[")
        if start >= 0 and "]" not in text[start:] and _OPEN_CITE.fullmatch(text[start + 1:]):
            text = text[:start]
        found = list(_CITE.finditer(text))
        last = found[-1] if found else None
        if last is not None and _pointer_pending(text[last.end():]):
            text = text[:last.start()]
        line = text.rfind("\n") + 1
        if _bare_pending(text[line:].strip()):
            # a bare label's line becomes "Answer: <value>": what it shares with that may go out
            text = text[:line + _common_prefix(text[line:], _BARE_LINE)]
        if text == before:
            return text


_BARE_LINE = "Answer: "


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _pointer_pending(tail: str) -> bool:
    """Whether the text after a citation may still turn it into a pointer ("[R1] Answer: ...")."""
    t = tail.lstrip().lower()
    for word in ("answer", "final answer"):
        if word.startswith(t) or (t.startswith(word) and not t[len(word):].strip()):
            return True
    return False


def _bare_pending(line: str) -> bool:
    """Whether a (stripped) last line may still become a bare citation ("R2", "Answer: R2")."""
    low = line.lower()
    if not low:
        return False
    if "answer:".startswith(low):
        return True
    if low.startswith("answer:"):
        low = low[len("answer:"):].lstrip()
    return not low or _BARE_SOON.fullmatch(low) is not None


def direct_config(ctx: RunContext) -> GenerateConfig:
    """The ``direct`` baseline's decoding with the episode's options: agent temperature, the
    ``max_tokens`` and ``seed`` options."""
    opts = ctx.strategy_options
    return GenerateConfig(max_tokens=opts.max_tokens, temperature=ctx.temperature("agent"), seed=opts.seed)


async def answer_directly(task: str, ctx: RunContext, *, model: str | None = None,
                          config: GenerateConfig | None = None, name: str = "answer") -> Completion:
    """The ``direct`` baseline's one call: its prompt (the whole task as written when it says how
    to answer in its own words, :func:`asked_as_written`), on ``model`` (default: the orchestrator).
    ``config`` defaults to :func:`direct_config`. With ``on_text`` unset and a live answer
    channel that wants plain text, the answer streams into it."""
    cfg = config or direct_config(ctx)
    channel = ctx.answer
    live = channel if channel is not None and channel.json_schema is None and cfg.on_text is None \
        and channel.claim() else None
    streamer = GroundedStream([], live.emit) if live is not None else None
    whole = ctx.as_written and ctx.task is not None and task.strip() == ctx.task.strip()
    out = await ctx.generate([msg("user", task if whole else render("direct", task=task))], model=model,
                             config=replace(cfg, on_text=streamer.feed) if streamer else cfg, name=name)
    if live is not None:
        live.finish(out.text.strip(), out.finish_reason)
    ctx.direct_answers.add((out.model, out.text.strip()))
    return out


def asked_as_written(task: Task) -> bool:
    """Whether ``direct`` asks ``task`` as written: a code task graded by its tests (its prompt asks
    for the whole function) or a multi-part task (it asks for one labelled line per part), where
    direct's "be brief: give the final answer on the last line" contradicts the task's own words.
    The Qwen2.5-Coder-1.5B passed fewer HumanEval problems with the wrapper than without it
    (``bench/humaneval_prompt.py``; the numbers are in ``docs/results/``)."""
    return is_multipart(task) or task.metadata.get("scoring") == "execution"


def fallback_model(ctx: RunContext) -> str:
    """The model :func:`direct_fallback` answers on: the synthesizer."""
    return ctx.strategy_options.synthesizer or ctx.pool.synthesizer


async def direct_fallback(task: str, ctx: RunContext, reason: str) -> str:
    """The ``direct`` answer on the synthesizer model, in an ``answer`` span that says why."""
    model = fallback_model(ctx)
    with ctx.tracer.span("answer", "synthesis", results=0, direct=True, reason=reason) as span:
        out = await answer_directly(task, ctx, model=model, name="synthesis (direct)")
        text = out.text.strip()
        span.set(output=text)
    return text


async def settle_answer(task: str, answer: str, results: Sequence[str | Evidence], ctx: RunContext) -> str:
    """An orchestrator's own final answer (proactive's ``complete``), grounded like a synthesis:
    with no tool or agent result, the direct answer; kept when a result supports it; else
    recorded as unsupported (event ``unsupported_answer``) and synthesised from the results."""
    if not ctx.results:
        ctx.tracer.event("unsupported_answer", {"answer": answer[:500], "reason": "no results"})
        return await direct_fallback(task, ctx, "the orchestrator answered without any result")
    if supported(answer, ctx.results, multipart=ctx.multipart):
        return answer
    ctx.tracer.event("unsupported_answer", {"answer": answer[:500], "reason": "no result supports it"})
    return await synthesize(task, results, ctx)


async def synthesize(task: str, results: Sequence[str | Evidence], ctx: RunContext, *,
                     direct_without_results: bool = True) -> str:
    """Turn a trajectory's results into the final answer on the synthesis model.

    The last :data:`MAX_RESULTS` results are shown, labelled; citations in the reply are
    replaced by the results they name, and recorded on the synthesis span (``cited``).
    With an :class:`AnswerChannel` set, the answer streams into it (first synthesis only)
    and follows its JSON format. When no tool or agent call of the episode returned a result
    (and ``direct_without_results``), the answer is :func:`answer_directly`'s on the
    synthesizer instead: the results shown then are only failures or the orchestrator's words.
    """
    if direct_without_results and not ctx.results:
        return await direct_fallback(task, ctx, "no tool or agent result")
    shown = [r if isinstance(r, Evidence) else Evidence(r) for r in results][-MAX_RESULTS:]
    body = "\n".join(f"[R{i}] {e.text}" for i, e in enumerate(shown, 1))
    results_text = body or "(no results: answer from your own knowledge)"
    channel = ctx.answer
    live = channel if channel is not None and channel.claim() else None
    model = ctx.strategy_options.synthesizer or ctx.pool.synthesizer
    config = ctx.config("synthesis", ctx.strategy_options.max_tokens)
    with ctx.tracer.span("answer", "synthesis", results=len(shown)) as span:
        if channel is not None and channel.json_schema is not None:
            text, out = await _synthesize_json(task, results_text, ctx, channel.json_schema, live, model)
            span.set(output=text, json=True)
        else:
            streamer = GroundedStream(shown, live.emit) if live is not None else None
            out = await ctx.generate(
                [msg("user", render("synthesize_parts" if ctx.multipart else "synthesize", task=task,
                                    results=results_text))],
                model=model, config=replace(config, on_text=streamer.feed if streamer else None), name="synthesis",
            )
            text, cited = ground(out.text.strip(), shown)
            span.set(cited=[f"R{n}" for n in cited], output=text)
        if live is not None and not live.finish(text, out.finish_reason):
            span.set(stream_mismatch=True)
        answered = marked_answer(text) is not None or (ctx.multipart and bool(parse_parts(text)))
        unsupported = (direct_without_results and channel is None and ctx.results
                       and answered and not supported(text, ctx.results, multipart=ctx.multipart))
        if unsupported:
            span.set(supported=False)
            ctx.tracer.event("unsupported_answer", {"answer": text[:500], "reason": "no result supports the synthesis"})
    if unsupported:  # the synthesizer answered from its own knowledge, beside the results: direct does that better
        return await direct_fallback(task, ctx, "no result supports the synthesized answer")
    return text


async def _synthesize_json(task: str, results_text: str, ctx: RunContext, schema: dict[str, Any],
                           live: AnswerChannel | None, model: str) -> tuple[str, Completion]:
    """A JSON answer: constrained backends stream it live in one call; others get the schema in
    the prompt and up to :data:`JSON_REPAIRS` repairs, and the valid answer is sent whole."""
    constrained = ctx.pool.get(model).constrains_json
    prompt = render("synthesize_json", task=task, results=results_text)
    convo: list[Message] = [msg("user", prompt if constrained else prompt + "\n\n" + schema_prompt(schema))]
    base = replace(ctx.config("synthesis", ctx.strategy_options.max_tokens), json_schema=schema)
    # streamed whitespace-trimmed as it comes (no citations are replaced inside JSON)
    stream = GroundedStream([], live.emit).feed if live is not None and constrained else None
    out: Completion | None = None
    text = ""
    for attempt in range(JSON_REPAIRS + 1):
        out = await ctx.generate(convo, model=model, config=replace(base, on_text=stream),
                                 name="synthesis" if attempt == 0 else f"synthesis repair {attempt}")
        text = out.text.strip()
        if stream is not None or out.finish_reason == "length":  # what streamed is the answer, cut or not
            break
        try:
            text = json_answer(text, schema)
            break
        except ValueError as exc:
            convo = repair_messages(convo, out.text, str(exc))
    assert out is not None
    return text, out


def json_answer(text: str, schema: dict[str, Any]) -> str:
    """``text`` as one JSON value that fits ``schema``'s type and required keys, re-serialised
    when it came wrapped (code fence, prose); a ValueError that says what is wrong."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = extract_json(text)  # raises ValueError when there is none
        text = orjson.dumps(value).decode()
    kind = schema.get("type")
    if kind == "object" and not isinstance(value, dict):
        raise ValueError(f"the answer must be a JSON object, not {type(value).__name__}")
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            raise ValueError(f"the answer lacks the required key(s) {', '.join(map(str, missing))}")
    return text


async def conform_answer(task: str, answer: str, ctx: RunContext) -> str:
    """The episode's answer in the format its :class:`AnswerChannel` asks for: unchanged when no
    format is asked, when the synthesis already wrote it, or when it already fits; else one
    JSON synthesis from the answer."""
    channel = ctx.answer
    if channel is None or channel.json_schema is None or channel.claimed:
        return answer
    try:
        return json_answer(answer.strip(), channel.json_schema)
    except ValueError:
        return await synthesize(task, [Evidence(f"the answer found: {answer.strip()[:1500]}")], ctx,
                                direct_without_results=False)
