"""AdaptOrch: route a task DAG to a topology, then synthesise with a consistency check.

The orchestrator decomposes the task into a DAG of subtasks (a Plan). The pure
function :func:`route` reads the DAG's structure in O(V+E) and picks how to run it:

* ``parallel``     - no edges: every subtask at once;
* ``sequential``   - the longest path holds every node (width 1): one at a time in
                     topological order, each seeing *all* earlier outputs;
* ``hierarchical`` - a star of depth 2: one lead node joined to every other node
                     and no other edges (a lead fanning out to workers, or workers
                     fanning in to an aggregator); the lead and the parallel workers
                     run as the DAG says;
* ``hybrid``       - anything else (diamonds, several layers, mixed shapes): the
                     DAG as it is, every ready node at once.

Outputs of the sink nodes (what nothing downstream merges) are the parallel
outputs. Their consistency is the mean pairwise agreement of their normalised
final lines. At or above ``consistency_threshold`` one synthesis call writes the
answer; below it a reconcile loop asks the synthesis model to settle the conflict,
stopping early once a draft is supported by enough outputs or repeats the previous
draft.

A multi-part task (``metadata["scoring"] == "multipart"``) skips the check: its sinks answer
different parts, so their final lines differ by design and agreement measures nothing (and the
reconcile prompt's one-line answer would drop parts); one synthesis call writes the labelled
lines, with ``consistency`` recorded as None.

A code task (a function stub in the prompt; ``code_examples``, on by default) is not decomposed:
candidates are written and reconciled by the docstring's examples they pass (:mod:`._code`).

Termination: the reconcile loop is ``for i in range(max_reconcile)`` (default 2)
with no other loop around it, each iteration makes exactly one model call bounded
by ``max_tokens`` (and by the episode budget), and nothing resets the counter; so
synthesis ends after at most ``max_reconcile`` model calls whatever the outputs
say, even when they never agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Any, Literal, get_args

from pydantic import Field

from .._errors import PlanError
from .._prompts import render
from .._text import last_line, normalize
from ..models.types import msg
from ..runtime.code_work import code_plan
from ..runtime.context import RunContext
from ..runtime.parts import is_multipart
from ..runtime.plan import Subtask, execute_plan, results_text
from ..runtime.scheduler import NodeResult
from ..runtime.synthesis import synthesize
from ..status import NodeStatus
from ..tools.envelope import ToolResult
from ._code import topology_candidates
from ._planning import PlanOptions, ask_plan, fallback_plan
from .base import Answer, Strategy, Task, model_lines, register, tool_lines

Topology = Literal["parallel", "sequential", "hierarchical", "hybrid"]
TOPOLOGIES: tuple[str, ...] = get_args(Topology)


class WorkCounter:
    """Counts elementary steps (node and edge visits) so tests can check linear cost."""

    def __init__(self) -> None:
        self.ops = 0

    def tick(self, n: int = 1) -> None:
        self.ops += n


@dataclass(frozen=True)
class DagFeatures:
    """Structural features of a task DAG, all computed in one O(V+E) pass."""

    nodes: int
    edges: int
    width: int  # most nodes on one level (level = longest path from a root)
    depth: int  # nodes on the longest path
    coupling: float  # edges / possible edges, V(V-1)/2
    max_in: int
    max_out: int


def _graph(dag: Iterable[Subtask] | Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    if isinstance(dag, Mapping):
        return {n: list(ds) for n, ds in dag.items()}
    return {s.id: list(s.deps) for s in dag}


def dag_features(dag: Iterable[Subtask] | Mapping[str, Iterable[str]],
                 counter: WorkCounter | None = None) -> DagFeatures:
    """Width, depth, coupling and degrees by one Kahn pass; PlanError on a cycle or unknown dep."""
    work = counter or WorkCounter()
    deps = _graph(dag)
    children: dict[str, list[str]] = {n: [] for n in deps}
    indeg: dict[str, int] = {}
    edges = 0
    for n, ds in deps.items():
        work.tick()
        indeg[n] = len(ds)
        for d in ds:
            work.tick()
            if d not in children:
                raise PlanError(f"node '{n}' depends on unknown node '{d}'")
            children[d].append(n)
            edges += 1
    level = {n: 0 for n in deps}
    ready = [n for n, k in indeg.items() if k == 0]
    work.tick(len(deps))
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        work.tick()
        for c in children[n]:
            work.tick()
            level[c] = max(level[c], level[n] + 1)
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if seen != len(deps):
        raise PlanError("plan has a cycle")
    per_level: dict[int, int] = {}
    for lv in level.values():
        work.tick()
        per_level[lv] = per_level.get(lv, 0) + 1
    v = len(deps)
    return DagFeatures(
        nodes=v,
        edges=edges,
        width=max(per_level.values(), default=0),
        depth=len(per_level),
        coupling=edges / (v * (v - 1) / 2) if v > 1 else 0.0,
        max_in=max((len(ds) for ds in deps.values()), default=0),
        max_out=max((len(cs) for cs in children.values()), default=0),
    )


def classify(f: DagFeatures) -> Topology:
    """The routing rule, in this order (first match wins):

    1. ``edges == 0``                                     -> parallel (coupling 0)
    2. ``width == 1`` (depth == nodes: one path covers all) -> sequential
    3. ``depth == 2 and edges == nodes - 1`` and one node
       touches all others (``max_in`` or ``max_out`` is ``nodes - 1``) -> hierarchical
    4. otherwise                                          -> hybrid
    """
    if f.edges == 0:
        return "parallel"
    if f.width == 1:
        return "sequential"
    if f.depth == 2 and f.edges == f.nodes - 1 and f.nodes - 1 in (f.max_in, f.max_out):
        return "hierarchical"
    return "hybrid"


def route(dag: Iterable[Subtask] | Mapping[str, Iterable[str]], counter: WorkCounter | None = None) -> Topology:
    """Pick a topology for a DAG (subtasks, or a mapping id -> deps) in O(V+E)."""
    return classify(dag_features(dag, counter))


def final_answer(text: str) -> str:
    """The normalised last line of an output: what answers are compared on."""
    return normalize(last_line(text) or "")


def consistency(outputs: Sequence[str]) -> float:
    """Mean pairwise agreement of the outputs' normalised final lines; 1.0 for fewer than two."""
    answers = [final_answer(o) for o in outputs]
    pairs = list(combinations(answers, 2))
    if not pairs:
        return 1.0
    return sum(1 for a, b in pairs if a == b) / len(pairs)


