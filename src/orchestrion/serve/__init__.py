"""Serving strategies over HTTP (an OpenAI-compatible endpoint whose models are strategies) and
viewing traces in a browser."""

from __future__ import annotations

from .server import ServeSettings, create_app, run_server
from .viewer import export_static, run_viewer

__all__ = ["ServeSettings", "create_app", "export_static", "run_server", "run_viewer"]
