"""Durations as a person types them (30s, 15m, 2h, 7d, 1w): how far back an audit query looks,
how long a client key lasts. One reader, so every face accepts the same forms."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"(\d+)\s*([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_FORMS = "30s, 15m, 2h, 7d, 1w"


def parse_duration(text: str) -> timedelta | None:
    """A number and one unit (s, m, h, d, w) as a span of time; None when `text` is not one, or
    names a span longer than any date can be moved by."""
    duration = _DURATION.fullmatch(text.strip().lower())
    if duration is None:
        return None
    amount, unit = duration.groups()
    try:
        return timedelta(seconds=int(amount) * _UNIT_SECONDS[unit])
    except (OverflowError, ValueError):  # ValueError: more digits than Python reads as a number
        return None
