"""Orchestrion: learned agentic orchestration on one runtime.

The public API is re-exported here; submodules are importable but private by
convention. The eval and train names are imported on first access (module
``__getattr__``), so ``import orchestrion`` loads neither package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    BudgetExceededError,
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelUnavailableError,
    OrchestrionError,
    PlanError,
    StrategyNotFoundError,
    StructuredOutputError,
    ToolNotFoundError,
    TraceError,
)
from .api import EpisodeResult, solve, solve_sync
from .models import (
    Completion,
    GenerateConfig,
    Message,
    Model,
    ModelSpec,
    Pool,
    PoolConfig,
    Price,
    ScriptedModel,
    Usage,
    msg,
)
from .models.pool import load_pool
from .runtime.budget import Budget, BudgetTracker
from .runtime.context import Decision, RunContext
from .runtime.plan import Plan, Subtask, execute_plan
from .runtime.protocol import Call, ParaAction, Revision, SubAgentAction
from .runtime.scheduler import Node, NodeResult, run_dag
from .runtime.subagent import Harness, SubAgent, SubAgentReport
from .strategies.base import Answer, Strategy, Task, register
from .strategies.registry import get_strategy, strategies
from .tools.defaults import default_tools
from .tools.envelope import ToolResult, ToolStatus
from .tools.registry import Tool, ToolRegistry
from .trace.store import TraceStore
from .trace.tracer import Span, Tracer

if TYPE_CHECKING:
    from .eval.datasets import Dataset, fetch_dataset, list_datasets, load_dataset
    from .eval.report import write_report
    from .eval.runner import EvalConfig, EvalRun, run_eval
    from .eval.scorers import Score, Scorer, pass_at_k
    from .eval.summary import StrategySummary, summarize
    from .train.records import DecisionRecord, RecordFilter, filter_records, load_records
    from .train.rewards import RewardConfig
    from .train.settings import GRPOSettings, OPODSettings, RolloutSettings, SFTSettings, TreeSettings

# public name -> module it lives in, imported on first access
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Dataset", "fetch_dataset", "list_datasets", "load_dataset"), ".eval.datasets"),
    "write_report": ".eval.report",
    **dict.fromkeys(("EvalConfig", "EvalRun", "run_eval"), ".eval.runner"),
    **dict.fromkeys(("Score", "Scorer", "pass_at_k"), ".eval.scorers"),
    **dict.fromkeys(("StrategySummary", "summarize"), ".eval.summary"),
    **dict.fromkeys(("DecisionRecord", "RecordFilter", "filter_records", "load_records"), ".train.records"),
    "RewardConfig": ".train.rewards",
    **dict.fromkeys(("GRPOSettings", "OPODSettings", "RolloutSettings", "SFTSettings", "TreeSettings"),
                    ".train.settings"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "Answer", "Budget", "BudgetExceededError", "BudgetTracker", "Call", "Completion", "ConfigError",
    "Decision", "EpisodeResult", "GenerateConfig", "Harness", "Message", "Model", "ModelError",
    "ModelHTTPError", "ModelNotFoundError", "ModelSpec", "ModelUnavailableError", "Node", "NodeResult",
    "OrchestrionError", "ParaAction", "Plan", "PlanError", "Subtask", "execute_plan", "Pool", "PoolConfig", "Price",
    "Revision", "RunContext", "ScriptedModel",
    "Span", "Strategy", "StrategyNotFoundError", "StructuredOutputError", "SubAgent", "SubAgentAction",
    "SubAgentReport", "Task", "Tool", "ToolNotFoundError", "ToolRegistry", "ToolResult", "ToolStatus",
    "TraceError", "TraceStore", "Tracer", "Usage", "__version__", "default_tools", "get_strategy", "load_pool",
    "msg", "register", "run_dag", "solve", "solve_sync", "strategies",
    "Dataset",
    "GRPOSettings", "OPODSettings", "RolloutSettings", "SFTSettings", "TreeSettings",
    "fetch_dataset",
    "list_datasets",
    "load_dataset",
    "write_report",
    "EvalConfig",
    "EvalRun",
    "run_eval",
    "Score",
    "Scorer",
    "pass_at_k",
    "StrategySummary",
    "summarize",
    "DecisionRecord",
    "RecordFilter",
    "filter_records",
    "load_records",
    "RewardConfig",
]
