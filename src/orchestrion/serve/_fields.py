"""What happens to each request field: honoured, refused with a 400, or accepted and ignored.

No field is silently ignored. Every field of OpenAI's chat-completions request has a
:class:`Rule` in :data:`CHAT_FIELDS` (and every field of a Responses request one in
:data:`RESPONSES_FIELDS`) that says what serve does with it:

- ``honoured``: serve does what the field asks (a value it cannot honour is a 400 that says why);
- ``refused``: any value other than the field's neutral one (``null``, ``false``, ``0``, empty)
  is a 400 that says why, since the answer would not be what the client asked for;
- ``ignored``: accepted, with no effect, for the reason given. Such fields, and fields no
  OpenAI schema has, are listed back to the client in the ``X-Orchestrion-Ignored-Fields``
  header and the response's ``orchestrion.ignored``.

The same holds at every depth: a key inside a field (``stream_options.bogus``,
``messages.0.bogus``, ``response_format.json_schema.bogus``, a content part's or an input
item's key that is not read) is listed back by its dotted path, as a top-level one is.

Types are checked first (``temperature: "hot"`` is a 400 naming the field, as vLLM's schema does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

Fate = Literal["honoured", "refused", "ignored"]
Check = Callable[[Any], str | None]  # a value -> why it is refused (None: accepted)


@dataclass(frozen=True)
class Rule:
    fate: Fate
    note: str  # what happens to the field, and why (shown in /docs and the handbook's serving page)
    check: Check | None = None  # honoured fields: the values refused


def _neutral(value: Any) -> bool:
    return value is None or value is False or value == 0 or value == [] or value == {} or value == ""


def _refused(why: str, *, even_empty: bool = False) -> Rule:
    """Refused unless neutral; ``even_empty``: refused for any value but null (``{}`` turns a feature on)."""
    return Rule("refused", why, lambda value: None if value is None or (not even_empty and _neutral(value)) else why)


def _ignored(why: str) -> Rule:
    return Rule("ignored", why)


_SAMPLING = ("each role of an episode decodes at its own temperature (decisions and synthesis greedy "
             "by default: small models miscopy digits when sampled); set orchestrion.options "
             "decision_temperature, synthesis_temperature or agent_temperature instead")
_CLIENT_TOOLS = ("function tools the strategy may call (direct: instead of answering; para: beside the pool's "
                 "tools, marked as client tools): a call is answered with message.tool_calls and finish_reason "
                 "'tool_calls', its arguments valid for the tool's JSON schema (constrained decoding where the "
                 "backend has it); the next request, carrying the tool messages, continues the same episode. "
                 "A malformed tool is a 400")
_CHOICE = ("'none' (no tool is offered), 'auto', 'required' (a tool must be called) or "
           "{'type': 'function', 'function': {'name': ...}} (that one must be called); a name that is not in "
           "tools is a 400")
_LOGPROBS = ("token log-probs of the answer are not available: the answer is written by the episode "
             "(a synthesis grounded on results, its citations replaced by them, or several model calls), "
             "and the runtime records log-probs only for orchestrator decisions (see the trace)")
# OpenAI's deprecated function calling: vLLM's request schema has neither field either (it drops them,
# logging a warning); here a request that uses them is refused with the fields that replace them
_LEGACY = ("OpenAI's deprecated form of tools, not read here: send each function as a tool in 'tools' "
           "({'type': 'function', 'function': {name, description, parameters}}), and function_call as 'tool_choice'")
LEGACY_CHOICE = ("OpenAI's deprecated form of tool_choice, read only as 'none' or 'auto' without tools: send "
                 "'tool_choice' ('none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}) "
                 "and the functions as 'tools'")
_RECORDED = "recorded in the episode's task metadata (the trace)"
_CACHE = "prompt prefixes are cached automatically, per model (Orchestrion's prefix cache)"
_MODEL = Rule("honoured", "the strategy that answers: orchestrion/<strategy> (404 for another)")
_META = Rule("honoured", _RECORDED)
_IGNORED_COMMON: dict[str, Rule] = {
    "temperature": _ignored(_SAMPLING),
    "top_p": _ignored(_SAMPLING),
    "store": _ignored("every episode is stored in the trace store whatever this says (nothing is lost)"),
    "service_tier": _ignored("this server has one tier, bounded by its --max-concurrent"),
    "prompt_cache_key": _ignored(_CACHE),
    "prompt_cache_retention": _ignored(_CACHE),
    "prompt_cache_options": _ignored(_CACHE),
    "metadata": _META,
    "user": _META,
    "safety_identifier": _META,
    "moderation": _refused("no moderation model is run on this server", even_empty=True),
}


def _function_call(value: Any) -> str | None:
    return None if value is None or value in ("none", "auto") else LEGACY_CHOICE


def _n(value: Any) -> str | None:
    return None if value in (None, 1) else "only n=1 is supported (one episode per request)"


def _modalities(value: Any) -> str | None:
    return None if value is None or set(value) <= {"text"} else "only text answers: modalities ['text']"


CHAT_FIELDS: dict[str, Rule] = {
    "model": _MODEL,
    "messages": Rule("honoured", "the conversation becomes the episode's task: system and developer messages "
                     "as instructions, earlier turns as context, the last user message as the request; "
                     "text parts only (an image, audio or file part is a 400)"),
    "stream": Rule("honoured", "server-sent events: the answer token by token (progress chunks when asked for)"),
    "stream_options": Rule("honoured", "include_usage adds the usage chunk; include_progress (Orchestrion's, also "
                           "the header X-Orchestrion-Progress: true) adds a progress chunk per span start and end; "
                           "include_obfuscation is ignored (no padding is sent)"),
    "max_tokens": Rule("honoured", "the answer's token limit (finish_reason 'length' when it is reached)"),
    "max_completion_tokens": Rule("honoured", "as max_tokens (the lower of the two applies)"),
    "n": Rule("honoured", "one choice: n=1 only (one episode per request)", _n),
    "stop": Rule("honoured", "the answer ends before the first stop string (finish_reason 'stop', "
                 "stop_reason the string); a stream never sends text past one"),
    "seed": Rule("honoured", "the episode's base sampling seed (orchestrion.options.seed, which wins)"),
    "response_format": Rule("honoured", "text, json_object or json_schema: the answer is one JSON value "
                            "that fits (constrained decoding where the backend has it, else repaired)"),
    "modalities": Rule("honoured", "text only ('audio' is a 400)", _modalities),
    "tools": Rule("honoured", _CLIENT_TOOLS),
    "functions": _refused(_LEGACY),
    "tool_choice": Rule("honoured", _CHOICE),
    "function_call": Rule("honoured", "legacy: 'none' or 'auto' in a request without tools (no function is called); "
                          "any other value, or any value beside tools, is a 400 that says to send tool_choice",
                          _function_call),
    "parallel_tool_calls": Rule("honoured", "false: at most one client tool call per response (para may call "
                                "several client tools in one round otherwise; direct calls one at a time)"),
    "logprobs": _refused(_LOGPROBS),
    "top_logprobs": _refused(_LOGPROBS),
    "logit_bias": _refused("token ids differ between the pool's models, and the backends take no bias"),
    "frequency_penalty": _refused("the pool's backends take no frequency penalty"),
    "presence_penalty": _refused("the pool's backends take no presence penalty"),
    "audio": _refused("only text answers: no audio output", even_empty=True),
    "web_search_options": _refused("no web search: the pool's tools run offline (the knowledge searcher "
                                   "reads a local corpus)", even_empty=True),
    "reasoning_effort": _ignored("no pool model takes a reasoning-effort control; how much work an "
                                 "answer gets is the strategy's, bounded by orchestrion.budget"),
    "verbosity": _ignored("no pool model takes a verbosity control"),
    "prediction": _ignored("a predicted output only speeds up a hosted model; the answer is the same"),
    **_IGNORED_COMMON,
    "orchestrion": Rule("honoured", "Orchestrion's extension: strategy options, budget, errors_as_200"),
}

RESPONSES_FIELDS: dict[str, Rule] = {
    "model": _MODEL,
    "input": Rule("honoured", "a string, or message items (text parts only), as chat messages"),
    "instructions": Rule("honoured", "as a system message before the input"),
    "stream": Rule("honoured", "Responses events: created, output_text deltas token by token, completed"),
    "stream_options": _ignored("include_obfuscation: no padding is sent"),
    "max_output_tokens": Rule("honoured", "the answer's token limit (status 'incomplete' when it is reached)"),
    "text": Rule("honoured", "format text, json_object or json_schema (as chat's response_format); "
                 "verbosity is ignored"),
    "tools": Rule("honoured", "function tools, as chat's tools: a call ends the response with function_call "
                  "output items; the next request's function_call_output input items continue the same episode; "
                  "another tool type is a 400"),
    "tool_choice": Rule("honoured", "as chat's: 'none', 'auto', 'required' or {'type': 'function', 'name': ...}"),
    "parallel_tool_calls": Rule("honoured", "as chat's: false allows one client tool call per response"),
    "max_tool_calls": _ignored("the strategy's own tool calls are bounded by orchestrion.budget (steps)"),
    "top_logprobs": _refused(_LOGPROBS),
    "include": Rule("honoured", "nothing extra can be included: a non-empty list is a 400",
                    lambda v: None if not v else "no extra output can be included (no tool calls, no log-probs, "
                                                 "no reasoning text)"),
    "previous_response_id": _refused("this server keeps no responses: send the whole conversation as input"),
    "conversation": _refused("this server keeps no conversations: send the whole conversation as input"),
    "prompt": _refused("no stored prompt templates: send the prompt as input", even_empty=True),
    "background": _refused("no background responses: use stream to follow a long episode"),
    "background_options": _ignored("no background responses"),
    "context_management": _ignored("the whole input becomes the task; nothing is compacted"),
    "truncation": _ignored("the whole input becomes the task; nothing is truncated"),
    "reasoning": _ignored("no pool model takes a reasoning control; no reasoning summary is produced"),
    "image": _refused("no image generation", even_empty=True),
    "access_programs": _ignored("no access programs on this server"),
    **_IGNORED_COMMON,
    "orchestrion": CHAT_FIELDS["orchestrion"],
}


def screen(req: BaseModel, rules: dict[str, Rule]) -> tuple[list[str], tuple[str, str] | None]:
    """The fields of ``req`` that are ignored (ignored by rule, or unknown), and the first refused
    one with why (None when nothing is refused). Only fields the client sent are looked at."""
    ignored: list[str] = []
    for name in sorted(req.model_fields_set):
        rule = rules.get(name)
        if rule is None:
            continue
        why = rule.check(getattr(req, name)) if rule.check is not None else None
        if why is not None:
            return ignored, (name, why)
        if rule.fate == "ignored" and getattr(req, name) is not None:
            ignored.append(name)
    ignored += sorted(req.model_extra or {})
    for name in _declared(req):
        ignored += nested_extras(getattr(req, name), _key(req, name))
    return ignored, None


def nested_extras(value: Any, where: str) -> list[str]:
    """The keys below ``where`` that no schema has (``where.key``, at any depth of models and lists)."""
    if isinstance(value, BaseModel):
        found = [f"{where}.{key}" for key in sorted(value.model_extra or {})]
        for name in _declared(value):
            found += nested_extras(getattr(value, name), f"{where}.{_key(value, name)}")
        return found
    if isinstance(value, list):
        return [key for i, item in enumerate(value) for key in nested_extras(item, f"{where}.{i}")]
    return []


def unread_keys(item: dict[str, Any], read: frozenset[str], where: str) -> list[str]:
    """The keys of a plain JSON object (a content part, an input item) that serve does not read."""
    return [f"{where}.{key}" for key in sorted(item) if key not in read]


def _declared(model: BaseModel) -> list[str]:
    """The declared fields the client sent (``model_fields_set`` also holds the extra keys)."""
    return sorted(name for name in model.model_fields_set if name in type(model).model_fields)


def _key(model: BaseModel, name: str) -> str:
    """A field's name as the client sends it (its alias: ``schema``, not ``schema_``)."""
    return type(model).model_fields[name].alias or name
