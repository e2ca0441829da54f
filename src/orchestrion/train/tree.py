"""Tree rollouts (E3-Orch): compare alternative decisions made at a shared history.

A *decision* here is one orchestrator model call made through ``RunContext.decide``
(one row of the ``decisions`` table, repair attempts included), numbered 0, 1, 2, ...
in call order within its episode. The scheme, exactly:

1. **Root.** Run one episode E0 normally (every decision sampled).
2. **Branching.** For an episode E whose decisions from position ``b(E)`` on were
   sampled by E itself (``b(E0) = 0``), and for every depth ``d`` with
   ``start(E) <= d < min(max_depth, n(E))`` (``start(E0) = 0``, otherwise
   ``start(E) = b(E) + 1``; ``n(E)`` is E's number of decisions), start ``branching``
   child episodes. A child replays E's first ``d`` decision outputs through the
   ``replay_decisions`` option (parsed, validated and recorded exactly like sampled
   ones, marked ``replayed`` on their decision span, no model call, no tokens) and
   samples decision ``d`` anew, and everything after it. Children branch again by the
   same rule, so the tree has at most ``(branching + 1) ** max_depth`` episodes. They run
   generation by generation, in a fixed order; episode ``i`` gets the option
   ``seed = seed + i``.
3. **Nodes.** Every sampled decision (E, d) is a node. Its *sibling group* is the set
   of decisions sampled at the same history: for the decision a child C made at its
   branch depth ``b(C)``, the group of its parent P at depth ``b(C)``; otherwise the
   group of (E, d) itself. A group holds its owner's decision and the decisions of
   the owner's children branched at ``d`` (a child that ended before reaching ``d``
   sampled nothing there and is left out).
4. **Values.** The value of node (E, d) is the mean reward of the episodes in its
   subtree: E itself and every descendant of E branched at a depth greater than ``d``
   (they all replay decision d).
5. **Advantages.** A node's advantage is its value minus the mean value of its group
   (itself included). Nodes alone in their group (deeper than ``max_depth``) get
   ``None``.

:func:`tree_samples` emits one :class:`TrainSample` per node with an advantage (by
default only non-zero ones), from the sampled decision's exact token ids; replayed
decisions never become samples. Only decisions are replayed: tools and executor models
run again in every episode, so with stochastic executors the history at a branch point
can differ from the parent's. Each sample says whether its prompt matched the group
owner's (``meta["same_context"]``). Strategies whose decisions run concurrently
(``proactive`` with several active sub-agents) have no fixed decision order and are not
suited to replay.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..models.pool import Pool
from ..runtime.budget import Budget
from ..runtime.episode import EpisodeResult, run_episode
from ..runtime.types import Task
from ..strategies.registry import as_strategy
from ..tools.registry import ToolRegistry
from ..trace.store import TraceStore
from ._types import TrainSample
from .rollouts import DecisionAttempt, Progress, RewardFn, check_sampling, decision_rows, sample_from_row
from .settings import TreeSettings


@dataclass
class TreeEpisode:
    """One episode of the tree: its parent, the depth it branched at, its reward and decision rows."""

    result: EpisodeResult
    reward: float
    parent: int | None
    branch_depth: int
    decisions: list[DecisionAttempt] = field(default_factory=list)

    @property
    def start(self) -> int:
        """The first depth this episode branches at."""
        return 0 if self.parent is None else self.branch_depth + 1


@dataclass
class TreeNode:
    """A sampled decision: the episode that made it, its position, its group owner, value and advantage."""

    episode: int
    depth: int
    decision_id: str
    owner: int
    value: float = 0.0
    advantage: float | None = None
    same_context: bool = True


@dataclass
class Tree:
    task: Task
    episodes: list[TreeEpisode]
    nodes: list[TreeNode]

    def group(self, node: TreeNode) -> list[TreeNode]:
        """The node's sibling group: the alternatives sampled at the same history, itself included."""
        return [n for n in self.nodes if n.owner == node.owner and n.depth == node.depth]


