"""The trainers' step bar: plain calls to a display (the CLI's rich bar), or log lines without one."""

from __future__ import annotations

import pytest

from orchestrion.cli._render import RichStepBar
from orchestrion.train._progress import StepBar


class Recorder:
    """A display that writes down what it was asked to show."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def start(self, label: str, total: int, done: int) -> None:
        self.calls.append(("start", label, total, done))

    def log(self, text: str) -> None:
        self.calls.append(("log", text))

    def status(self, text: str) -> None:
        self.calls.append(("status", text))

    def reset(self, total: int, done: int) -> None:
        self.calls.append(("reset", total, done))

    def update(self, done: int) -> None:
        self.calls.append(("update", done))

    def stop(self) -> None:
        self.calls.append(("stop",))


def test_a_display_gets_the_bar_and_the_log_lines() -> None:
    display = Recorder()
    lines: list[str] = []
    with StepBar(4, 0, lines.append, display=display, label="grpo") as bar:
        bar.log("loading")
        bar.set_done(2)
        bar.status("episode 1/2")
        bar.advance()
    assert display.calls == [("start", "grpo", 4, 0), ("log", "loading"), ("reset", 4, 2),
                             ("status", "episode 1/2"), ("update", 3), ("stop",)]
    assert lines == [] and bar.done == 3  # the lines went above the bar, not to the callback


def test_without_a_display_the_lines_go_to_the_callback() -> None:
    lines: list[str] = []
    with StepBar(2, 0, lines.append) as bar:
        bar.log("step 1")
        bar.status("ignored")
        bar.advance()
    assert lines == ["step 1"] and bar.done == 1


def test_the_rich_bar_draws_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with StepBar(2, 0, display=RichStepBar(), label="opod") as bar:
        bar.log("a [bold]line[/bold]")
        bar.advance()
        bar.advance()
    err = capsys.readouterr().err
    assert "a [bold]line[/bold]" in err and "opod" in err and "2/2" in err
