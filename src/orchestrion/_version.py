"""The Orchestrion version. ``pyproject.toml`` is its only source; it reaches here through the
installed package's metadata, read once when this module is imported (every other place that
shows the version, ``orchestrion --version``, ``/version``, OpenTelemetry's ``service.version``,
uses :data:`__version__`).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

UNKNOWN = "0+unknown"  # a source tree that was never installed: `pip install -e .` records the version


def _installed() -> str:
    try:
        return version("orchestrion")
    except PackageNotFoundError:
        return UNKNOWN


__version__ = _installed()
