"""Imports every built-in strategy module so that each registers itself."""

from . import baselines, para  # noqa: F401
