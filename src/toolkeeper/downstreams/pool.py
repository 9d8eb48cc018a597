"""All downstream servers of one configuration, each under its own supervisor."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from functools import partial

import anyio

from toolkeeper.config.model import Config, SourceConfig
from toolkeeper.downstreams.base import Downstream, DownstreamListener
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.downstreams.signin.keeper import SignIns

logger = logging.getLogger(__name__)

# Makes the downstream for one configured source: the one its kind makes unless told otherwise
# (the tests drive the pipeline with in-process downstreams this way).
Connect = Callable[[SourceConfig, DownstreamListener], Downstream]
CALLS_ENDED_POLL_SECONDS = 0.01


class DownstreamPool:
    def __init__(
        self,
        config: Config,
        listener: DownstreamListener,
        connect: Connect | None = None,
        *,
        sign_ins: SignIns | None = None,
    ) -> None:
        """`sign_ins`: the gateway's signed-in accounts, which the kinds that sign in are handed
        (with `KINDS.connect`, the default)."""
        self.config = config
        self.sign_ins = sign_ins
        if connect is None:
            connect = partial(KINDS.connect, sign_ins=sign_ins)
        # Config order matters: it is the order tools are listed in.
        self.downstreams: dict[str, Downstream] = {s.name: connect(s, listener) for s in config.servers}
        self._slots = anyio.CapacityLimiter(config.settings.max_concurrent_connects)

    def __getitem__(self, name: str) -> Downstream:
        return self.downstreams[name]

    def __iter__(self) -> Iterator[Downstream]:
        return iter(self.downstreams.values())

    async def run(self) -> None:
        """Supervise every server until cancelled; cancelling stops (and reaps) them all."""
        async with anyio.create_task_group() as tg:
            for downstream in self.downstreams.values():
                tg.start_soon(downstream.run, self._slots, name=f"downstream:{downstream.name}")

    def stop_calls(self, reason: str) -> int:
        """The gateway is stopping: every server refuses calls from now on, and the calls in
        flight are cancelled, each caller told why. How many were in flight."""
        return sum(downstream.stop_calls(reason) for downstream in self.downstreams.values())

    async def calls_ended(self, timeout: float) -> bool:
        """Wait until the calls `stop_calls` cancelled have returned to their callers, at most
        `timeout`."""
        with anyio.move_on_after(timeout):
            while any(downstream.calls_in_flight for downstream in self.downstreams.values()):
                await anyio.sleep(CALLS_ENDED_POLL_SECONDS)
            return True
        return False

    async def wait_started(self, timeout: float) -> bool:
        """Wait until every server has had its first connection attempt, at most `timeout`."""
        with anyio.move_on_after(timeout):
            for downstream in self.downstreams.values():
                await downstream.first_attempt_done.wait()
            return True
        pending = [u.name for u in self.downstreams.values() if not u.first_attempt_done.is_set()]
        logger.warning("still starting after %.0fs: %s; serving the others", timeout, ", ".join(pending))
        return False
