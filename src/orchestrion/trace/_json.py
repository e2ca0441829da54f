"""JSON text for trace columns (orjson; anything unknown becomes its ``str``)."""

from __future__ import annotations

from typing import Any

import orjson


def dumps(value: Any) -> str:
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
