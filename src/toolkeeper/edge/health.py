"""`GET /healthz` and `GET /readyz`: what a load balancer or an orchestrator asks before sending
a replica its clients. Both pass the Host guard like every request, need no credential, and
answer with a fixed word, so they reveal nothing (no server names, no versions, no reasons):

- `/healthz`: 200 while the process serves HTTP at all;
- `/readyz`: 200 once every configured server has been started (connected, or given up on for
  start-up's grace period, as the gateway itself waits before answering its first list) and the
  store answers a read within `STORE_CHECK_SECONDS`; else 503. A replica with one broken
  server stays ready: its other servers still serve, and the others would fail the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio
from starlette.types import Scope, Send

from toolkeeper.edge.http_fastlane import respond
from toolkeeper.runtime.gateway import Gateway

logger = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
HEALTH_PATHS = frozenset({HEALTH_PATH, READY_PATH})
# A probe waits no longer than this for the store: a store that slow is as good as gone.
STORE_CHECK_SECONDS = 2.0
PLAIN = b"text/plain; charset=utf-8"


class Health:
    """Answers the two probes for one gateway."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def __call__(self, scope: Scope, headers: Mapping[str, str], send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await respond(send, 405, b"method not allowed\n", PLAIN)
            return
        if scope["path"] == HEALTH_PATH or await self.ready():
            await respond(send, 200, b"ok\n", PLAIN)
            return
        await respond(send, 503, b"not ready\n", PLAIN)

    async def ready(self) -> bool:
        """Whether the servers were started and the store answers."""
        gateway = self.gateway
        if not gateway.started.is_set():
            return False
        store = gateway.store
        if store is None:
            return True
        with anyio.move_on_after(STORE_CHECK_SECONDS):
            try:
                await store.revision()
            except Exception as exc:  # whatever the store's driver raises, a probe answers
                logger.debug("not ready: the store did not answer: %s", exc)
                return False
            return True
        logger.debug("not ready: the store did not answer within %ss", STORE_CHECK_SECONDS)
        return False
