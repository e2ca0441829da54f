"""Runtime: what every strategy runs on. One episode from start to finish (:mod:`.episode`), the
run context (models, tools, tracer, budget, options and answer channel of one episode), budgets,
the DAG scheduler, plans, sub-agents, action schemas and the final answer's synthesis.
"""

from __future__ import annotations

from .answer import AnswerChannel
from .budget import Budget, BudgetTracker
from .context import Decision, RunContext
from .episode import EpisodeArgs, EpisodeResult, EpisodeStrategy, Review, run_episode
from .options import StrategyOptions
from .plan import Plan, Subtask, execute_plan
from .protocol import Revision, SubAgentAction
from .scheduler import Node, NodeResult, run_dag
from .subagent import Harness, SubAgent, SubAgentReport
from .types import Answer, Task

__all__ = [
    "AnswerChannel", "EpisodeArgs", "EpisodeResult", "EpisodeStrategy", "Review", "run_episode",
    "Answer", "Budget", "BudgetTracker", "Decision", "Harness", "Node", "NodeResult", "Plan", "Revision",
    "RunContext", "StrategyOptions", "SubAgent", "SubAgentAction", "SubAgentReport", "Subtask", "Task",
    "execute_plan", "run_dag",
]
