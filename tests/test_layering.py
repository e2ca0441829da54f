"""Dependencies point one way: every ``orchestrion`` import, read with ``ast`` (top-level, under
``TYPE_CHECKING`` and inside functions alike), respects the package layers.

    _errors, _lazy, _paths, _prompts, _text, _version, status  (leaves: import nothing of orchestrion but each other)
    models → tools, trace → runtime → strategies → eval, train, serve
    api, cli, __init__, __main__  (top: may import anything)

No package imports ``api`` or ``cli``; no module imports another package's private module or
name (the leaves are shared by every layer); strategies reach the trace only through the run
context; no two modules import each other, directly or around a loop, even inside one package;
only the CLI imports the terminal libraries (typer, rich): the packages below it return
plain data and take callbacks or protocols, and the CLI draws them; and only the trace package
holds SQL (everything else calls the store's typed methods).
"""

from __future__ import annotations

import ast
import re
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
TERMINAL = ("typer", "rich")  # third-party libraries only the CLI imports
LEAVES = ("_errors", "_lazy", "_paths", "_prompts", "_text", "_version", "status")
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
    module: str = ""  # the importing module, dotted
    names: tuple[str, ...] = ()  # the names a ``from X import ...`` takes from the module imported

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


def _imported(path: Path, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str | None]]:
    """The orchestrion modules an import statement loads, each with the name it takes from that
    module (``from X import m`` counts ``X.m`` when ``m`` is a submodule, else ``X`` and ``m``)."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names if a.name.split(".")[0] == "orchestrion"]
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
    return [(f"{dotted}.{a.name}", None) if _is_module(f"{dotted}.{a.name}") else (dotted, a.name) for a in node.names]


def _module_edges() -> list[Edge]:
    """Every import of an orchestrion module by another, one edge per statement and module."""
    edges: dict[tuple[str, str, str], Edge] = {}  # ordered, one edge per (file:line, module imported)
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
                for dotted, name in _imported(path, node):
                    key = (module, where, dotted)
                    found = edges.get(key)
                    names = (*found.names, name) if found is not None and name else (name,) if name else ()
                    edges[key] = Edge(_unit(module), _unit(dotted), where, dotted, module, names)
    return list(edges.values())


def _terminal_edges() -> list[Edge]:
    """Every import of a terminal library (``TERMINAL``), one edge per statement and library module."""
    edges: list[Edge] = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
            edges += [Edge(_unit(module), n.split(".")[0], where, n, module) for n in names
                      if n.split(".")[0] in TERMINAL]
    return edges


MODULE_EDGES = _module_edges()
TERMINAL_EDGES = _terminal_edges()
EDGES = list({Edge(e.source, e.target, e.where, e.text): None
              for e in MODULE_EDGES if e.source != e.target})  # between units


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


def _resolves(name: str) -> bool:
    """Whether ``orchestrion.NAME`` is there; a name whose module needs the train extra counts
    as there when that extra is not installed (`make test-fast` runs without torch)."""
    try:
        getattr(orchestrion, name)
    except AttributeError:
        return False
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("torch", "transformers", "trl", "peft", "accelerate", "gguf"):
            raise
    return True


def test_the_lazy_public_names_resolve() -> None:
    from orchestrion import EvalConfig, RewardConfig, run_eval

    assert run_eval.__module__ == "orchestrion.eval.runner"
    assert EvalConfig.__module__ == "orchestrion.eval.runner"
    assert RewardConfig.__module__ == "orchestrion.train.rewards"
    missing = [name for name in orchestrion.__all__ if not _resolves(name)]
    assert not missing, missing
    assert set(orchestrion.__all__) <= set(dir(orchestrion))
    with pytest.raises(AttributeError):
        orchestrion.no_such_name  # noqa: B018


def test_no_package_imports_the_api_or_the_cli() -> None:
    _check([e for e in EDGES if e.source in PACKAGES and e.target in ("api", "cli")],
           "package imports the api or the cli (they sit on top)")


def _private(e: Edge) -> bool:
    """Whether ``e`` reaches into another package's privates: a module whose dotted path below the
    package has a ``_`` part, or a ``_`` name taken from a module (the shared leaves excepted)."""
    parts = e.text.split(".")[2:] if e.target in PACKAGES or e.target == "cli" else []
    return any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in e.names if e.target != "__init__")


def test_no_module_imports_another_packages_private_names() -> None:
    cross = [e for e in MODULE_EDGES if e.source != e.target and e.target not in LEAVES]
    _check([e for e in cross if _private(e)], "module imports another package's private module or name")


def test_the_private_rule_sees_private_imports() -> None:
    # a guard against a rule that can never fail
    assert _private(Edge("strategies", "tools", "x.py:1", "orchestrion.tools.agents", "m", ("_PromptAgent",)))
    assert _private(Edge("serve", "trace", "x.py:1", "orchestrion.trace._bus", "m"))
    assert not _private(Edge("serve", "trace", "x.py:1", "orchestrion.trace.bus", "m", ("EventType",)))


def test_strategies_do_not_import_the_trace() -> None:
    _check([e for e in EDGES if e.source == "strategies" and e.target == "trace"],
           "strategy imports the trace (it traces through the run context)")


def test_no_import_loop_between_modules() -> None:
    """Tarjan's strongly connected components over every module import (top level, under
    ``TYPE_CHECKING`` and inside functions): a component of two or more modules is a loop."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in MODULE_EDGES:
        if e.module != e.text:
            graph[e.module].add(e.text)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                loops.append(sorted(component))

    for v in sorted(list(graph)):
        if v not in index:
            connect(v)
    if loops:
        pytest.fail("import loops:\n" + "\n".join(
            "  " + ", ".join(loop) + ":" + _report([e for e in MODULE_EDGES if e.module in loop and e.text in loop], 8)
            for loop in loops), pytrace=False)


