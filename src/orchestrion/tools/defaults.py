"""The default tool registry: plain tools plus the agent tools."""

from __future__ import annotations

from pathlib import Path

from .registry import ToolRegistry


def default_tools(corpus: str | Path | None = None) -> ToolRegistry:
    """python, calculator, retrieve (over ``corpus`` when given) and the five agent tools."""
    from .agents import agent_tools
    from .calculator import CalculatorTool
    from .python_exec import PythonTool
    from .retrieval import Corpus, RetrievalTool

    loaded = Corpus.from_path(corpus) if corpus is not None else None
    return ToolRegistry([PythonTool(), CalculatorTool(), RetrievalTool(loaded), *agent_tools()])
