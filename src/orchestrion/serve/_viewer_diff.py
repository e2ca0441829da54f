"""What the compare view diffs between two episodes' decisions: each decision's action, reduced
to the fields that say what the orchestrator did.

:func:`action_facets` turns a parsed action (any strategy's schema) into ``tools`` (the tools,
agents or primitives it names, in order), ``inputs`` (what it hands them: each call's ``input``,
``task``, ``instruction`` or ``request``, in order) and ``final`` (whether it ends the episode:
a ``final``/``done`` flag, or an ``action`` such as ``complete``/``finish``). The page aligns the
two episodes' decisions by sequence (the n-th decision of one beside the n-th of the other,
the last attempt of each) and marks where tools, inputs, model, final or validity differ.
"""

from __future__ import annotations

from typing import Any

TOOL_KEYS = ("tool", "primitive", "agent")
INPUT_KEYS = ("input", "task", "instruction", "request", "expression", "query")
FINAL_FLAGS = ("final", "done")
FINAL_ACTIONS = {"complete", "finish", "final", "answer", "stop"}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def action_facets(action: Any) -> dict[str, Any]:
    """``{"tools": [...], "inputs": [...], "final": bool | None}`` of one parsed action."""
    tools: list[str] = []
    inputs: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            names = [node[k] for k in TOOL_KEYS if isinstance(node.get(k), str) and node[k]]
            tools.extend(names)
            if names:  # a call: what it is given
                inputs.extend(_text(node[k]) for k in INPUT_KEYS if k in node and node[k] not in (None, ""))
            for key, value in node.items():
                if key not in TOOL_KEYS and (not names or key not in INPUT_KEYS):
                    visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(action)
    final: bool | None = None
    if isinstance(action, dict):
        flags = [action[k] for k in FINAL_FLAGS if isinstance(action.get(k), bool)]
        kind = action.get("action") or action.get("type")
        if flags:
            final = any(flags)
        elif isinstance(kind, str):
            final = kind.lower() in FINAL_ACTIONS
    return {"tools": tools, "inputs": inputs, "final": final}
