"""A code task's own examples, run as tests: execution feedback that sees only the prompt.

A code task asks for a function whose stub (signature and docstring) is in the prompt's
```python block; the docstring often shows calls and their results (``>>> f(1)`` then ``2``, or
``f(1) == 2``, ``f(1) ➞ 2``). :func:`code_stub` finds the stub in the **prompt text** and
:func:`docstring_examples` reads those examples from it, so nothing here can see a dataset's
hidden tests (HumanEval's ``test`` field lives in the task's metadata, which this module never
reads). :func:`check_program` runs a candidate program against the examples in one sandboxed
Python run and says which passed; :func:`sanitize` keeps only a program's imports, definitions
and assignments, so that a model's own top-level checks neither fail a right answer nor run.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .._text import PYTHON_FENCES, code_blocks

KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
        ast.AnnAssign)
_WRAPPERS = frozenset({"round", "abs", "len", "sorted", "list", "tuple", "set", "str", "int", "float", "bool"})
MAX_EXAMPLES = 12  # the most examples one check runs
_FENCE = re.compile(r"^```[ \t]*(\w*)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)  # fences at line starts only
_ARROWS = re.compile(r"\s*(?:==>|==|➞|=>|->|⇒|→|returns|should return|should be)\s*")


@dataclass(frozen=True)
class CodeExample:
    """One example of a docstring: a call of the entry point and the value it should give."""

    call: str
    expected: str


@dataclass(frozen=True)
class CodeStub:
    """The function a code task asks for, as its prompt shows it."""

    code: str
    entry: str
    docstring: str


@dataclass
class ExampleCheck:
    """What running a program against the examples showed."""

    passed: int = 0
    total: int = 0
    failures: list[str] = field(default_factory=list)
    error: str = ""  # the program itself did not run (syntax error, time-out, a crash at import)

    @property
    def all_passed(self) -> bool:
        return not self.error and self.total > 0 and self.passed == self.total

    def feedback(self) -> str:
        """The failures as a model reads them: one line per failing example, or the run's error."""
        if self.error:
            return f"The program did not run: {self.error}"
        return "\n".join(self.failures)


def code_stub(prompt: str) -> CodeStub | None:
    """The last function with a docstring in ``prompt``'s Python code blocks (fences at line starts), or None."""
    for lang, block in reversed(_FENCE.findall(prompt)):
        if lang.lower() not in PYTHON_FENCES:
            continue
        try:
            tree = ast.parse(block + ("\n    pass\n" if block.rstrip().endswith(('"""', "'''")) else ""))
        except SyntaxError:
            continue
        funcs = [(n, doc) for n in tree.body if isinstance(n, ast.FunctionDef) and (doc := _docstring(n))]
        if funcs:
            return CodeStub(code=block, entry=funcs[-1][0].name, docstring=funcs[-1][1])
    return None


def _docstring(func: ast.FunctionDef) -> str:
    """The function's docstring, or the first string standing alone in its body (a stub may import
    before it), else ""."""
    for node in func.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return inspect.cleandoc(node.value.value)
    return ""


def _literal(expr: str) -> bool:
    """Whether ``expr`` is a Python literal (a number, string, list, tuple, dict, set, bool, None)."""
    try:
        ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _expected(text: str) -> str:
    """The value of an example's right-hand side: its last ``= value`` where it shows the working
    (``19 - 5 - 6 = 8``), ``true``/``false`` as Python spells them, no trailing full stop."""
    value = text.strip().rstrip(".,;").split(" = ")[-1].strip()
    return {"true": "True", "false": "False", "none": "None"}.get(value.lower(), value)


def _example(call: str, expected: str, entry: str) -> CodeExample | None:
    """An example when ``call`` calls ``entry`` on literal arguments only (maybe inside a builtin
    such as ``round``) and ``expected`` is a literal: ``fib(n) == fib(n-1) + fib(n-2)`` states a
    rule, not an example."""
    call, expected = call.strip(), _expected(expected)
    try:
        tree = ast.parse(call, mode="eval")
    except SyntaxError:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == entry]
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    if len(calls) != 1 or not names <= {entry, *_WRAPPERS}:
        return None
    args = [*calls[0].args, *(k.value for k in calls[0].keywords)]
    if not all(_literal(ast.unparse(a)) for a in args) or not _literal(expected):
        return None
    return CodeExample(ast.unparse(tree), expected)


