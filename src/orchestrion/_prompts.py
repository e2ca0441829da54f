"""Prompt templates shipped in the package (``orchestrion/prompts/*.md``).

A rendered template is a :class:`Prompt`: a ``str`` that also knows how many of its
leading characters are the same in every episode (its *static head*). The head ends at
the first field that carries per-task text (``{task}``, ``{history}``, ``{results}``, …);
fields that describe the pool or the strategy's options (``{tools}``, ``{models}``,
``{max_calls}``, …, listed in :data:`STATIC_FIELDS`) are part of it. An embedded model
evaluates a static head once, keeps its KV state pinned in RAM and on disk, and starts
every later prompt that begins with it from that state (``models/_kv_cache.py``). So every
template puts its static text first and its per-task text last.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Formatter
from typing import Any

# Fields whose values depend on the pool and the strategy's options only, never on the task.
STATIC_FIELDS = frozenset({
    "max_calls", "tools", "models", "max_subtasks", "max_milestones", "subagent_steps", "wait",
    "max_subagents", "max_steps", "max_active", "max_roles", "levels", "primitives", "capacities",
    "most", "lam",
})


class Prompt(str):
    """Rendered prompt text whose first ``static`` characters are the same in every episode.

    Any string operation (concatenation, slicing, ``strip``) gives a plain ``str``, whose
    static head counts as empty: a prompt changed after rendering is never mistaken for
    static text."""

    static: int

    def __new__(cls, text: str, static: int = 0) -> Prompt:
        obj = super().__new__(cls, text)
        obj.static = max(0, min(static, len(text)))
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (Prompt, (str(self), self.static))


def static_chars(content: str) -> int:
    """How many leading characters of a message's content are static (0 for a plain string)."""
    return content.static if isinstance(content, Prompt) else 0


@cache
def template(name: str) -> str:
    return (resources.files("orchestrion") / "prompts" / f"{name}.md").read_text(encoding="utf-8")


def render(name: str, **values: Any) -> Prompt:
    """Fill template ``name`` with ``values`` using ``str.format`` fields."""
    source = template(name)
    text = source.format(**values).strip()
    head = _static_head(source, values).lstrip()
    if len(head) > len(text):  # no per-task field: the head is the whole text, before strip()
        head = head.rstrip()
    return Prompt(text, len(head) if text.startswith(head) else 0)


def _static_head(source: str, values: dict[str, Any]) -> str:
    """The template filled up to its first per-task field (the whole text when it has none)."""
    parts: list[str] = []
    for literal, field, spec, conversion in Formatter().parse(source):
        parts.append(literal)
        if field is None:
            continue
        if field not in STATIC_FIELDS:
            break
        parts.append(("{" + field + ("!" + conversion if conversion else "") + (":" + spec if spec else "") + "}")
                     .format(**values))
    return "".join(parts)
