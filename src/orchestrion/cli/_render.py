"""What the CLI draws with rich, from the plain data the packages below it return: an episode as
a tree (decisions, parallel calls with start/end times, statuses, costs), a :class:`TextTable`
(the eval summary) as a rich table, and the trainers' step bar (a :class:`StepDisplay`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.tree import Tree

from .._errors import TraceError
from ..trace.rows import EpisodeRow, SpanRow
from ..trace.store import TraceStore

if TYPE_CHECKING:
    from ..eval.summary import TextTable


def _cost(value: float | None) -> str:
    return "cost unknown" if value is None else f"${value:.6f}"


def _label(span: SpanRow, t0: float) -> str:
    start = span.started - t0
    end = (span.ended - t0) if span.ended is not None else None
    when = f"{start:7.3f}s → {end:7.3f}s" if end is not None else f"{start:7.3f}s → (unfinished)"
    attrs = orjson.loads(span.attrs or "{}")
    detail = ""
    if span.kind in ("tool", "agent"):
        model = f" on {attrs['model']}" if attrs.get("model") else ""
        shown = attrs.get("output") or attrs.get("error") or ""
        detail = f"{model} args={_short(attrs.get('args'))} → {_short(shown, 60)}"
    elif span.kind == "client_tool":  # run by serve's client: its wait for the result is the time
        wait = f" waited {attrs['wait_s']:g}s" if isinstance(attrs.get("wait_s"), int | float) else " waiting"
        shown = attrs.get("output") or attrs.get("error") or ""
        detail = f" [{attrs.get('call_id', '')}] args={_short(attrs.get('args'))} → {_short(shown, 60)}{wait}"
    elif span.kind == "call":
        detail = f" [{attrs.get('purpose', '')}] → {_short(attrs.get('output'))}"
        if attrs.get("prompt_evaluated") is not None:
            threads = f", {attrs['threads']} threads" if attrs.get("threads") else ""
            detail += (f" (prompt: {attrs['prompt_evaluated']} evaluated, {attrs.get('prompt_reused', 0)} reused"
                       f"{threads})")
    elif span.kind == "decision":
        detail = f" valid={attrs.get('valid')} attempts={attrs.get('attempts')}"
    tokens = f"{span.input_tokens}+{span.output_tokens} tok"
    return (
        f"[bold]{span.kind}[/bold] {escape(span.name + detail)}  "
        f"[dim]{when}[/dim]  status={span.status}  {tokens}  {_cost(span.cost_usd)}"
        + (f"  units={span.cost_units:g}" if span.cost_units else "")
    )


def _client_wait(ep: EpisodeRow) -> str:
    """An episode with client tools: its wall time, and how much of it was the wait for the client's results."""
    waited = ep.meta_value().get("client_wait_s")
    if not isinstance(waited, int | float) or ep.ended is None:
        return ""
    return f"  wall={ep.ended - ep.started:.3f}s, of which client wait={waited:g}s"


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "…"


def episode_tree(store: TraceStore, episode_id: str) -> Tree:
    """A rich Tree of the episode's spans; raises TraceError for an unknown id."""
    ep = store.episode(episode_id)
    if ep is None:
        raise TraceError(
            f"no episode with trace id '{episode_id}' in {store.path}; list ids with `orchestrion trace list`"
        )
    spans = store.spans(ep.id)
    finished = "finished" if ep.finished else "UNFINISHED (interrupted)"
    root = Tree(
        f"[bold]episode {ep.id}[/bold] strategy={ep.strategy} status={ep.status} ({finished})  "
        f"{ep.input_tokens}+{ep.output_tokens} tok  {_cost(ep.cost_usd)}{_client_wait(ep)}"
    )
    if ep.answer:
        root.add(escape(f"answer: {_short(ep.answer, 200)}"))
    if ep.error:
        root.add(f"[red]{escape('error: ' + ep.error)}[/red]")
    for event in store.events(ep.id):
        if event.kind == "auto_choice":  # why auto ran what it ran
            choice = event.data_value() or {}
            root.add(escape(f"auto chose {choice.get('arm')}: {choice.get('reason')}"))
    t0 = ep.started
    nodes: dict[str | None, Tree] = {}
    children: dict[str | None, list[SpanRow]] = {}
    for span in spans:
        children.setdefault(span.parent_id, []).append(span)

    def add(parent_id: str | None, into: Tree) -> None:
        for span in children.get(parent_id, []):
            branch = into.add(_label(span, t0))
            nodes[span.id] = branch
            add(span.id, branch)

    add(None, root)
    return root


def list_episodes(store: TraceStore, limit: int = 20) -> list[EpisodeRow]:
    """The ``limit`` newest episodes."""
    return store.episodes(newest_first=True, limit=limit)


def task_prompt(ep: EpisodeRow) -> str:
    """The episode's task prompt (the task as stored when it is not an object with one)."""
    task = ep.task_value()
    prompt = task.get("prompt") if isinstance(task, dict) else None
    return ep.task if prompt is None else str(prompt)


def rich_table(table: TextTable) -> Table:
    """``table`` as a rich table: bold and right-aligned columns as it says."""
    out = Table(title=table.title or None)
    for column in table.columns:
        out.add_column(column.header, style="bold" if column.bold else None,
                       justify="right" if column.right else "left")
    for row in table.rows:
        out.add_row(*row)
    return out


class RichStepBar:
    """A trainer's :class:`~orchestrion.train.StepDisplay` on stderr: one bar over the optimizer
    steps with elapsed time and ETA, a status text after it, log lines printed above it."""

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._task = TaskID(0)

    def start(self, label: str, total: int, done: int) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
            console=Console(stderr=True), transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(label, total=total, completed=done, status="")

    def log(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)

    def status(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, status=text)

    def reset(self, total: int, done: int) -> None:
        if self._progress is not None:
            self._progress.reset(self._task, total=total, completed=done, status="")

    def update(self, done: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, status="")

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