def docstring_examples(stub: CodeStub) -> list[CodeExample]:
    """The examples ``stub``'s docstring shows: ``>>> call`` with the next line(s) as the value,
    and lines ``call == value`` (or ``➞``, ``=>``, ``->``, ``returns``) whose call names the entry
    point. Both sides must parse as Python expressions; at most :data:`MAX_EXAMPLES`."""
    lines = stub.docstring.splitlines()
    found: list[CodeExample] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith(">>>"):
            call = line[3:].strip()
            value: list[str] = []
            i += 1
            while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(">>>") \
                    and f"{stub.entry}(" not in lines[i]:  # the value ends where the next example starts
                value.append(lines[i].strip())
                i += 1
            if value and (example := _example(call, " ".join(value), stub.entry)):
                found.append(example)
            continue
        start = line.find(f"{stub.entry}(")
        if start >= 0:
            parts = _ARROWS.split(line[start:].rstrip(".,;"), maxsplit=1)
            if len(parts) == 2 and (example := _example(parts[0], parts[1], stub.entry)):
                found.append(example)
        i += 1
    unique = list(dict.fromkeys(found))
    return unique[:MAX_EXAMPLES]


def _parsable(program: str) -> ast.Module | None:
    """The module, dropping trailing lines until what is left parses (None: nothing does)."""
    lines = program.splitlines()
    while lines:
        try:
            return ast.parse("\n".join(lines))
        except SyntaxError:
            lines.pop()
    return None


def sanitize(program: str) -> str:
    """Only the top-level imports, definitions and assignments of ``program``, in their order
    (where it does not parse, its last lines dropped until it does; unchanged if nothing does)."""
    module = _parsable(program)
    if module is None:
        return program
    return "\n\n".join(ast.unparse(node) for node in module.body if isinstance(node, KEEP)) + "\n"


def program_in(reply: str, stub: CodeStub) -> str:
    """The code of a reply to a code task: the Python block that defines the entry point (else the
    longest block, else the whole reply), sanitized."""
    blocks = [code for lang, code in code_blocks(reply) if lang in PYTHON_FENCES]
    defines = re.compile(rf"^\s*def\s+{re.escape(stub.entry)}\s*\(", re.MULTILINE)
    code = next((b for b in blocks if defines.search(b)), max(blocks, key=len) if blocks else reply)
    return sanitize(code)


_CHECKER = """
import json as _json, math as _math
def _same(_got, _want):
    if isinstance(_got, float) or isinstance(_want, float):
        try:
            return _math.isclose(float(_got), float(_want), rel_tol=1e-6, abs_tol=1e-6)
        except (TypeError, ValueError):
            return False
    if isinstance(_got, (list, tuple)) and isinstance(_want, (list, tuple)):
        return len(_got) == len(_want) and all(_same(a, b) for a, b in zip(_got, _want))
    return _got == _want
for _call, _want in _EXAMPLES:
    try:
        _got = eval(_call)
        _ok = _same(_got, eval(_want))
        _res = {"ok": bool(_ok), "got": repr(_got)[:200]}
    except Exception as _exc:
        _res = {"ok": False, "got": type(_exc).__name__ + ": " + str(_exc)[:200]}
    print(_MARK + _json.dumps(_res), flush=True)
"""


def checker(program: str, examples: list[CodeExample]) -> tuple[str, str]:
    """The program that runs ``examples`` after ``program``, and the mark its result lines start with."""
    mark = f"@@example-{uuid.uuid4().hex[:8]}@@"
    pairs = json.dumps([[e.call, e.expected] for e in examples])
    return f"{program}\n\n_MARK = {mark!r}\n_EXAMPLES = {pairs}\n{_CHECKER}", mark


Runner = Callable[[str], Awaitable[tuple[bool, str, str]]]
"""Runs a program in the sandbox; returns (ran to the end, stdout, error)."""


async def check_program(program: str, examples: list[CodeExample], run: Runner) -> ExampleCheck:
    """Run ``program`` against ``examples`` in one sandboxed run (``run``) and say which passed."""
    if not examples:
        return ExampleCheck()
    source, mark = checker(program, examples)
    finished, stdout, error = await run(source)
    # anywhere in a line: the function may have printed without a newline before the mark
    results = [json.loads(line[line.index(mark) + len(mark):]) for line in stdout.splitlines() if mark in line]
    check = ExampleCheck(total=len(examples))
    if len(results) < len(examples):
        check.error = (error or "it stopped before every example had run").strip()[-400:]
        if not results:
            return check
    for example, res in zip(examples, results, strict=False):
        if res.get("ok"):
            check.passed += 1
        else:
            check.failures.append(f"{example.call} should be {example.expected}, but gave {res.get('got')}")
    if finished and len(results) == len(examples):
        check.error = ""
    return check
