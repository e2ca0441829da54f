"""Client tools as actions: the schema a decision that may call them is constrained by, and the
loop a single-model strategy (``direct``) runs with them.

A decision over client tools (:class:`~orchestrion.runtime.client_tools.ClientToolSpec`) outputs
either ``{"answer": "..."}`` or ``{"tool": NAME, "arguments": {...}}``: :func:`action_schema` is a
JSON Schema whose branches are the answer (left out when ``tool_choice`` says a tool must be
called) and one branch per tool offered, with that tool's own parameter schema as
``arguments``, so a backend that constrains decoding can only write a call that fits. Whatever
comes back is still checked (:func:`action_model`: the tool exists and is offered, its
arguments fit its schema) and, when it does not fit, repaired like any decision.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, model_validator

from .._prompts import render
from ..models.types import GenerateConfig, Message, msg
from .client_tools import ClientTool, ClientToolCall, ClientToolSpec
from .context import RunContext
from .json_check import value_problem
from .synthesis import answer_directly

MAX_CLIENT_ROUNDS = 32  # client tool calls one answer may make before it must answer
# a decision's output limit, at least, whatever the answer's max_tokens: a call's arguments are written
# in it, and a call cut short would not parse (a token budget can still cut it: the episode then ends
# budget_exceeded, with no call)
ACTION_TOKENS = 512


class ClientAction(BaseModel):
    """A decision over client tools: an answer, or one call."""

    model_config = ConfigDict(extra="forbid")

    answer: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None


def call_branch(tool: ClientTool, *, name_key: str = "tool", args_key: str = "arguments") -> dict[str, Any]:
    """The JSON Schema of one call of ``tool``: its name, and arguments that fit its parameters."""
    return {"type": "object", "properties": {name_key: {"enum": [tool.name]}, args_key: tool.parameters},
            "required": [name_key, args_key], "additionalProperties": False}


def action_schema(spec: ClientToolSpec) -> dict[str, Any]:
    """What a decision over ``spec``'s tools may output (see the module doc)."""
    branches = [] if spec.must_call else [{"type": "object", "properties": {"answer": {"type": "string"}},
                                           "required": ["answer"], "additionalProperties": False}]
    branches += [call_branch(t) for t in spec.offered]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def call_problem(spec: ClientToolSpec, name: str, arguments: Any) -> str | None:
    """Why calling ``name`` with ``arguments`` is not a valid call of an offered tool (None: it is)."""
    tool = next((t for t in spec.offered if t.name == name), None)
    if tool is None:
        offered = ", ".join(t.name for t in spec.offered) or "none"
        return f"tool: {name!r} is not a tool you may call now (you may call: {offered})"
    return value_problem(tool.parameters, arguments if arguments is not None else {}, "arguments")


def action_model(spec: ClientToolSpec) -> type[ClientAction]:
    """:class:`ClientAction`, checked against ``spec`` (named ``ClientToolAction`` in the record)."""

    class ClientToolAction(ClientAction):
        @model_validator(mode="after")
        def _fits(self) -> ClientToolAction:
            if (self.answer is None) == (self.tool is None):
                raise ValueError("give either answer or tool (with its arguments), not both or neither")
            if self.tool is None:
                if spec.must_call:
                    raise ValueError("you must call a tool now, not answer")
                return self
            why = call_problem(spec, self.tool, self.arguments)
            if why is not None:
                raise ValueError(why)
            return self

    return ClientToolAction


def with_client_calls(schema: dict[str, Any], spec: ClientToolSpec, *, calls: str = "calls",
                      args_key: str = "args") -> dict[str, Any]:
    """An orchestrator's action schema whose list ``calls`` may also hold calls of ``spec``'s tools
    (each ``{"tool": NAME, args_key: {...}}`` fitting that tool's parameters); only those, at least
    one, when ``spec`` says a tool must be called."""
    if not spec.offered:
        return schema
    prop = schema["properties"][calls]
    own = [] if spec.must_call else [prop["items"]]
    prop["items"] = {"anyOf": [*own, *(call_branch(t, args_key=args_key) for t in spec.offered)]}
    if spec.must_call:
        prop["minItems"] = 1
    if not spec.parallel and spec.must_call:
        prop["maxItems"] = 1
    return schema


