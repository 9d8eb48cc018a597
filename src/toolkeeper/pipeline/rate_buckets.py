"""The rate limits' buckets counted in this process: where no PostgreSQL store is shared (SQLite,
one machine), and while one cannot be reached. The same arithmetic as store/rate_buckets.py, on
this process's monotonic clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from toolkeeper.config.rates import Rate

# Past this many buckets, those full again are forgotten (a forgotten bucket is a full one).
PRUNE_AT = 4096


class MemoryBuckets:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._refilled_at: dict[str, float] = {}

    def take(self, wanted: Sequence[tuple[str, Rate]]) -> tuple[int, float] | None:
        """Take one call from each bucket `wanted` names (subject, rate), all or none: None when
        each had room; otherwise the position of the first full one and the seconds until it has
        room."""
        now = self._clock()
        taken: list[tuple[str, float]] = []
        for position, (subject, rate) in enumerate(wanted):
            refilled = max(self._refilled_at.get(subject, now), now)
            if refilled - now > rate.tolerance:
                return position, refilled - now - rate.tolerance
            taken.append((subject, refilled + rate.interval))
        if len(self._refilled_at) >= PRUNE_AT:
            self._refilled_at = {s: at for s, at in self._refilled_at.items() if at > now}
        self._refilled_at.update(taken)
        return None
