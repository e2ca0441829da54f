"""Progress of the policy trainers: log lines and a step bar with an ETA, shown by a display.

:class:`StepBar` is what ``train grpo`` and ``train opod`` report to: one bar over the optimizer
steps (those done before a resume count as done, so the ETA covers only what is left), a status
text (the current episode or phase), and the trainer's log lines. A :class:`StepDisplay` draws
them (the CLI's is a rich progress bar on stderr, the log lines printed above it); without one
the lines go to the trainer's ``progress`` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol

Log = Callable[[str], None]


class StepDisplay(Protocol):
    """Draws a trainer's step bar: started once, stopped once, updated in between."""

    def start(self, label: str, total: int, done: int) -> None:
        """Show the bar: ``done`` of ``total`` steps, named ``label``."""

    def log(self, text: str) -> None:
        """Print a line above the bar."""

    def status(self, text: str) -> None:
        """Show ``text`` after the bar (the current episode, phase ...)."""

    def reset(self, total: int, done: int) -> None:
        """Start the bar's clock again at ``done`` of ``total`` (a resume), status cleared."""

    def update(self, done: int) -> None:
        """``done`` steps now, status cleared."""

    def stop(self) -> None:
        """Stop drawing (the bar stays on screen)."""


class StepBar:
    """``with StepBar(total, done, log, display=...) as bar: bar.log(...); bar.status(...); bar.advance()``."""

    def __init__(self, total: int, done: int = 0, log: Log | None = None, *, display: StepDisplay | None = None,
                 label: str = "training") -> None:
        self.total, self.done, self._log, self.label = total, done, log, label
        self._display = display
        self._shown: StepDisplay | None = None

    def __enter__(self) -> StepBar:
        if self._display is not None:
            self._display.start(self.label, self.total, self.done)
            self._shown = self._display
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._shown is not None:
            self._shown.stop()
            self._shown = None

    def log(self, text: str) -> None:
        """A line above the bar (or to the ``log`` callback when there is no bar)."""
        if self._shown is not None:
            self._shown.log(text)
        elif self._log is not None:
            self._log(text)

    def status(self, text: str) -> None:
        """The text after the bar (the current episode, phase ...)."""
        if self._shown is not None:
            self._shown.status(text)

    def set_done(self, done: int) -> None:
        """Steps done before this call (a resume): the ETA covers only the rest."""
        self.done = done
        if self._shown is not None:
            self._shown.reset(self.total, done)

    def advance(self) -> None:
        """One more step done."""
        self.done += 1
        if self._shown is not None:
            self._shown.update(self.done)
