"""A rate as a person writes it in the settings ("120/minute", "100/15 minutes"), and what it
allows: a bucket of that many calls, refilled evenly over the period.

`120/minute` lets 120 calls through at once, then one every half second; a caller that waits a
whole minute has all 120 again. Every limit of toolkeeper.rateLimits is counted this way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UNIT_SECONDS = {
    "s": 1, "sec": 1, "second": 1,
    "m": 60, "min": 60, "minute": 60,
    "h": 3600, "hour": 3600,
    "d": 86400, "day": 86400,
}  # fmt: skip
_RATE = re.compile(r"(?P<calls>\d{1,9})\s*/\s*(?P<count>\d{1,6})?\s*(?P<unit>[a-z]+)")
RATE_EXAMPLE = '"120/minute"'
RATE_FORMS = (
    f"a rate like {RATE_EXAMPLE}: a number of calls per second, minute, hour or day, or per several "
    'of them ("100/15 minutes")'
)


@dataclass(frozen=True)
class Rate:
    """At most `calls` at once, refilled evenly over `period` seconds; `written` is the setting's text."""

    calls: int
    period: float
    written: str

    @property
    def interval(self) -> float:
        """The seconds each call's room takes to come back."""
        return self.period / self.calls

    @property
    def tolerance(self) -> float:
        """How far ahead of now a bucket's refill may reach while it still has room for a call:
        the room of all its calls but the one being taken."""
        return self.period - self.interval

    def __str__(self) -> str:
        return self.written


def parse_rate(text: str) -> Rate | None:
    """The rate `text` writes, or None when it writes none (see RATE_FORMS)."""
    match = _RATE.fullmatch(text.strip().lower())
    if match is None:
        return None
    unit = match["unit"]
    seconds = UNIT_SECONDS.get(unit) or UNIT_SECONDS.get(unit.removesuffix("s"))
    calls, count = int(match["calls"]), int(match["count"] or 1)
    if seconds is None or calls < 1 or count < 1:
        return None
    return Rate(calls=calls, period=float(seconds * count), written=text.strip())
