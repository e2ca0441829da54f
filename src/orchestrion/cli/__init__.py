"""The command line, every command of ``orchestrion``: run, tool, strategies, trace, serve, view,
models, datasets, eval, report and train. The only package that imports typer and rich's console
output; the packages below it are called through their Python API.
"""

from __future__ import annotations

from ._app import app, main

__all__ = ["app", "main"]
