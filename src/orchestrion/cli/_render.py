"""Render an episode as a tree: decisions, parallel calls with start/end times, statuses, costs."""

from __future__ import annotations

from typing import Any

import orjson
from rich.markup import escape
from rich.tree import Tree

from .._errors import TraceError
from ..trace.store import TraceStore


def _cost(value: float | None) -> str:
    return "cost unknown" if value is None else f"${value:.6f}"


def _label(span: dict[str, Any], t0: float) -> str:
    start = span["started"] - t0
    end = (span["ended"] - t0) if span["ended"] is not None else None
    when = f"{start:7.3f}s → {end:7.3f}s" if end is not None else f"{start:7.3f}s → (unfinished)"
    attrs = orjson.loads(span["attrs"] or "{}")
    detail = ""
    if span["kind"] in ("tool", "agent"):
        model = f" on {attrs['model']}" if attrs.get("model") else ""
        shown = attrs.get("output") or attrs.get("error") or ""
        detail = f"{model} args={_short(attrs.get('args'))} → {_short(shown, 60)}"
    elif span["kind"] == "call":
        detail = f" [{attrs.get('purpose', '')}] → {_short(attrs.get('output'))}"
        if attrs.get("prompt_evaluated") is not None:
            threads = f", {attrs['threads']} threads" if attrs.get("threads") else ""
            detail += (f" (prompt: {attrs['prompt_evaluated']} evaluated, {attrs.get('prompt_reused', 0)} reused"
                       f"{threads})")
    elif span["kind"] == "decision":
        detail = f" valid={attrs.get('valid')} attempts={attrs.get('attempts')}"
    tokens = f"{span['input_tokens']}+{span['output_tokens']} tok"
    return (
        f"[bold]{span['kind']}[/bold] {escape(span['name'] + detail)}  "
        f"[dim]{when}[/dim]  status={span['status']}  {tokens}  {_cost(span['cost_usd'])}"
        + (f"  units={span['cost_units']:g}" if span["cost_units"] else "")
    )


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
    spans = store.spans(ep["id"])
    finished = "finished" if ep["finished"] else "UNFINISHED (interrupted)"
    root = Tree(
        f"[bold]episode {ep['id']}[/bold] strategy={ep['strategy']} status={ep['status']} ({finished})  "
        f"{ep['input_tokens']}+{ep['output_tokens']} tok  {_cost(ep['cost_usd'])}"
    )
    if ep["answer"]:
        root.add(escape(f"answer: {_short(ep['answer'], 200)}"))
    if ep["error"]:
        root.add(f"[red]{escape('error: ' + ep['error'])}[/red]")
    for event in store.events(ep["id"]):
        if event["kind"] == "auto_choice":  # why auto ran what it ran
            choice = orjson.loads(event["data"] or "{}")
            root.add(escape(f"auto chose {choice.get('arm')}: {choice.get('reason')}"))
    t0 = ep["started"]
    nodes: dict[str | None, Tree] = {}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span["parent_id"], []).append(span)

    def add(parent_id: str | None, into: Tree) -> None:
        for span in children.get(parent_id, []):
            branch = into.add(_label(span, t0))
            nodes[span["id"]] = branch
            add(span["id"], branch)

    add(None, root)
    return root


def list_episodes(store: TraceStore, limit: int = 20) -> list[dict[str, Any]]:
    return store.query(
        "SELECT id, strategy, status, finished, started, input_tokens, output_tokens, cost_usd, "
        "substr(coalesce(json_extract(task, '$.prompt'), task), 1, 200) AS task "
        "FROM episodes ORDER BY started DESC LIMIT ?",
        (limit,),
    )
