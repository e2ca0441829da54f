"""A code task's docstring examples: found in the prompt, run on a program in the real sandbox."""

from __future__ import annotations

import pytest

from orchestrion.runtime.code_examples import (
    CodeExample,
    check_program,
    code_stub,
    docstring_examples,
    program_in,
    sanitize,
)
from orchestrion.tools.python_exec import run_sandboxed

PROMPT = '''Write the Python function below in full. Reply with the complete function in one ```python code block.

```python
from typing import List


def add_all(xs: List[int], start: int = 0) -> int:
    """ Add the numbers to start.
    >>> add_all([1, 2, 3])
    6
    >>> add_all([], 5)
    5
    add_all([2, 2], 1) == 5
    add_all([1], 1) ➞ 2
    add_all([0]) ==> 0
    add_all([x]) == x + start
    >>> round(add_all([1, 1]) / 3, 2)
    0.67
    """
```'''


async def _run(source: str) -> tuple[bool, str, str]:
    res = await run_sandboxed(source, timeout_s=10)
    return res.exit_code == 0 and not res.timed_out, res.stdout, res.stderr or ("timed out" if res.timed_out else "")


def test_the_stub_is_the_fenced_function_not_the_instruction_mentioning_a_fence() -> None:
    stub = code_stub(PROMPT)
    assert stub is not None and stub.entry == "add_all" and "Add the numbers" in stub.docstring
    assert code_stub("What is 2 + 2?") is None
    assert code_stub("```python\ndef f(x):\n    return x\n```") is None  # no docstring: not a stub
    late = code_stub('```python\ndef f(x):\n    import math\n    """Floor of x.\n    >>> f(2.5)\n    2\n    """\n```')
    assert late is not None and docstring_examples(late) == [CodeExample("f(2.5)", "2")]  # an import before it


def test_every_example_form_is_read_and_a_rule_is_not_an_example() -> None:
    stub = code_stub(PROMPT)
    assert stub is not None
    assert docstring_examples(stub) == [
        CodeExample("add_all([1, 2, 3])", "6"),
        CodeExample("add_all([], 5)", "5"),
        CodeExample("add_all([2, 2], 1)", "5"),
        CodeExample("add_all([1], 1)", "2"),
        CodeExample("add_all([0])", "0"),
        CodeExample("round(add_all([1, 1]) / 3, 2)", "0.67"),
    ]


def test_lowercase_booleans_and_shown_working_give_the_value() -> None:
    stub = code_stub('```python\ndef f(s, n):\n    """Examples:\n    f("5 a", 19) -> 19 - 5 = 14\n'
                     '    f("a", 2) => true\n    f(a, 2) => true\n    """\n```')
    assert stub is not None
    assert docstring_examples(stub) == [CodeExample("f('5 a', 19)", "14"), CodeExample("f('a', 2)", "True")]


def test_sanitize_keeps_definitions_and_drops_the_models_own_checks() -> None:
    program = "import math\nX = 2\ndef f(x):\n    return x * X\nassert f(1) == 3\nprint(f(2))\nf("
    kept = sanitize(program)
    assert "def f(x)" in kept and "import math" in kept and "X = 2" in kept
    assert "assert" not in kept and "print" not in kept
    reply = "Here it is:\n```python\ndef g():\n    return 1\n```\n```python\ndef f(x):\n    return x\nf(3)\n```"
    stub = code_stub("```python\ndef f(x):\n    \"\"\"f(1) == 1\"\"\"\n```")
    assert stub is not None and program_in(reply, stub).strip() == "def f(x):\n    return x"


@pytest.mark.parametrize(("body", "passed", "failing", "error"), [
    ("return start + sum(xs)", 6, [], ""),
    ("return sum(xs)", 3, ["add_all([], 5) should be 5, but gave 0", "add_all([1], 1) should be 2, but gave 1"], ""),
    ("return start + len(xs)", 3, ["add_all([1, 2, 3]) should be 6, but gave 3"], ""),
])
async def test_a_program_is_checked_in_the_sandbox(body: str, passed: int, failing: list[str], error: str) -> None:
    stub = code_stub(PROMPT)
    assert stub is not None
    examples = docstring_examples(stub)
    check = await check_program(f"def add_all(xs, start=0):\n    {body}\n", examples, _run)
    assert (check.passed, check.total, check.error) == (passed, len(examples), error)
    assert check.all_passed == (passed == len(examples))
    assert all(f in check.failures for f in failing)


async def test_a_program_that_does_not_run_or_hangs_says_so() -> None:
    examples = [CodeExample("f(1)", "1")]
    broken = await check_program("def f(x):\n    return (x\n", examples, _run)
    assert broken.passed == 0 and not broken.all_passed and "SyntaxError" in broken.error
    assert broken.feedback().startswith("The program did not run:")

    async def short(source: str) -> tuple[bool, str, str]:
        res = await run_sandboxed(source, timeout_s=1)
        return False, res.stdout, "timed out" if res.timed_out else res.stderr

    hangs = await check_program("def f(x):\n    while True:\n        pass\n", examples, short)
    assert hangs.passed == 0 and "timed out" in hangs.error
    crash = await check_program("def f(x):\n    return 1 / 0\n", [*examples, CodeExample("f(2)", "2")], _run)
    assert crash.passed == 0 and crash.error == "" and "ZeroDivisionError" in crash.failures[0]
    assert (await check_program("def f(x):\n    return x\n", [], _run)).total == 0  # nothing to check
    chatty = await check_program("def f(x):\n    print('working', end='')\n    return x\n", examples, _run)
    assert chatty.all_passed  # its own output, left without a newline, does not hide the result
