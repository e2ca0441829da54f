"""Imports every built-in strategy module so that each registers itself."""

from . import baselines, milestone, para, proactive, router, spec, topology, uno  # noqa: F401
