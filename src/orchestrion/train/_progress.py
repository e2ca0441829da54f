"""Progress of the policy trainers: log lines and a rich step bar with an ETA, on stderr.

:class:`StepBar` is what ``train grpo`` and ``train opod`` show: one bar over the optimizer
steps (those done before a resume count as done, so the ETA covers only what is left), a
status text (the current episode or phase), and the trainer's log lines printed above it.
Without a bar the lines go to the trainer's ``progress`` callback, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

Log = Callable[[str], None]


class StepBar:
    """``with StepBar(total, done, log, show=True) as bar: bar.log(...); bar.status(...); bar.advance()``."""

    def __init__(self, total: int, done: int = 0, log: Log | None = None, *, show: bool = False,
                 label: str = "training") -> None:
        self.total, self.done, self._log, self.show, self.label = total, done, log, show, label
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> StepBar:
        if self.show:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                console=Console(stderr=True), transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self.total, completed=self.done, status="")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def log(self, text: str) -> None:
        """A line above the bar (or to the ``log`` callback when there is no bar)."""
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)
        elif self._log is not None:
            self._log(text)

    def status(self, text: str) -> None:
        """The text after the bar (the current episode, phase ...)."""
        if self._progress is not None:
            self._progress.update(self._task, status=text)

    def set_done(self, done: int) -> None:
        """Steps done before this call (a resume): the ETA covers only the rest."""
        self.done = done
        if self._progress is not None:
            self._progress.reset(self._task, total=self.total, completed=done, status="")

    def advance(self) -> None:
        """One more step done."""
        self.done += 1
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, status="")
