"""The calls one downstream has in flight, so that a stopping gateway can refuse new ones and
cancel the rest, each caller told why."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from toolkeeper.downstreams.base import Unavailable


class InFlightCalls:
    def __init__(self, source: str) -> None:
        self._source = source
        # Once the gateway is stopping: why. Calls are refused from then on, and those in flight
        # (each under one of `_scopes`) are cancelled.
        self._stopping: str | None = None
        self._scopes: set[anyio.CancelScope] = set()

    @property
    def count(self) -> int:
        """Calls not yet returned to their callers."""
        return len(self._scopes)

    def stop(self, reason: str) -> int:
        """Refuse calls from now on and cancel those in flight. How many were in flight."""
        self._stopping = reason
        for scope in list(self._scopes):
            scope.cancel()
        return len(self._scopes)

    @contextmanager
    def stoppable(self, what: str) -> Iterator[anyio.CancelScope]:
        """The scope one call (`what`) runs in, which `stop` cancels. A caller whose scope caught
        that cancellation raises `shutting_down`'s error after the block."""
        if self._stopping is not None:
            raise Unavailable(self.shutting_down(what, None))
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    def shutting_down(self, what: str, scope: anyio.CancelScope | None) -> str:
        """Why `what` did not get an answer: cancelled in flight (`scope`), or never sent."""
        done = "was cancelled" if scope is not None else f"was not sent to server '{self._source}'"
        return f"the gateway is shutting down ({self._stopping}); {what} {done}"
