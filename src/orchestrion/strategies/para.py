"""ParaManager: multi-round parallel orchestration over one Agent-as-Tool action space.

Each round the orchestrator reads the task and the structured feedback of all
earlier calls (status OK / EXEC_ERROR / TIMEOUT / ...), then either issues up to
``max_calls`` calls (tools and agent tools alike, each optionally on a chosen pool
model) that run concurrently, or sets ``final``. Calls that already ran (same tool, input
and model) are not run again; a round with nothing else ends the loop (event
``repeated_calls``: the same calls would bring no new result), and so does a round every call of
which returned a result the episode already had, from another tool or input (event
``recomputed_results``: ``python`` re-checking the calculator's 156 is checking, not solving;
on ``make demo`` it saved the third decision). Once there are results, each round's prompt
ends with a line that puts stopping first when one of them answers the task (``ANSWERED_HINT``;
round 1 has none): on ``make demo`` the second decision then asks for the calculator's call again,
which ends the loop at once, rather than a python run of 12*13. A synthesis model then turns the
whole trajectory into the answer. Paper defaults: 12 rounds, 4 calls per round.

Programs are the coder's job (option ``programs_by_coder``). A ``python`` call whose program uses
no number written in the task is sent to the ``coder`` agent with the whole task instead (event
``program_to_coder``). The orchestrator writes a program for the arithmetic it was given; its own
programs for reasoning tasks printed its guess (``print('The blue book is second')``), read the
clock (``datetime.now()``), sorted an undefined ``list``, or counted a list of item names that
dropped their quantities (``len(['goat', 'three bears', ...])``). The coder reads the task verbatim
and is prompted to compute.

A code task (a function stub in the prompt; ``code_examples``, on by default; no client tools)
runs as coder branches on the strongest models, each checked on the docstring's examples in the
sandbox, in parallel rounds (:mod:`._code_roles`).
"""

from __future__ import annotations

import asyncio
import copy
import functools
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from .._prompts import render
from .._text import normalize, numbers_in, parse_number
from ..models.types import msg
from ..runtime.client_actions import client_calls_problem, client_tool_lines, with_client_calls
from ..runtime.client_tools import ClientToolCall, ClientToolSpec
from ..runtime.code_work import code_plan
from ..runtime.context import RunContext
from ..runtime.options import StrategyOptions
from ..runtime.protocol import narrow
from ..runtime.synthesis import Evidence, synthesize
from ..tools.agents import ORIGINAL_MAX_CHARS
from ..tools.envelope import ToolResult
from ._code_roles import para_candidates
from .base import Answer, Strategy, Task, register, tool_lines


class Call(BaseModel):
    """One call in a parallel round: a tool or agent tool, its input, and optionally a model."""

    model_config = ConfigDict(extra="ignore")

    tool: str = Field(max_length=40)
    input: str = Field(default="", max_length=600)
    model: str | None = Field(default=None, max_length=80)
    args: dict[str, Any] | None = None


PAPER_CALLS = 4  # calls per round in the paper, and the default of option ``max_calls``
MOST_CALLS = 64  # the largest ``max_calls``: one decision holds them all, at up to 600 characters of input each


class ParaAction(BaseModel):
    """ParaManager's action: up to ``max_calls`` calls this round (:func:`para_action`), or stop (``final``)."""

    model_config = ConfigDict(extra="ignore")

    thought: str = Field(default="", max_length=200)
    calls: list[Call] = Field(default_factory=list, max_length=PAPER_CALLS)
    final: bool = False


@functools.lru_cache(maxsize=8)
def para_action(max_calls: int) -> type[ParaAction]:
    """The action schema of an episode whose option ``max_calls`` is ``max_calls``: at most that many
    calls validate. Named ``ParaAction`` whatever the limit, as decisions are recorded by schema name."""
    if max_calls == PAPER_CALLS:
        return ParaAction
    return create_model("ParaAction", __base__=ParaAction, __module__=__name__,
                        calls=(list[Call], Field(default_factory=list, max_length=max_calls)))


def with_client_tools(cls: type[ParaAction], spec: ClientToolSpec) -> type[ParaAction]:
    """``cls`` whose calls of ``spec``'s client tools are checked (:func:`client_calls_problem`)."""

    class ParaAction(cls):  # type: ignore[valid-type,misc]  # a subclass made per spec, named as recorded
        @model_validator(mode="after")
        def _client_calls_fit(self) -> ParaAction:
            why = client_calls_problem(spec, [(c.tool, c.args) for c in self.calls])
            if why is not None:
                raise ValueError(why)
            return self

    return ParaAction


EMPTY_ACTION = ('your reply made no call and did not set "final", and nothing has run yet. Make the calls '
                'the task needs (one per question when it asks several), or set "final" to true to have it '
                'answered directly.')


