"""Names a package exports but imports on first access (module ``__getattr__``), so importing the
package does not load what they need (eval, train, torch). A leaf: it imports nothing of orchestrion.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, namespace: dict[str, Any],
               where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose globals are ``namespace``: ``where``
    maps each lazy name to the (relative) module it lives in; a name once loaded is stored in
    ``namespace``, so later lookups skip ``__getattr__``."""

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(where))

    return getattr_, dir_
