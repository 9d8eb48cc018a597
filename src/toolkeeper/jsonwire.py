"""JSON for the raw lanes: orjson where it can, the standard library where orjson refuses.

orjson is several times faster than `json` on the call path, but it refuses text that has no
UTF-8 form (a lone UTF-16 surrogate, which JSON's `\\ud800` escape can express). Such a message
is still valid JSON, so it is read and written with `json` instead of being dropped.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes) -> Any:
    """Parse one message; raises ValueError if it is not JSON at all."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(value: Any) -> bytes:
    """One message as a line's bytes (without the newline)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")