@register
class Para(Strategy):
    name = "para"
    summary = "ParaManager: rounds of up to 4 parallel calls over agents and tools, then answer synthesis"
    paper = "ParaManager: Small Model as Master Orchestrator (unified agent-tool orchestration)"
    calls_client_tools = True  # serve's client tools sit beside the pool's, marked; calling one pauses the round

    class Options(StrategyOptions):
        max_rounds: int = Field(default=12, ge=1, description="most orchestrator rounds before synthesis (paper: 12)")
        max_calls: int = Field(default=PAPER_CALLS, ge=1, le=MOST_CALLS,
                               description=f"most parallel calls per round (paper: {PAPER_CALLS}; 1 to {MOST_CALLS})")
        max_invalid_rounds: int = Field(
            default=3, ge=0, description="rounds in a row without a valid action before para stops deciding and "
                                         "answers from the results it has (0 = never stop early)")
        programs_by_coder: bool = Field(
            default=True, description="send a python call whose program uses no number of the task to the coder "
                                      "agent with the whole task (when the pool's tools have a coder)")
        code_examples: bool = Field(default=True, description=(
            "a code task (a function stub in the prompt) runs coder branches on the strongest models, each checked "
            "on the docstring's examples in the sandbox, instead of orchestrator rounds"))
        code_candidates: int = Field(default=2, ge=1, le=8, description=(
            "code tasks: coder branches in each parallel round (the executor first, then the strongest models)"))
        code_rounds: int = Field(default=2, ge=1, le=6, description=(
            "code tasks with examples: most rounds; a round after the first repairs each branch that fails an example"))

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        if opts.code_examples and ctx.client_tools is None and (code := code_plan(task.prompt)) is not None:
            return await para_candidates(ctx, task, code, width=opts.code_candidates, rounds=opts.code_rounds)
        max_rounds, max_calls = opts.max_rounds, opts.max_calls
        system = msg("system", render(
            "para_system",
            max_calls=max_calls,
            tools=tool_lines(ctx),
            models="\n".join(_model_line(row) for row in ctx.pool.describe()),
        ))
        schema_cls = para_action(max_calls)
        schema = narrow(schema_cls.model_json_schema(), {"tool": ctx.tools.names, "model": ctx.pool.names},
                        drop=("args",))
        history: list[str] = []
        results: list[tuple[Call, ToolResult]] = []
        invalid = streak = 0
        done: set[tuple[str, str, str | None]] = set()  # calls already run (tool, input, model)
        stop = "rounds"
        for rnd in range(1, max_rounds + 1):
            ctx.budget.new_round()
            with ctx.tracer.span("round", f"round {rnd}"):
                prompt = render("para_round", task=task.prompt, history=_recent(history), round=rnd,
                                max_rounds=max_rounds)
                spec = ctx.client_tools.spec if ctx.client_tools is not None else ClientToolSpec(())
                if spec.offered:  # a continuation may change them: read each round
                    decision = await ctx.decide(with_client_tools(schema_cls, spec),
                                                [system, msg("user", prompt + "\n\n" + client_tool_lines(spec))],
                                                json_schema=with_client_calls(copy.deepcopy(schema), spec),
                                                name=f"round {rnd}")
                else:
                    decision = await ctx.decide(schema_cls, [system, msg("user", prompt)], json_schema=schema,
                                                name=f"round {rnd}")
                action = decision.action
                problem = f"your reply was not a valid action ({decision.error})." if action is None else None
                if action is not None and not action.calls and not action.final and not results \
                        and rnd < max_rounds:
                    # neither a call nor a stop, with no result to answer from: a non-action, which on a task
                    # of several questions was the 1.5B's usual first reply; shown back as an invalid one
                    ctx.tracer.event("empty_action", {"round": rnd})
                    problem = EMPTY_ACTION
                if action is None or problem is not None:
                    invalid, streak = invalid + 1, streak + 1
                    history.append(f"Round {rnd}: {problem}")
                    if streak == opts.max_invalid_rounds:
                        stop = "invalid_decisions"
                        break  # a model that cannot produce the format will not start now: stop spending
                    continue
                streak = 0
                if not action.calls:
                    stop = "final"
                    break
                asked = [self._routed(ctx, c, task.prompt, rnd) if opts.programs_by_coder else c
                         for c in action.calls]
                fresh = {_key(c): c for c in asked if _key(c) not in done}
                calls = list(fresh.values())  # each distinct call once
                if not calls:  # the same calls again would give the same results: nothing new can come
                    ctx.tracer.event("repeated_calls", {"round": rnd, "calls": [_describe(c) for c in action.calls]})
                    stop = "repeated_calls"
                    break
                done.update(fresh)
                outcomes = await self._run_round(ctx, calls, {t.name for t in spec.tools})
                known = {_value(r) for _, r in results if r.ok} - {""}
                for call, result in zip(calls, outcomes):
                    results.append((call, result))
                    history.append(f"[R{len(results)}] {_describe(call)} -> {result.feedback(300)}")
                if known and all(r.ok and _value(r) in known for r in outcomes):
                    # every call of the round gave back a result the episode had: it is checking, not solving
                    ctx.tracer.event("recomputed_results", {"round": rnd, "calls": [_describe(c) for c in calls]})
                    stop = "recomputed"
                    break
                if action.final:  # calls sent together with final are the last ones
                    stop = "final"
                    break
        evidence = [Evidence(f"{_describe(c)} -> {r.feedback(600)}", r.output if r.ok else None) for c, r in results]
        text = await synthesize(task.prompt, evidence, ctx)
        meta = {"rounds": rnd, "calls": len(results), "invalid_decisions": invalid, "stop": stop}
        if ctx.client_tools is not None:
            meta["client_tool_calls"] = ctx.client_tools.called
        return Answer(text, meta=meta)

    @staticmethod
    def _routed(ctx: RunContext, call: Call, task: str, rnd: int) -> Call:
        """``call``, or a coder call on the whole task when it is a program that computes nothing of the task's."""
        code = call.args.get("code") if call.args else call.input
        if call.tool != "python" or "coder" not in ctx.tools or not isinstance(code, str) \
                or uses_task_numbers(code, task):
            return call
        ctx.tracer.event("program_to_coder", {"round": rnd, "code": code[:600], "model": call.model})
        whole = {"task": task[:ORIGINAL_MAX_CHARS]}  # the agent's argument limit
        return Call.model_construct(tool="coder", input="(the whole task)", model=call.model, args=whole)

    async def _run_round(self, ctx: RunContext, calls: list[Call], client: set[str]) -> list[ToolResult]:
        """The round's calls, at once: the pool's in parallel and the client's (the episode pauses
        until the client sends their results), each result in its call's place."""
        mine = [c for c in calls if c.tool in client]
        asked = [ClientToolCall(c.tool, c.args or {}) for c in mine]

        async def client_calls() -> list[ToolResult]:
            return await ctx.call_client_tools(asked) if asked else []

        ours, theirs = await asyncio.gather(
            ctx.parallel(self._run_call(ctx, c) for c in calls if c.tool not in client), client_calls())
        ours_left, theirs_left = iter(ours), iter(theirs)
        return [next(theirs_left) if c.tool in client else next(ours_left) for c in calls]

    @staticmethod
    async def _run_call(ctx: RunContext, call: Call) -> ToolResult:
        args: dict[str, Any] | None = call.args
        if args is None and call.tool in ctx.tools:
            args = ctx.tools.get(call.tool).args_from_input(call.input)
        return await ctx.call_tool(call.tool, args, model=call.model)


