"""The calls one downstream has in flight, so that a stopping gateway can refuse new ones and
cancel the rest, each caller told why."""

from __future__ import annotations

from types import TracebackType

import anyio

from toolkeeper.downstreams.base import Unavailable


class InFlightCalls:
    def __init__(self, source: str) -> None:
        self._source = source
        # Once the gateway is stopping: why. Calls are refused from then on, and those in flight
        # (each under one of `_scopes`) are cancelled.
        self._stopping: str | None = None
        self._scopes: set[anyio.CancelScope] = set()
        # The running backend's own cancel scope class, learned from the first scope made:
        # `anyio.CancelScope()` looks the backend up on every call, which costs more than the
        # scope itself (the scope and its semantics are the same either way).
        self._scope_class: type[anyio.CancelScope] | None = None

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

    def stoppable(self, what: str) -> InFlightCall:
        """The scope one call (`what`) runs in, which `stop` cancels. A caller whose scope caught
        that cancellation raises `shutting_down`'s error after the block."""
        return InFlightCall(self, what)

    def shutting_down(self, what: str, scope: anyio.CancelScope | None) -> str:
        """Why `what` did not get an answer: cancelled in flight (`scope`), or never sent."""
        done = "was cancelled" if scope is not None else f"was not sent to server '{self._source}'"
        return f"the gateway is shutting down ({self._stopping}); {what} {done}"

    def _new_scope(self) -> anyio.CancelScope:
        if self._scope_class is None:
            scope = anyio.CancelScope()
            self._scope_class = type(scope)
            return scope
        return self._scope_class()


class InFlightCall:
    """The `with` block of one call in flight: entered, a cancel scope that `stop` cancels. A
    class rather than a generator-based context manager, which costs several calls more on every
    call's path."""

    __slots__ = ("_calls", "_scope", "_what")

    def __init__(self, calls: InFlightCalls, what: str) -> None:
        self._calls = calls
        self._what = what
        self._scope: anyio.CancelScope | None = None

    def __enter__(self) -> anyio.CancelScope:
        calls = self._calls
        if calls._stopping is not None:
            raise Unavailable(calls.shutting_down(self._what, None))
        scope = self._scope = calls._new_scope().__enter__()
        calls._scopes.add(scope)
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        scope = self._scope
        assert scope is not None, "entered first"
        self._calls._scopes.discard(scope)
        return scope.__exit__(exc_type, exc, traceback)