def test_the_loop_check_sees_the_known_imports() -> None:
    assert any(e.module == "orchestrion.runtime.episode" and e.text == "orchestrion.runtime.synthesis"
               for e in MODULE_EDGES)


def _terminal_below_cli(e: Edge) -> bool:
    """Whether ``e`` is a terminal-library import outside the CLI."""
    return e.target in TERMINAL and e.source != "cli"


def test_only_the_cli_imports_typer_or_rich() -> None:
    _check([e for e in TERMINAL_EDGES if _terminal_below_cli(e)],
           "module below the CLI imports a terminal library (return plain data; the CLI draws it)")


def test_the_terminal_rule_sees_terminal_imports() -> None:
    # guards against a scan that finds nothing and a rule that can never fail
    assert any(e.source == "cli" and e.target == "typer" for e in TERMINAL_EDGES)
    assert any(e.source == "cli" and e.text == "rich.progress" for e in TERMINAL_EDGES)  # a from-import
    assert _terminal_below_cli(Edge("eval", "rich", "x.py:1", "rich.table", "orchestrion.eval.summary"))
    assert _terminal_below_cli(Edge("models", "typer", "x.py:1", "typer", "orchestrion.models.pool"))
    assert not _terminal_below_cli(Edge("cli", "rich", "x.py:1", "rich.table", "orchestrion.cli._render"))


SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE (TABLE|INDEX|VIEW|TRIGGER)|"
                 r"DROP (TABLE|INDEX)|ALTER TABLE|PRAGMA)\b")


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module and its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _sql_outside_trace() -> list[str]:
    """``file:line`` of every string (f-strings included) outside ``trace/`` that holds SQL."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.relative_to(ROOT).parts[0] == "trace":
            continue
        tree = ast.parse(path.read_text(), str(path))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                    and SQL.search(node.value):
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {node.value[:60]!r}")
    return found


def test_only_the_trace_package_writes_sql() -> None:
    # the store's typed methods are the interface (trace/_queries.py); SQL elsewhere couples a caller to the schema
    bad = _sql_outside_trace()
    assert not bad, "SQL outside orchestrion.trace (add a typed query in trace/_queries.py):\n  " + "\n  ".join(bad)


def test_the_sql_rule_sees_sql() -> None:
    # a guard against a pattern that can never match: the trace package itself is full of SQL
    assert SQL.search("SELECT id FROM episodes WHERE run_id = ?")
    assert SQL.search("UPDATE episodes SET meta = ?") and SQL.search("INSERT INTO runs (id) VALUES (?)")
    assert not SQL.search("Select the best arm; update the harness; delete nothing")


def test_the_version_has_one_source() -> None:
    """Issue 36: pyproject.toml holds the version; the package reads it from the installed
    metadata in ``_version`` alone, and nothing else spells a version number or reads it."""
    import tomllib

    from orchestrion import __version__

    declared = tomllib.loads((SRC.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert __version__ == declared
    readers = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
               if p.name != "_version.py" and ("metadata.version(" in (text := p.read_text(encoding="utf-8"))
                                               or 'version("orchestrion")' in text
                                               or f'"{declared}"' in text)]
    assert readers == []
