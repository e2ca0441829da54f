"""Command-line commands for this area; ``register`` adds them to a typer app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (not built yet)."""