def support(draft: str, outputs: Sequence[str]) -> float:
    """Share of the outputs whose final line agrees with the draft's."""
    if not outputs:
        return 1.0
    key = final_answer(draft)
    return sum(1 for o in outputs if final_answer(o) == key) / len(outputs)


def _sinks(subtasks: list[Subtask]) -> list[str]:
    used = {d for s in subtasks for d in s.deps}
    return [s.id for s in subtasks if s.id not in used]


def _arrange(subtasks: list[Subtask], topology: Topology, order: list[str]) -> list[Subtask]:
    """The subtasks as they will run: parallel drops edges, sequential chains every node."""
    if topology == "parallel":
        return [s.model_copy(update={"deps": []}) for s in subtasks]
    if topology == "sequential":
        by_id = {s.id: s for s in subtasks}
        return [by_id[n].model_copy(update={"deps": order[:i]}) for i, n in enumerate(order)]
    return subtasks


@register
class TopologyStrategy(Strategy):
    name = "topology"
    summary = (
        "AdaptOrch: decompose into a DAG, route it to parallel/sequential/hierarchical/hybrid, "
        "consistency-checked synthesis"
    )
    paper = "AdaptOrch: task-adaptive multi-agent orchestration (Korea National Open University)"

    class Options(PlanOptions):
        topology: Literal["auto", "parallel", "sequential", "hierarchical", "hybrid"] = Field(
            default="auto", description="auto = routed from the DAG; a name fixes it (the static baselines)")
        consistency_threshold: float = Field(
            default=0.5, ge=0, le=1,
            description="agreement of the parallel outputs at or above which one synthesis call answers (0 to 1)")
        max_reconcile: int = Field(default=2, ge=0, description="most reconcile calls when the outputs disagree")
        code_candidates: int = Field(default=2, ge=1, le=8, description=(
            "code tasks with examples: the models (the executor first) that write a candidate in the parallel round"))
        code_rounds: int = Field(default=2, ge=1, le=6, description=(
            "code tasks with examples: most rounds of candidates, each after the best so far failed an example"))

    async def solve(self, task: Task, ctx: RunContext) -> Answer:
        opts = ctx.options_as(self.Options)
        if opts.code_examples and (code := code_plan(task.prompt)) is not None:
            return await topology_candidates(ctx, task, code, first=ctx.pool.executor, width=opts.code_candidates,
                                             rounds=opts.code_rounds)
        max_subtasks = opts.max_subtasks
        forced = opts.topology  # a fixed topology: the static baselines AdaptOrch compares with
        prompt = render(
            "topology_decompose",
            task=task.prompt,
            max_subtasks=max_subtasks,
            tools=tool_lines(ctx),
            models=model_lines(ctx),
        )
        outcome = await ask_plan(ctx, [msg("user", prompt)], fallback=fallback_plan(task.prompt),
                                 fix_template="topology_fix", name="decompose", max_subtasks=max_subtasks,
                                 repairs=opts.plan_repairs, max_tokens=opts.plan_max_tokens)
        subtasks = outcome.subtasks
        counter = WorkCounter()
        features = dag_features(subtasks, counter)
        routed = classify(features)
        topology: Topology = routed if forced == "auto" else forced
        order = _topo(subtasks)
        plan = _arrange(subtasks, topology, order)
        route_info = {"topology": topology, "routed": routed, "features": asdict(features), "route_ops": counter.ops,
                      "lead": _lead(subtasks, features) if topology == "hierarchical" else None}
        ctx.tracer.event("topology", route_info)
        with ctx.tracer.span("topology", topology, **route_info):
            results = await execute_plan(ctx, plan, context=f"Overall task: {task.prompt}",
                                         node_timeout_s=opts.node_timeout_s or None)
        lines = results_text(subtasks, results, limit=500)
        sinks = [_output(results.get(n)) for n in _sinks(plan)]
        text, synth = await self._synthesize(ctx, opts, task, lines, [o for o in sinks if o is not None])
        ctx.tracer.event("synthesis", synth)
        ok = sum(1 for r in results.values() if r.status == NodeStatus.OK)
        meta: dict[str, Any] = {**route_info, **synth, "subtasks": len(subtasks), "subtasks_ok": ok,
                                "plan_attempts": outcome.attempts, "plan_errors": outcome.errors,
                                "fallback": outcome.fallback, "invalid_decisions": outcome.invalid_outputs}
        return Answer(text, meta=meta)

    @staticmethod
    async def _synthesize(ctx: RunContext, opts: TopologyStrategy.Options, task: Task, lines: list[str],
                          outputs: list[str]) -> tuple[str, dict[str, Any]]:
        """Adaptive synthesis: one call if the parallel outputs agree, else a capped reconcile loop."""
        threshold = opts.consistency_threshold
        cap = opts.max_reconcile
        score = None if is_multipart(task) else consistency(outputs)  # module doc: parts differ by design
        info: dict[str, Any] = {"consistency": score, "threshold": threshold, "parallel_outputs": len(outputs),
                                "loop_iterations": 0, "supports": [],
                                "converged": score is None or score >= threshold}
        if score is None or score >= threshold or cap == 0:
            return await synthesize(task.prompt, lines, ctx), info
        listed = "\n".join(f"[{i}] {o.strip()[:400]}" for i, o in enumerate(outputs, 1))
        config = ctx.config("synthesis", opts.max_tokens)
        model = opts.synthesizer or ctx.pool.synthesizer
        draft, previous = "", None
        for i in range(cap):  # the only loop: at most `cap` model calls, so synthesis always ends
            note = f"Your previous attempt was:\n{draft.strip()[:400]}\n\n" if draft else ""
            prompt = render("topology_reconcile", task=task.prompt, outputs=listed, score=f"{score:.2f}",
                            previous=note, results="\n".join(f"- {x}" for x in lines[-12:]))
            out = await ctx.generate([msg("user", prompt)], model=model, config=config, name=f"reconcile {i + 1}")
            draft = out.text.strip()
            info["loop_iterations"] = i + 1
            info["supports"].append(support(draft, outputs))
            stable = previous is not None and final_answer(draft) == previous
            if info["supports"][-1] >= threshold or stable:
                info["converged"] = True
                break
            previous = final_answer(draft)
        return draft, info


def _topo(subtasks: list[Subtask]) -> list[str]:
    """Topological order that keeps the orchestrator's listing order among ready nodes.

    Quadratic, which is fine for plans (at most 8 nodes); the router itself is linear.
    """
    deps = {s.id: set(s.deps) for s in subtasks}
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(deps):
        ready = [n for n in deps if n not in placed and deps[n] <= placed]
        if not ready:
            raise PlanError("plan has a cycle")
        order.append(ready[0])
        placed.add(ready[0])
    return order


def _lead(subtasks: list[Subtask], f: DagFeatures) -> str | None:
    """The hub of a star: the node every other node depends on, or that depends on all others."""
    for s in subtasks:
        if len(s.deps) == f.nodes - 1 or sum(1 for t in subtasks if s.id in t.deps) == f.nodes - 1:
            return s.id
    return None


def _output(result: NodeResult | None) -> str | None:
    if result is None or result.status != NodeStatus.OK or not isinstance(result.value, ToolResult):
        return None
    return result.value.output
