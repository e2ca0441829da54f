"""Evaluation: datasets, scorers, a resumable runner (one lock per run) and reports."""

from __future__ import annotations

from ._lock import LOCKED_KINDS, recover_dead_runs, run_lock
from .datasets import Dataset, fetch_dataset, list_datasets, load_dataset
from .report import write_report
from .runner import EvalConfig, EvalRun, run_eval
from .scorers import Score, Scorer, pass_at_k
from .summary import StrategySummary, summarize

__all__ = [
    "LOCKED_KINDS", "Dataset", "EvalConfig", "EvalRun", "Score", "Scorer", "StrategySummary", "fetch_dataset",
    "list_datasets", "load_dataset", "pass_at_k", "recover_dead_runs", "run_eval", "run_lock", "summarize",
    "write_report",
]
