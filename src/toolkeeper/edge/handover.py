"""A 2026-07-28 client's input round that reaches another replica than the one holding it.

When a handshake-era server asks a modern client something during a call, the downstream call
waits on the replica that started it (its connection to the server is that replica's), and the
client's retry carries a `requestState` naming that replica (relay/seal.py), sealed with the key
every replica of the store shares. A load balancer may send the retry to any replica: the one it
reaches hands the request, as the client sent it, to the replica named, at the address that
replica published in the store, and passes its answer back. The client sees one gateway.

The request keeps its headers (its credential, checked again there; its Host, which every replica
of one configuration accepts) and is marked as handed over, so that it is never handed on again.
A replica that cannot be reached is named in the error, with the way to pin clients instead.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
from starlette.types import Send

from toolkeeper.protocol import INVALID_PARAMS, error_response
from toolkeeper.relay.relay import REQUEST_STATE_PREFIX
from toolkeeper.relay.seal import TokenSeal
from toolkeeper.store import Store, StoreError
from toolkeeper.store.replica_addresses import address_of, publish_address

logger = logging.getLogger(__name__)

HANDED_OVER = "toolkeeper-handed-over-by"  # the header naming the replica that handed a request on
# Not passed on either way: they describe one connection, not the request.
HOP_BY_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    )
)
CONNECT_SECONDS = 5.0
# A round ends when the downstream call asks again or ends: as long as a call may wait for its client.
ROUND_SECONDS = 600.0
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
PIN_ADVICE = (
    "route each client to one replica at the load balancer (sticky sessions on the client's address "
    "or its Authorization header), or let the replicas reach each other (toolkeeper.http.replicaUrl)"
)


def own_address(configured: str | None, host: str, port: int, path: str) -> str:
    """Where the other replicas reach this one's MCP endpoint: the configured URL, else this
    process's address (the bound one, or on every interface the host's own) and port."""
    if configured:
        return configured
    reach = host
    if host in WILDCARD_HOSTS:
        try:
            reach = socket.gethostbyname(socket.gethostname())
        except OSError:
            reach = socket.gethostname()
    if ":" in reach:
        reach = f"[{reach}]"
    return f"http://{reach}:{port}{path}"


class Handover:
    def __init__(self, store: Store, seal: TokenSeal, address: Callable[[], str]) -> None:
        """`address`: where the other replicas reach this one (worked out as it is published,
        off the start-up path: it may ask the resolver for this host's address)."""
        self.store = store
        self.seal = seal
        self.address = address
        self._http: httpx2.AsyncClient | None = None

    @property
    def replica(self) -> str:
        return self.seal.replica

    async def publish(self) -> None:
        """Tell the other replicas where this one is reached."""
        address = await anyio.to_thread.run_sync(self.address)
        try:
            async with self.store.write(bump_revision=False) as conn:
                await publish_address(conn, self.replica, address)
        except StoreError as exc:
            logger.warning(
                "cannot publish where replica %r is reached (%s): rounds it holds stay here",
                self.replica,
                exc,
            )

    def owner(self, message: Any, headers: dict[str, str]) -> str | None:
        """The other replica holding the round this request continues, or None (not such a
        request, this replica's own, or handed over already)."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        params = message.get("params")
        state = params.get("requestState") if isinstance(params, dict) else None
        if not isinstance(state, str) or not state.startswith(REQUEST_STATE_PREFIX) or HANDED_OVER in headers:
            return None
        replica = self.seal.replica_of(state.removeprefix(REQUEST_STATE_PREFIX))
        return replica if replica and replica != self.replica else None

    async def pass_on(
        self, replica: str, message: dict[str, Any], headers: dict[str, str], body: bytes, send: Send
    ) -> dict[str, Any] | None:
        """Send the request to `replica` and its answer to the client; None once answered, else
        the JSON-RPC error to answer with (the replica is unknown or cannot be reached)."""
        try:
            async with self.store.read() as conn:
                address = await address_of(conn, replica)
        except StoreError as exc:
            return self._cannot(message, replica, f"the store cannot say where it is ({exc})")
        if address is None:
            return self._cannot(message, replica, "it never said where it is reached")
        forwarded = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
        forwarded[HANDED_OVER] = self.replica
        started = False
        try:
            async with self._client().stream("POST", address, content=body, headers=forwarded) as answer:
                await send(
                    {
                        "type": "http.response.start",
                        "status": answer.status_code,
                        "headers": [
                            (k.encode("latin-1"), v.encode("latin-1"))
                            for k, v in answer.headers.items()
                            if k.lower() not in HOP_BY_HOP or k.lower() == "content-length"
                        ],
                    }
                )
                started = True
                async for chunk in answer.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except httpx2.HTTPError as exc:
            if started:  # the client has half an answer: end it; its call fails as a cut one does
                logger.warning("replica %r stopped answering a handed-over round: %s", replica, exc)
                await send({"type": "http.response.body", "body": b""})
                return None
            return self._cannot(message, replica, f"{address} cannot be reached ({exc})")
        return None

    def _cannot(self, message: dict[str, Any], replica: str, why: str) -> dict[str, Any]:
        logger.warning("a round held by replica %r reached replica %r, and %s", replica, self.replica, why)
        return error_response(
            message.get("id"),
            INVALID_PARAMS,
            f"requestState belongs to a call held by gateway replica '{replica}', and {why}: {PIN_ADVICE}; "
            "or call the tool again without it",
        )

    def _client(self) -> httpx2.AsyncClient:
        if self._http is None:
            timeout = httpx2.Timeout(ROUND_SECONDS, connect=CONNECT_SECONDS)
            self._http = httpx2.AsyncClient(timeout=timeout, follow_redirects=False)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
