"""The calls one downstream has in flight, so that a stopping gateway can refuse new ones and
cancel the rest, each caller told why."""

from __future__ import annotations

import asyncio
from types import TracebackType

from toolkeeper.downstreams.base import Unavailable
from toolkeeper.downstreams.cancellation import OwnCancellation


class InFlightCalls:
    def __init__(self, source: str) -> None:
        self._source = source
        # Once the gateway is stopping: why. Calls are refused from then on, and those in flight
        # (`_calls`) are cancelled.
        self._stopping: str | None = None
        self._calls: set[InFlightCall] = set()
        # The loop the calls run on, kept: on Python 3.11 every `asyncio.get_running_loop()`
        # (and `asyncio.current_task()` without a loop) is a getpid system call.
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def count(self) -> int:
        """Calls not yet returned to their callers."""
        return len(self._calls)

    def stop(self, reason: str) -> int:
        """Refuse calls from now on and cancel those in flight. How many were in flight."""
        self._stopping = reason
        for call in list(self._calls):
            call.cancel()
        return len(self._calls)

    def stoppable(self, what: str) -> InFlightCall:
        """The `with` block one call (`what`) runs in, which `stop` cancels. A caller whose block
        caught that cancellation raises `shutting_down`'s error after the block."""
        return InFlightCall(self, what)

    def shutting_down(self, what: str, call: InFlightCall | None) -> str:
        """Why `what` did not get an answer: cancelled in flight (`call`), or never sent."""
        done = "was cancelled" if call is not None else f"was not sent to server '{self._source}'"
        return f"the gateway is shutting down ({self._stopping}); {what} {done}"

    def _current_task(self) -> asyncio.Task[object]:
        task = asyncio.current_task(self._loop) if self._loop is not None else None
        if task is None:  # the first call, or a loop of its own (a test's)
            self._loop = asyncio.get_running_loop()
            task = asyncio.current_task(self._loop)
        assert task is not None, "a call runs in a task"
        return task


class InFlightCall:
    """The `with` block of one call in flight, whose task `stop` cancels: the block takes that
    cancellation back, unless another came as well, as `asyncio.timeout` does. A plain asyncio
    cancellation rather than anyio's cancel scope, which costs several times more on every call's
    path; a class rather than a generator-based context manager, which costs several calls more."""

    __slots__ = ("_calls", "_stop", "_what")

    def __init__(self, calls: InFlightCalls, what: str) -> None:
        self._calls = calls
        self._what = what

    def __enter__(self) -> InFlightCall:
        calls = self._calls
        if calls._stopping is not None:
            raise Unavailable(calls.shutting_down(self._what, None))
        self._stop = OwnCancellation(calls._current_task())
        calls._calls.add(self)
        return self

    def cancel(self) -> None:
        self._stop.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._calls._calls.discard(self)
        # Cancelled by `stop`: a call that ended anyway takes the cancellation back all the same.
        return self._stop.take_back() and exc_type is asyncio.CancelledError
