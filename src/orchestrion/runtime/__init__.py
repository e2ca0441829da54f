"""Runtime: what every strategy runs on. The run context (models, tools, tracer, budget and
options of one episode), budgets, the DAG scheduler, plans, sub-agents, action schemas and the
final answer's synthesis.
"""

from __future__ import annotations

from .budget import Budget, BudgetTracker
from .context import Decision, RunContext
from .options import StrategyOptions
from .plan import Plan, Subtask, execute_plan
from .protocol import Revision, SubAgentAction
from .scheduler import Node, NodeResult, run_dag
from .subagent import Harness, SubAgent, SubAgentReport
from .types import Answer, Task

__all__ = [
    "Answer", "Budget", "BudgetTracker", "Decision", "Harness", "Node", "NodeResult", "Plan", "Revision",
    "RunContext", "StrategyOptions", "SubAgent", "SubAgentAction", "SubAgentReport", "Subtask", "Task",
    "execute_plan", "run_dag",
]
