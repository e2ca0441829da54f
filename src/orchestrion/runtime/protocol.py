"""Action schemas shared by strategies: what sub-agents may output, as pydantic models, and how
a schema is pinned to the names that exist (each strategy keeps its own orchestrator action:
para's ``ParaAction`` lives in :mod:`orchestrion.strategies.para`).

String fields carry length limits so that grammar-constrained decoding on a
small model always ends; :func:`narrow` pins tool and model names to the ones
that exist, so a constrained decoder cannot invent them.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class SubAgentAction(BaseModel):
    """One sub-agent step: a tool call or a communication action (finish / revise / stop)."""

    model_config = ConfigDict(extra="ignore")

    action: Literal["tool", "finish", "revise", "stop"]
    tool: str | None = Field(default=None, max_length=40)
    input: str | None = Field(default=None, max_length=600)
    answer: str | None = Field(default=None, max_length=600)
    status: str | None = Field(default=None, max_length=120)
    request: str | None = Field(default=None, max_length=300)
    evidence: str | None = Field(default=None, max_length=400)


class Revision(BaseModel):
    """An orchestrator's change to a live sub-agent harness (POrchestra's revise_task)."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["keep", "reduce", "expand", "remove", "decompose"] = "keep"
    instruction: str | None = Field(default=None, max_length=600)
    add_context: str | None = Field(default=None, max_length=1200)
    add_tools: list[str] = Field(default_factory=list)
    remove_tools: list[str] = Field(default_factory=list)
    add_steps: int = Field(default=0, ge=0, le=100)
    constraint: str | None = Field(default=None, max_length=300)
    state: str | None = Field(default=None, max_length=1200, description="state handed to the sub-agent")
    executor: Literal["keep", "replace"] = "keep"
    model: str | None = None


def narrow(
    schema: dict[str, Any],
    enums: dict[str, list[str]],
    drop: tuple[str, ...] = (),
    optional: tuple[str, ...] = ("model",),
) -> dict[str, Any]:
    """A copy of ``schema`` for constrained decoding: each property named in ``enums`` may
    only take those values, properties in ``drop`` are left out, and every other property
    is required (except those in ``optional``), so a decoder cannot skip a field by
    leaning on its default."""
    out = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                for key in drop:
                    props.pop(key, None)
                for key, values in enums.items():
                    if key in props and values:
                        props[key] = {"enum": list(values)}
                node["required"] = [k for k in props if k not in optional]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(out)
    return out