async def collect_tree(
    task: Task,
    settings: TreeSettings,
    *,
    pool: Pool,
    store: TraceStore,
    reward_fn: RewardFn,
    run_id: str | None = None,
    tools: ToolRegistry | None = None,
    budget: Budget | None = None,
    progress: Progress | None = None,
) -> Tree:
    """Run a root episode and branch it at its first ``max_depth`` decisions (see the module docstring)."""
    options = check_sampling(settings.options)
    strategy, seed = settings.strategy, settings.seed
    branching, max_depth = settings.branching, settings.max_depth
    episodes: list[TreeEpisode] = []
    gate = asyncio.Semaphore(settings.concurrency)
    bound = (branching + 1) ** max(0, max_depth)  # the most episodes the tree can have
    done = 0

    async def run(index: int, parent: int | None, depth: int) -> TreeEpisode:
        replay = [r.output for r in episodes[parent].decisions[:depth]] if parent is not None else []
        opts = {**(options or {}), "seed": seed + index}
        if replay:
            opts["replay_decisions"] = replay
        async with gate:
            res = await run_episode(task, as_strategy(strategy), pool=pool, tools=tools, store=store, budget=budget,
                                    options=opts, run_id=run_id, epoch=index)
            reward = float(await reward_fn(res, task))
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, bound)
        return TreeEpisode(res, reward, parent, depth, decision_rows(store, res.trace_id))

    generation: list[tuple[int | None, int]] = [(None, 0)]  # (parent, branch depth) of the episodes to run next
    while generation:
        base = len(episodes)
        episodes += await asyncio.gather(*(run(base + i, p, d) for i, (p, d) in enumerate(generation)))
        generation = [(e, d) for e in range(base, len(episodes))
                      for d in range(episodes[e].start, min(max_depth, len(episodes[e].decisions)))
                      for _ in range(branching)]
    return Tree(task, episodes, tree_nodes(episodes))


def tree_nodes(episodes: list[TreeEpisode]) -> list[TreeNode]:
    """Nodes, values and advantages of a tree of episodes (steps 3-5 of the module docstring)."""
    children: dict[int, list[int]] = {}
    for i, e in enumerate(episodes):
        if e.parent is not None:
            children.setdefault(e.parent, []).append(i)

    def subtree(e: int, depth: int) -> list[float]:
        rewards = [episodes[e].reward]
        for c in children.get(e, []):
            if episodes[c].branch_depth > depth:
                rewards += subtree(c, -1)  # everything below c replays (e, depth)
        return rewards

    nodes: list[TreeNode] = []
    for i, e in enumerate(episodes):
        for d in range(e.branch_depth if e.parent is not None else 0, len(e.decisions)):
            row = e.decisions[d]
            if row.replayed:
                continue
            owner = e.parent if e.parent is not None and d == e.branch_depth else i
            values = subtree(i, d)
            nodes.append(TreeNode(i, d, row.id, owner, sum(values) / len(values)))
    for node in nodes:
        group = [n for n in nodes if n.owner == node.owner and n.depth == node.depth]
        if len(group) > 1:
            node.advantage = node.value - sum(n.value for n in group) / len(group)
        owner_rows = episodes[node.owner].decisions
        if node.depth < len(owner_rows):
            node.same_context = (
                owner_rows[node.depth].messages == episodes[node.episode].decisions[node.depth].messages
            )
    return nodes


def tree_samples(tree: Tree, store: TraceStore, *, keep_zero: bool = False) -> list[TrainSample]:
    """One sample per sampled decision with an advantage (zero advantages dropped unless ``keep_zero``)."""
    samples = []
    rows: dict[str, DecisionAttempt] = {}
    for node in tree.nodes:
        if node.advantage is None or (not keep_zero and abs(node.advantage) < 1e-12):
            continue
        if node.decision_id not in rows:
            rows.update((r.id, r) for r in decision_rows(store, tree.episodes[node.episode].result.trace_id))
        row = rows.get(node.decision_id)
        if row is None:
            continue
        sample = sample_from_row(row, node.advantage, node.value, task_id=tree.task.id, kind="tree",
                                 depth=node.depth, same_context=node.same_context)
        if sample is not None:
            samples.append(sample)
    return samples
