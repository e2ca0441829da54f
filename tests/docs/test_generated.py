"""The handbook's generated pages match the code: every CLI command and option, every public API
name and every strategy option is on its page (docs/gen_pages.py writes them; rerun it after a change)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import typer.main

from orchestrion import __all__ as public
from orchestrion.cli import app
from orchestrion.strategies.registry import strategies

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_pages", module)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_are_current() -> None:
    stale = [str(p.relative_to(DOCS)) for p, text in _gen().pages().items()
             if not p.exists() or p.read_text(encoding="utf-8") != text]
    assert not stale, f"run `python docs/gen_pages.py`: these pages differ from the code: {stale}"


def test_cli_page_has_every_command_and_option() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = []

    def walk(cmd: object, path: str) -> None:
        if f"`{path}`" not in page:
            missing.append(path)
        for p in getattr(cmd, "params", []):
            for opt in getattr(p, "opts", []):
                if opt.startswith("-") and f"`{opt}`" not in page:
                    missing.append(f"{path} {opt}")
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "orchestrion")
    assert not missing, missing


def test_api_page_covers_every_public_name() -> None:
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    targets = _gen().api_targets()
    assert set(targets) == set(public)
    assert not [n for n, t in targets.items() if f"::: {t}\n" not in page]


def test_every_strategy_page_lists_its_options() -> None:
    for name, cls in strategies().items():
        page = (DOCS / "strategies" / f"{name}.md").read_text(encoding="utf-8")
        index = (DOCS / "strategies" / "index.md").read_text(encoding="utf-8")
        for field in cls.Options.model_fields:
            assert f"| `{field}` |" in page or f"| `{field}` |" in index, (name, field)
