"""A request's client tools, read and checked: ``tools``, ``tool_choice`` and ``parallel_tool_calls``.

Each tool is a function tool: chat's ``{"type": "function", "function": {"name", "description",
"parameters", "strict"}}`` or the Responses API's flat ``{"type": "function", "name", ...}``.
``name`` is 1 to 64 letters, digits, ``_`` or ``-``, unique; ``parameters`` is a JSON Schema of
type ``object`` (none: no arguments). ``tool_choice`` is ``none`` (no tool is offered),
``auto`` (the default with tools: the strategy may call one or answer), ``required`` (it must
call one) or a named function (``{"type": "function", "function": {"name": ...}}``, or the
Responses API's ``{"type": "function", "name": ...}``: it must call that one).
``parallel_tool_calls: false`` allows one call per response. Anything else is a 400 with one line
that names the field.
"""

from __future__ import annotations

import re
from typing import Any

from ..runtime.client_tools import ClientTool, ClientToolSpec
from ..runtime.json_check import schema_problem
from ._api_error import ApiError

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def _bad(where: str, why: str, code: str = "invalid_tool") -> ApiError:
    return ApiError(400, f"'{where}': {why}", code=code, param=where)


def tool_spec(tools: list[dict[str, Any]] | None, choice: str | dict[str, Any] | None, parallel: bool | None,
              *, flat: bool = False) -> ClientToolSpec | None:
    """The client tools of a request (None when it sends none), or a 400 naming what is wrong.
    ``flat``: the Responses API's tool shape."""
    found = tuple(_tool(t, f"tools.{i}", flat) for i, t in enumerate(tools or []))
    names = [t.name for t in found]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise _bad(f"tools.{i}.name" if flat else f"tools.{i}.function.name", f"a second tool named {name!r}")
    mode = _choice(choice, names)
    if not found:
        return None
    return ClientToolSpec(found, mode, parallel is not False)


def _tool(tool: Any, where: str, flat: bool) -> ClientTool:
    if not isinstance(tool, dict):
        raise _bad(where, "a tool must be an object")
    if tool.get("type", "function") != "function":
        raise _bad(f"{where}.type", f"only function tools can be called here, not {tool.get('type')!r}",
                   "unsupported_tool")
    fn = tool if flat else tool.get("function")
    if not isinstance(fn, dict):
        raise _bad(f"{where}.function", "a function tool needs its 'function' object (name, description, "
                   "parameters)")
    at = where if flat else f"{where}.function"
    name = fn.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise _bad(f"{at}.name", f"{name!r} is not a function name (1 to 64 letters, digits, '_' or '-')")
    description = fn.get("description") or ""
    if not isinstance(description, str):
        raise _bad(f"{at}.description", "must be a string")
    parameters = fn.get("parameters")
    if parameters is None:
        parameters = NO_PARAMETERS
    if not isinstance(parameters, dict):
        raise _bad(f"{at}.parameters", "must be a JSON Schema object")
    if parameters.get("type", "object") != "object":
        raise _bad(f"{at}.parameters.type", f"the arguments must be an object, not {parameters.get('type')!r}")
    why = schema_problem(parameters, f"{at}.parameters")
    if why is not None:
        field, _, rest = why.partition(": ")
        raise _bad(field, rest)
    return ClientTool(name, description, {"type": "object", "properties": {}, **parameters})


def _choice(choice: str | dict[str, Any] | None, names: list[str]) -> str:
    if choice is None:
        return "auto" if names else "none"
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise _bad("tool_choice", f"{choice!r} is not 'none', 'auto', 'required' or a named function",
                       "invalid_tool_choice")
        if choice == "required" and not names:
            raise _bad("tool_choice", "'required' needs tools to call, and the request has none",
                       "invalid_tool_choice")
        return choice
    fn = choice.get("function") if isinstance(choice.get("function"), dict) else choice
    name = fn.get("name") if isinstance(fn, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise _bad("tool_choice", "a named choice is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                   "invalid_tool_choice")
    if name not in names:
        known = ", ".join(names) or "none"
        raise _bad("tool_choice", f"names the function {name!r}, which is not in tools (they are: {known})",
                   "invalid_tool_choice")
    return name
