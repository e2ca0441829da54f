"""Tools: typed functions with a JSON-schema argument model, and agent tools (executor strategies
with the same call shape). Every call returns a :class:`ToolResult` envelope; a failing tool
returns a status, it never raises into the orchestrator.
"""

from __future__ import annotations

from ._ranking import nearest
from .agents import AgentArgs, PromptAgent, agent_tools
from .context import ToolContext
from .defaults import default_tools
from .envelope import ToolResult, ToolStatus
from .registry import Tool, ToolRegistry

__all__ = [
    "AgentArgs", "PromptAgent", "Tool", "ToolContext", "ToolRegistry", "ToolResult", "ToolStatus", "agent_tools",
    "default_tools", "nearest",
]
