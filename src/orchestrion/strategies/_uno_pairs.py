"""Uno-Orchestra's executors: (model, primitive) pairs, which of them are admissible on a task,
their accuracy priors and estimated costs, and the deterministic utility fallback.

A pair is admissible when its model is in the pool, its tools are registered (``retrieve``
with a corpus) and, under a cost cap, its estimated cost is known and fits. :func:`utility` is
accuracy minus λ x cost; a pair of unknown cost is never costed as 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.cost import cost_of
from ..models.pool import Pool
from ..tools.registry import ToolRegistry

# primitive -> the agent tool that runs it, and the other tools it needs
PRIMITIVE_TOOLS: dict[str, str] = {
    "direct": "direct", "cot": "reasoner", "code": "coder", "retrieval": "searcher", "ensemble": "ensemble",
}
NEEDS: dict[str, tuple[str, ...]] = {"code": ("python",), "retrieval": ("retrieve",)}
# (model calls, prompt tokens besides the task, output tokens per call): from the agent tools' templates and limits
SHAPE: dict[str, tuple[int, int, int]] = {
    "direct": (1, 40, 128), "cot": (1, 40, 256), "code": (1, 50, 384), "retrieval": (1, 250, 256),
    "ensemble": (3, 40, 256),
}
# accuracy priors (not measured): tier 1 -> 0.35 ... tier 5 -> 0.83, plus a small bonus per primitive
PRIMITIVE_BONUS: dict[str, float] = {"direct": 0.0, "cot": 0.05, "code": 0.04, "retrieval": 0.03, "ensemble": 0.07}
PRIMITIVE_HELP: dict[str, str] = {
    "direct": "a plain answer in one call", "cot": "step-by-step reasoning",
    "code": "write and run a Python program (exact arithmetic, counting, sorting)",
    "retrieval": "search the local documents, then answer",
    "ensemble": "three samples and a majority vote (3x the calls)",
}

@dataclass(frozen=True)
class Pair:
    """One (model, primitive) executor with its accuracy prior and estimated cost (None = unknown)."""

    model: str
    primitive: str
    tier: int
    accuracy: float
    est_cost: float | None

    @property
    def label(self) -> str:
        return f"{self.model}/{self.primitive}"


def utility(expected_accuracy: float, est_cost: float | None, lam: float) -> float | None:
    """Accuracy minus λ x cost; ``None`` when the cost is unknown (never costed as 0)."""
    if est_cost is None:
        return None
    return expected_accuracy - lam * est_cost


def prior_accuracy(tier: int, primitive: str) -> float:
    return min(0.99, 0.35 + 0.12 * (tier - 1) + PRIMITIVE_BONUS.get(primitive, 0.0))


def task_tokens(text: str) -> int:
    return len(text) // 4 + 1


def estimate_cost(pool: Pool, model: str, primitive: str, n_task_tokens: int) -> float | None:
    """Dollar estimate of one pair on a task: the model's price x the primitive's expected tokens."""
    calls, overhead, out = SHAPE[primitive]
    return cost_of(pool.spec(model).price, calls * (overhead + n_task_tokens), calls * out)


def tool_available(tools: ToolRegistry, name: str) -> bool:
    """A registered tool that can work: ``retrieve`` also needs a corpus (without one it only errors)."""
    if name not in tools:
        return False
    return name != "retrieve" or getattr(tools.get(name), "corpus", True) is not None


def inadmissible_reason(
    pool: Pool, tools: ToolRegistry, model: str, primitive: str, est_cost: float | None, cap: float | None
) -> str | None:
    """Why (model, primitive) may not be used, or ``None`` when it is admissible."""
    if model not in pool.names:
        return f"model '{model}' is not in the pool"
    if primitive not in PRIMITIVE_TOOLS:
        return f"unknown primitive '{primitive}'"
    for name in (PRIMITIVE_TOOLS[primitive], *NEEDS.get(primitive, ())):
        if not tool_available(tools, name):
            return f"tool '{name}' is not available" + (" (no corpus)" if name in tools else "")
    if cap is not None:
        if est_cost is None:
            return f"price of '{model}' is unknown, so it cannot be shown to fit the cost cap"
        if est_cost > cap:
            return f"estimated ${est_cost:.6f} is over the cost cap ${cap:g}"
    return None


def admissible_pairs(
    pool: Pool, tools: ToolRegistry, task: str, cap: float | None = None
) -> tuple[list[Pair], dict[str, str]]:
    """Every admissible pair (pool order, then primitive order) and why each other one is not."""
    n = task_tokens(task)
    pairs: list[Pair] = []
    excluded: dict[str, str] = {}
    for model in pool.names:
        for prim in PRIMITIVE_TOOLS:
            cost = estimate_cost(pool, model, prim, n)
            reason = inadmissible_reason(pool, tools, model, prim, cost, cap)
            if reason is None:
                pairs.append(Pair(model, prim, pool.spec(model).tier, prior_accuracy(pool.spec(model).tier, prim),
                                  cost))
            else:
                excluded[f"{model}/{prim}"] = reason
    return pairs, excluded


def choose_pair(pairs: list[Pair], lam: float) -> Pair | None:
    """The deterministic fallback: best utility among known-cost pairs (ties: cheaper, then first);
    only when no cost is known, the best accuracy prior among the rest."""
    scored = [(u, -p.est_cost, p) for p in pairs
              if p.est_cost is not None and (u := utility(p.accuracy, p.est_cost, lam)) is not None]
    if scored:
        best = scored[0]
        for row in scored[1:]:  # strict: the first of equals wins
            if row[:2] > best[:2]:
                best = row
        return best[2]
    return max(pairs, key=lambda p: p.accuracy) if pairs else None


def by_utility(pairs: list[Pair], lam: float) -> list[str]:
    """The pairs' models, best first by :func:`choose_pair`'s order."""
    left, order = list(pairs), []
    while (pick := choose_pair(left, lam)) is not None:
        order.append(pick.model)
        left.remove(pick)
    return order
