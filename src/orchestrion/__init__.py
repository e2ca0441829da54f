"""Orchestrion: learned agentic orchestration on one runtime.

The user API is re-exported here. Every package (models, tools, trace, runtime, strategies,
eval, train, serve) names its own public pieces in its ``__init__``; a module whose name starts
with ``_`` is private to its package. The eval and train names are imported on first access
(module ``__getattr__``), so ``import orchestrion`` loads neither package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from ._lazy import lazy_names
from ._version import __version__
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
from .runtime import Answer, Budget, RunContext, StrategyOptions, Task
from .status import EpisodeStatus
from .strategies import Strategy, get_strategy, register, strategies
from .tools import Tool, ToolRegistry, ToolResult, ToolStatus, default_tools
from .trace import TraceStore

if TYPE_CHECKING:
    from .eval.datasets import Dataset, fetch_dataset, list_datasets, load_dataset
    from .eval.report import write_report
    from .eval.runner import EvalConfig, EvalRun, run_eval
    from .eval.scorers import Score, Scorer, pass_at_k
    from .eval.summary import StrategySummary, summarize
    from .train.grpo import train_grpo
    from .train.opod import train_opod
    from .train.records import DecisionRecord, RecordFilter, filter_records, load_records
    from .train.rewards import RewardConfig
    from .train.settings import GRPOSettings, OPODSettings, RolloutSettings, SFTSettings, TreeSettings
    from .train.sft import train_sft

# public name -> module it lives in, imported on first access
__getattr__, __dir__ = lazy_names(__name__, globals(), {
    **dict.fromkeys(("Dataset", "fetch_dataset", "list_datasets", "load_dataset"), ".eval.datasets"),
    "write_report": ".eval.report",
    **dict.fromkeys(("EvalConfig", "EvalRun", "run_eval"), ".eval.runner"),
    **dict.fromkeys(("Score", "Scorer", "pass_at_k"), ".eval.scorers"),
    **dict.fromkeys(("StrategySummary", "summarize"), ".eval.summary"),
    **dict.fromkeys(("DecisionRecord", "RecordFilter", "filter_records", "load_records"), ".train.records"),
    "RewardConfig": ".train.rewards",
    **dict.fromkeys(("GRPOSettings", "OPODSettings", "RolloutSettings", "SFTSettings", "TreeSettings"),
                    ".train.settings"),
    "train_grpo": ".train.grpo",
    "train_opod": ".train.opod",
    "train_sft": ".train.sft",
})


# the user API: solve a task, build a pool, write a strategy or a tool, evaluate, train.
# The runtime's pieces (plans, the scheduler, sub-agents, action schemas, tracer) live in their packages.
__all__ = [
    # errors
    "BudgetExceededError", "ConfigError", "ModelError", "ModelHTTPError", "ModelNotFoundError",
    "ModelUnavailableError", "OrchestrionError", "PlanError", "StrategyNotFoundError", "StructuredOutputError",
    "ToolNotFoundError", "TraceError",
    # solving
    "EpisodeResult", "EpisodeStatus", "Task", "__version__", "solve", "solve_sync",
    # models
    "Completion", "GenerateConfig", "Message", "Model", "ModelSpec", "Pool", "PoolConfig", "Price", "ScriptedModel",
    "Usage", "load_pool", "msg",
    # strategies and tools
    "Answer", "Budget", "RunContext", "Strategy", "StrategyOptions", "Tool", "ToolRegistry", "ToolResult",
    "ToolStatus", "default_tools", "get_strategy", "register", "strategies",
    # traces
    "TraceStore",
    # eval (imported on first access)
    "Dataset", "EvalConfig", "EvalRun", "Score", "Scorer", "StrategySummary", "fetch_dataset", "list_datasets",
    "load_dataset", "pass_at_k", "run_eval", "summarize", "write_report",
    # train (imported on first access)
    "DecisionRecord", "GRPOSettings", "OPODSettings", "RecordFilter", "RewardConfig", "RolloutSettings",
    "SFTSettings", "TreeSettings", "filter_records", "load_records", "train_grpo", "train_opod", "train_sft",
]
