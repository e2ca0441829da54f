"""Prompt templates shipped in the package (``orchestrion/prompts/*.md``)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any


@cache
def template(name: str) -> str:
    return (resources.files("orchestrion") / "prompts" / f"{name}.md").read_text(encoding="utf-8")


def render(name: str, **values: Any) -> str:
    """Fill template ``name`` with ``values`` using ``str.format`` fields."""
    return template(name).format(**values).strip()
