"""One cancellation of a task, made by code that later takes it back: the rule `asyncio.timeout`
follows, without its cost on every call's path (on Python 3.11 its enter and exit ask for the
running loop three times, each a getpid system call, and await two coroutines).

A downstream request's deadline, a stopping gateway ending a call or an HTTP request, and a
client leaving the fast lane each cancel the task they watch; the task then catches
CancelledError and asks `take_back` whether that cancellation alone caused it, or another
came as well (the caller's own, which must go on)."""

from __future__ import annotations

import asyncio
from typing import Any


class OwnCancellation:
    __slots__ = ("_before", "_made", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self._before = task.cancelling()  # cancellations already requested: not ours
        self._made = False

    def cancel(self) -> None:
        """Cancel the task, once: a second call does nothing until it is taken back."""
        if not self._made:
            self._made = True
            self.task.cancel()

    def take_back(self) -> bool:
        """Withdraw this cancellation, if it was made; whether it was the only one requested
        since this object was made (then the task's CancelledError was ours alone)."""
        if not self._made:
            return False
        self._made = False
        return self.task.uncancel() <= self._before
