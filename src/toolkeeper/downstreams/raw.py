"""Raw lanes: a request sent as JSON and its answer handed back as parsed JSON, without the
SDK's request or result models. `StdioLink` (stdio.py) is the lane of a stdio child; `HttpLink`
(http.py) is the lane of a server over streamable HTTP, one POST per request (on the session the
SDK's transport opened, for a handshake-era server).

Both carry the same `_meta` stamp the SDK session puts on its own requests (learned from the
session's first enveloped request), so the server sees one consistent client. This module is
light on purpose: stdio children are started before the gateway imports the SDK.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

STAMP_PREFIX = "io.modelcontextprotocol/"
PROTOCOL_VERSION_META = f"{STAMP_PREFIX}protocolVersion"


# What a raw lane does with a server's notification that arrives with an answer (a log message
# on the call's event stream): the connection hands it to the gateway, as the SDK would.
OnNotification = Callable[[dict[str, Any]], Awaitable[None]]
# What a raw lane does with a request the server sends on a call's own stream (a handshake-era
# server's sampling, elicitation or roots request over HTTP): the connection hands it to the
# gateway and returns the whole JSON-RPC response for the lane to send back.
OnServerRequest = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class LinkClosed(Exception):
    """The server's side of the lane is gone."""


class LaneDeclined(Exception):
    """The answer was not one the raw lane handles; the call goes the SDK's way instead."""


class RawLane(Protocol):
    stamp: dict[str, Any]
    # Log messages the server sends during a raw request go here, before the answer is handed
    # back (through the SDK they could arrive after the call ended, with no caller to reach).
    on_notification: OnNotification | None
    # Requests the server sends during a raw request, where they reach the lane rather than the
    # SDK's session.
    on_request: OnServerRequest | None

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The whole JSON-RPC response (result or error). Raises TimeoutError past `timeout`,
        LinkClosed when the server is gone, TypeError for params that cannot be encoded."""
        ...


def learn_stamp(message: Any) -> dict[str, Any] | None:
    """The reserved `_meta` keys of an outgoing SDK request, if it carries the modern envelope."""
    params = getattr(message, "params", None)
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and PROTOCOL_VERSION_META in meta:
        return {k: v for k, v in meta.items() if k.startswith(STAMP_PREFIX)}
    return None