def client_calls_problem(spec: ClientToolSpec, calls: list[tuple[str, Any]]) -> str | None:
    """Why an orchestrator's ``(tool, args)`` calls break ``spec`` (None: they do not): a client
    call that does not fit, several client calls where ``parallel_tool_calls`` is false, or none
    where a tool must be called."""
    names = {t.name for t in spec.tools}
    client = [(name, args) for name, args in calls if name in names]
    for name, args in client:
        if (why := call_problem(spec, name, args)) is not None:
            return f"calls: {why}"
    if len(client) > 1 and not spec.parallel:
        return "calls: one client tool call per round (parallel tool calls are off)"
    if spec.must_call and not client:
        return f"calls: call one of the client tools now ({', '.join(t.name for t in spec.offered)})"
    return None


def client_tool_lines(spec: ClientToolSpec) -> str:
    """The client tools an orchestrator may call now, for its prompt (empty when none)."""
    if not spec.offered:
        return ""
    must = " You must call one of them this round." if spec.must_call else ""
    return ("Client tools (the user's application runs them; call one as {\"tool\": NAME, \"args\": {...}} with "
            f"args that fit its schema; the result comes back like any other):{must}\n"
            + "\n".join(t.line() for t in spec.offered))


def tools_prompt(spec: ClientToolSpec) -> str:
    """The system message of a decision over ``spec``'s tools."""
    if spec.must_call:
        how = 'Call one function now: reply {"tool": "<name>", "arguments": {...}}.'
    else:
        how = ('To call a function reply {"tool": "<name>", "arguments": {...}}; to answer the user reply '
               '{"answer": "<your answer>"}. Call a function only when its result helps.')
    return render("client_tools_system", functions="\n".join(t.line() for t in spec.offered), how=how)


async def answer_with_client_tools(task: str, ctx: RunContext, *, model: str | None = None,
                                   config: GenerateConfig | None = None) -> str:
    """``direct`` with client tools: each decision answers or calls one client tool; a call waits for
    its result (the episode pauses, :meth:`RunContext.call_client_tools`) and the next decision
    reads it. A decision that never validates, tools no longer offered, a call made already
    (same tool and arguments, unless a call is required: event ``repeated_client_call``), or an
    answer longer than ``config.max_tokens`` (the decision may write :data:`ACTION_TOKENS`: event
    ``answer_over_max_tokens``) end in the direct answer on the conversation so far, its calls and
    results included, under ``config``."""
    tools = ctx.client_tools
    assert tools is not None
    base = config or GenerateConfig(max_tokens=ACTION_TOKENS)
    cfg = replace(base, max_tokens=max(base.max_tokens, ACTION_TOKENS), logprobs=True)
    turns: list[Message] = [msg("user", task)]
    seen: list[str] = []
    for _ in range(MAX_CLIENT_ROUNDS):
        spec = tools.spec  # a continuation may offer other tools, or another choice
        if not spec.offered:
            break
        spent = ctx.budget.usage.output_tokens
        decision = await ctx.decide(action_model(spec), [msg("system", tools_prompt(spec)), *turns], model=model,
                                    config=cfg, json_schema=action_schema(spec), name="client tools")
        action = decision.action
        if action is None:
            break
        if action.tool is None:
            written = ctx.budget.usage.output_tokens - spent  # the decision's tokens, the answer's and more
            if written <= base.max_tokens:
                return (action.answer or "").strip()
            ctx.tracer.event("answer_over_max_tokens", {"output_tokens": written, "max_tokens": base.max_tokens})
            break
        call = ClientToolCall(action.tool, action.arguments or {})
        if not spec.must_call and f"Called {call.name} with {call.arguments_json}" in seen:
            # the same call again would bring the same result: answer from what came back (a small model loops)
            ctx.tracer.event("repeated_client_call", {"tool": call.name, "arguments": call.arguments})
            break
        [result] = await ctx.call_client_tools([call])
        said = orjson.dumps({"tool": call.name, "arguments": call.arguments}).decode()
        line = f"Result of {call.name} (status {result.status.value}): {result.output.strip() or result.error}"
        seen += [f"Called {call.name} with {call.arguments_json}", line]
        turns += [msg("assistant", said), msg("user", line + "\n\nCall another function, or answer.")]
    context = task if not seen else task + "\n\nFunction calls made so far:\n" + "\n".join(seen)
    out = await answer_directly(context, ctx, model=model, config=config)
    return out.text.strip()
