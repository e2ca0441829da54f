"""The ``calculator`` tool: exact arithmetic without ``eval``.

The expression is parsed with :mod:`ast` and evaluated by walking the tree.
Only numbers, the operators ``+ - * / // % **``, unary signs, parentheses and a
whitelist of functions and constants from :mod:`math` are accepted; anything
else (names, attributes, strings, comprehensions, ...) is refused with a
``ValueError`` naming what was found, which the registry reports as
``exec_error``. Integer results are kept exact but bounded, so ``9**9**9``
fails fast instead of eating the machine.

Small models write arithmetic the way people do, so before parsing the text is
forgiven a little: ``×`` or an ``x`` between two operands (``221 x 1004``,
``3x(2+1)``; ``0x1F`` stays hexadecimal) means ``*``, ``÷`` means ``/``, ``−``
means ``-``, a trailing ``=`` is dropped, and commas that group thousands
(``1,234,567``) are removed unless they could be separating a function's arguments.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .registry import Tool

if TYPE_CHECKING:
    from .context import ToolContext

Number = int | float

MAX_INT_BITS = 13_000  # about 3,900 decimal digits, under Python's int-to-str limit
MAX_EXPONENT = 10_000
MAX_FACTORIAL = 1_000

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}


def _factorial(n: Number) -> int:
    if not isinstance(n, int) or n < 0:
        raise ValueError("factorial needs a non-negative integer")
    if n > MAX_FACTORIAL:
        raise ValueError(f"factorial argument above {MAX_FACTORIAL}")
    return math.factorial(n)


def _round(x: Number, ndigits: int | None = None) -> Number:
    if ndigits is not None and not isinstance(ndigits, int):
        raise ValueError("round's second argument must be an integer")
    return round(x, ndigits)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": _round, "min": min, "max": max,
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos,
    "atan": math.atan, "atan2": math.atan2, "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc, "hypot": math.hypot,
    "degrees": math.degrees, "radians": math.radians, "gcd": math.gcd, "factorial": _factorial,
}  # fmt: skip


def _check_size(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"result too large (more than {MAX_INT_BITS} bits)")
    return value


def _power(base: Number, exp: Number) -> Number:
    if isinstance(exp, int) and abs(exp) > MAX_EXPONENT:
        raise ValueError(f"exponent {exp} is too large (limit {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exp, int) and abs(base) > 1 and exp > 0:
        if exp * math.log2(abs(base)) > MAX_INT_BITS:
            raise ValueError(f"result of {base}**{exp} would be too large")
    result: Number = base**exp
    if isinstance(result, complex):
        raise ValueError("result is a complex number")
    return result


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ValueError(f"only numbers are allowed, not {node.value!r}")
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        if type(node.op) not in _BINARY:
            hint = "; use ** for powers" if isinstance(node.op, ast.BitXor) else ""
            raise ValueError(f"operator {type(node.op).__name__} is not allowed{hint}")
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_size(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.Name):
        if node.id not in _CONSTANTS:
            raise ValueError(f"unknown name '{node.id}'; constants: {', '.join(_CONSTANTS)}")
        return _CONSTANTS[node.id]
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise ValueError(f"unknown function '{name}'; allowed: {', '.join(sorted(_FUNCTIONS))}")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ValueError(f"{node.func.id}() takes plain positional arguments only")
        args = [_eval(a) for a in node.args]
        try:
            return _check_size(_FUNCTIONS[node.func.id](*args))
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise ValueError(f"{node.func.id}({', '.join(map(format_number, args))}): {exc}") from None
    raise ValueError(f"'{ast.unparse(node)}' is not allowed in a calculator expression")


_SIGNS = str.maketrans({"×": "*", "÷": "/", "−": "-"})
_TIMES = re.compile(r"(?P<hex>(?<![\w.])0[xX][0-9a-fA-F_]+)|(?<=[\w.)])\s+[xX]\s+(?=[\w.(])|(?<=[\d.)])[xX](?=[\d.(])")
_GROUPED = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?!\d)")


def _in_call(text: str, at: int) -> bool:
    """Whether position ``at`` lies directly inside a function call's parentheses."""
    depth = 0
    for i in range(at - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                return bool(re.search(r"\w\s*$", text[:i]))
            depth -= 1
    return False


def forgive(expression: str) -> str:
    """Rewrite everyday arithmetic notation (``×``, ``x``, ``1,234``, a trailing ``=``) as Python."""
    text = expression.translate(_SIGNS).strip().removesuffix("=").strip()
    text = _TIMES.sub(lambda m: m["hex"] or "*", text)
    return _GROUPED.sub(lambda m: m[0] if _in_call(text, m.start()) else m[0].replace(",", ""), text)


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely; raise ``ValueError`` with a clear message."""
    try:
        tree = ast.parse(forgive(expression), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a valid expression: {exc.msg}") from None
    try:
        return _eval(tree)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    except OverflowError:
        raise ValueError("numeric overflow: the result is too large for a float") from None
    except RecursionError:
        raise ValueError("expression is nested too deeply") from None


def format_number(value: Number) -> str:
    """Integers as integers; floats without a spurious ``.0`` and with 15 significant digits."""
    if isinstance(value, int):
        return str(value)
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.15g}"


class CalculatorArgs(BaseModel):
    expression: str = Field(max_length=500, description="arithmetic, e.g. (3 + 4) * sqrt(2) / 7")


class CalculatorTool(Tool):
    """Evaluates an arithmetic expression exactly where it can."""

    name = "calculator"
    description = "evaluate an arithmetic expression: + - * / // % **, parentheses, sqrt, log, sin, cos, pi, e, ..."
    Args = CalculatorArgs
    kind = "tool"

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> str:
        parsed = args if isinstance(args, CalculatorArgs) else CalculatorArgs.model_validate(args)
        return format_number(evaluate(parsed.expression))
