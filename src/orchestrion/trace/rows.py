"""Typed rows read from the trace store: frozen dataclasses whose fields are the table's columns,
so code outside :mod:`orchestrion.trace` names a column once, as an attribute, and the column
names stay known to the queries alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True)
class RunRow:
    """One row of the ``runs`` table: an eval, a training run or a server's session."""

    id: str
    created: float | None
    kind: str | None
    config: str | None  # JSON text, as stored; :meth:`config_value` decodes it
    status: str | None  # a :class:`~orchestrion.status.RunStatus` value

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RunRow:
        return cls(str(row["id"]), row.get("created"), row.get("kind"), row.get("config"), row.get("status"))

    def config_value(self) -> Any:
        """``config`` decoded (``{}`` when empty)."""
        return orjson.loads(self.config) if self.config else {}