def uses_task_numbers(code: str, task: str) -> bool:
    """Whether ``code`` writes a number that ``task`` writes (``706 * 280`` for "What is 706 times 280?")."""
    given = {abs(n) for n in numbers_in(task)}
    return any(abs(n) in given for n in numbers_in(code))


def _value(result: ToolResult) -> str:
    """A result's answer value, comparable across tools: its last line, a number as a number."""
    cited = Evidence(result.output).citable()
    number = parse_number(cited)
    return repr(number) if number is not None else normalize(cited)


def _key(call: Call) -> tuple[str, str, str | None]:
    return call.tool, call.input.strip() if not call.args else repr(sorted(call.args.items())), call.model


def _describe(call: Call) -> str:
    where = f" on {call.model}" if call.model else ""
    said = call.input or (orjson.dumps(call.args).decode() if call.args else "")
    return f"{call.tool}{where} <- {said[:120]!r}"


# after the results, where stopping is the choice to weigh (round 1 reads no such line)
ANSWERED_HINT = 'When a result above already answers the task, reply with "final": true and no calls.\n'


def _recent(history: list[str], keep: int = 8) -> str:
    if not history:
        return "No calls yet."
    shown = history[-keep:]
    skipped = len(history) - len(shown)
    head = f"({skipped} earlier results omitted)\n" if skipped else ""
    return "Results so far:\n" + head + "\n".join(shown) + "\n" + ANSWERED_HINT


def _model_line(row: dict[str, Any]) -> str:
    price = "price unknown" if row["price_in"] is None else f"${row['price_in']}/{row['price_out']} per Mtok"
    return f"- {row['name']} (tier {row['tier']}, {price}): {row['description']}"
