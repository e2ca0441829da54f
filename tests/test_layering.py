"""Dependencies point one way: every ``orchestrion`` import, read with ``ast`` (top-level, under
``TYPE_CHECKING`` and inside functions alike), respects the package layers.

    _errors, _lazy, _paths, _prompts, _text, status  (leaves: import nothing of orchestrion but each other)
    models → tools, trace → runtime → strategies → eval, train, serve
    api, cli, __init__, __main__  (top: may import anything)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

import orchestrion

ROOT = Path(orchestrion.__file__).parent
SRC = ROOT.parent
PACKAGES = ("models", "tools", "trace", "runtime", "strategies", "eval", "train", "serve")
LEAVES = ("_errors", "_lazy", "_paths", "_prompts", "_text", "status")
LOWER = ("models", "tools", "runtime", "trace")
UPPER = ("strategies", "eval", "train", "serve")
# a package may import packages of a lower or equal rank (equal ranks are checked for cycles)
RANK = {"models": 1, "tools": 2, "trace": 2, "runtime": 3, "strategies": 4, "eval": 5, "train": 5, "serve": 5}


@dataclass(frozen=True)
class Edge:
    source: str  # unit (package or top-level module) of the importing file
    target: str  # unit imported
    where: str  # file:line
    text: str  # the dotted module imported

    def __str__(self) -> str:
        return f"{self.where}: {self.source} -> {self.target} ({self.text})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    """``orchestrion.models.pool`` -> ``models``; ``orchestrion.api`` -> ``api``; ``orchestrion`` -> ``__init__``."""
    parts = module.split(".")
    assert parts[0] == "orchestrion", module
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    base = ROOT / rel
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imported(path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The orchestrion modules an import statement loads (``from X import m`` counts ``X.m``
    when ``m`` is a submodule, else ``X``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "orchestrion"]
    if node.level:
        package = _module_name(path).split(".")
        if path.name != "__init__.py":
            package.pop()
        base = package[: len(package) - node.level + 1]
        dotted = ".".join(base + ([node.module] if node.module else []))
    else:
        dotted = node.module or ""
    if dotted.split(".")[0] != "orchestrion":
        return []
    return [f"{dotted}.{a.name}" if _is_module(f"{dotted}.{a.name}") else dotted for a in node.names]


def _edges() -> list[Edge]:
    edges: dict[Edge, None] = {}  # ordered, without the repeats of ``from X import a, b``
    for path in sorted(ROOT.rglob("*.py")):
        source = _unit(_module_name(path))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for dotted in _imported(path, node):
                    target = _unit(dotted)
                    if target != source:
                        where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
                        edges[Edge(source, target, where, dotted)] = None
    return list(edges)


EDGES = _edges()


def _report(bad: list[Edge], most: int = 50) -> str:
    more = f"\n  ... and {len(bad) - most} more" if len(bad) > most else ""
    return "\n" + "\n".join(f"  {e}" for e in bad[:most]) + more


def _check(bad: list[Edge], what: str) -> None:
    if bad:
        pytest.fail(f"{what}:{_report(bad)}", pytrace=False)


def test_the_scan_sees_the_known_imports() -> None:
    # a guard against a scanner that silently finds nothing
    assert any(e.source == "runtime" and e.target == "models" for e in EDGES)
    assert any(e.source == "__init__" and e.target == "strategies" for e in EDGES)


def test_no_cycle_between_packages() -> None:
    graph: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))
    for e in EDGES:
        graph[e.source][e.target].append(e)
    cycles: list[list[Edge]] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(unit: str) -> None:
        state[unit] = 1
        stack.append(unit)
        for nxt in sorted(graph[unit]):
            if state.get(nxt) == 1:
                loop = stack[stack.index(nxt):] + [nxt]
                cycles.append([graph[a][b][0] for a, b in zip(loop, loop[1:], strict=False)])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[unit] = 2

    for unit in sorted(list(graph)):
        if unit not in state:
            visit(unit)
    if cycles:
        pytest.fail("".join(
            "\ncycle " + " -> ".join([c[0].source] + [e.target for e in c]) + ":"
            + "".join(_report(graph[hop.source][hop.target], most=5) for hop in c)
            for c in cycles
        ), pytrace=False)


def test_lower_layers_never_import_upper_layers() -> None:
    _check([e for e in EDGES if e.source in LOWER and e.target in UPPER], "lower layer imports upper layer")


def test_packages_import_only_their_own_layer_or_below() -> None:
    _check([e for e in EDGES if e.source in RANK and e.target in RANK and RANK[e.target] > RANK[e.source]],
           "package imports a higher layer")


def test_packages_never_import_the_package_root() -> None:
    _check([e for e in EDGES if e.target == "__init__"], "module imports the package root")


def test_leaves_import_only_leaves() -> None:
    _check([e for e in EDGES if e.source in LEAVES and e.target not in LEAVES], "leaf imports a non-leaf")


def test_every_unit_is_classified() -> None:
    top = {"api", "cli", "__init__", "__main__"}
    units = {e.source for e in EDGES} | {e.target for e in EDGES}
    assert units <= set(PACKAGES) | set(LEAVES) | top, units - set(PACKAGES) - set(LEAVES) - top


def test_import_orchestrion_loads_neither_eval_nor_train() -> None:
    code = (
        "import sys, orchestrion\n"
        "heavy = ('orchestrion.eval', 'orchestrion.train', 'torch', 'transformers', 'matplotlib', 'ray', 'datasets')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_lazy_public_names_resolve() -> None:
    from orchestrion import EvalConfig, RewardConfig, run_eval

    assert run_eval.__module__ == "orchestrion.eval.runner"
    assert EvalConfig.__module__ == "orchestrion.eval.runner"
    assert RewardConfig.__module__ == "orchestrion.train.rewards"
    missing = [name for name in orchestrion.__all__ if not hasattr(orchestrion, name)]
    assert not missing, missing
    assert set(orchestrion.__all__) <= set(dir(orchestrion))
    with pytest.raises(AttributeError):
        orchestrion.no_such_name  # noqa: B018
