"""The stdio fast lane: a modern client's plain `tools/call`, answered without the SDK's server.

On the hot path the SDK's server costs more than everything else the gateway does: it builds
a context, a session and request models for every call and validates the result on the way
out. For a 2026-07-28 client over stdio, each request carries its whole envelope, so a plain
call can be recognised from its JSON alone and handed to the same pipeline the SDK's handler
uses. Only calls that cannot need the SDK are taken:
- the envelope is complete and names a modern version (anything else gets the SDK's answer,
  refusal included);
- no progress token, log-level opt-in, task or input-response retry (the relay needs the
  SDK's request context for those);
- the gateway has started, and nothing the downstream might send back during the call needs
  a way to reach this client (see `fast_lane_fits`).
Everything else goes to the SDK as before, in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolkeeper.edge.clients import CLIENT_INFO_META, Transport, identify
from toolkeeper.pipeline.audit import ARGUMENTS_UNREAD
from toolkeeper.pipeline.call import LOCAL_USER, ClientIdentity, Principal, ToolCall
from toolkeeper.pipeline.stages import fast_lane_fits
from toolkeeper.protocol import LOG_LEVEL_META, Refusal, for_client_era, internal_error

if TYPE_CHECKING:
    from toolkeeper.runtime.gateway import Gateway

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
# Params of a call that the fast lane leaves to the SDK's path.
_NEEDS_CONTEXT = frozenset(("task", "requestState", "inputResponses"))


def opens_modern(message: dict[str, Any]) -> bool:
    """Whether a connection's first request opens the 2026-07-28 era (the SDK decides alike)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return message.get("method") != "initialize" and isinstance(meta, dict) and PROTOCOL_VERSION_META in meta


class FastLane:
    def __init__(
        self, gateway: Gateway, server_info: dict[str, Any], *, transport: Transport = "stdio"
    ) -> None:
        self.gateway = gateway
        self.server_info = server_info
        # Over HTTP each client is known by its own name, not by the process.
        self.transport: Transport = transport
        # The last client identified: its declared info, its principal and its identity. A
        # client sends the same info with every call, so the identity is made once, not per call.
        self._last_client: tuple[object, Principal, ClientIdentity] | None = None

    def accept(self, message: dict[str, Any], principal: Principal = LOCAL_USER) -> ToolCall | None:
        """The call this message makes, if the fast lane can answer it; else None. `principal`
        is who the edge authenticated (over stdio, the local user)."""
        params = message.get("params")
        request_id = message.get("id")
        if (
            message.get("method") != "tools/call"
            or message.get("jsonrpc") != "2.0"
            or not isinstance(request_id, str | int)
            or isinstance(request_id, bool)
            or not isinstance(params, dict)
            or not isinstance(params.get("name"), str)
            or not isinstance(params.get("arguments", {}), dict)
            or not params.keys().isdisjoint(_NEEDS_CONTEXT)
            or not self.gateway.started.is_set()
        ):
            return None
        meta = params.get("_meta")
        if (
            not isinstance(meta, dict)
            or meta.get(PROTOCOL_VERSION_META) not in MODERN_PROTOCOL_VERSIONS
            or not isinstance(meta.get(CLIENT_CAPABILITIES_META), dict)
            or "progressToken" in meta
            or LOG_LEVEL_META in meta
        ):
            return None
        call = ToolCall(
            params["name"],
            params,
            True,
            capabilities=meta[CLIENT_CAPABILITIES_META],
            client=self._identify(meta.get(CLIENT_INFO_META), principal),
        )
        return call if fast_lane_fits(call, self.gateway) else None

    def _identify(self, client_info: object, principal: Principal) -> ClientIdentity:
        """`identify` for this lane's transport, reusing the last identity for the same declared
        info (equal JSON values name the same client) and the same principal."""
        last = self._last_client
        if last is not None and last[1] is principal and last[0] == client_info:
            return last[2]
        client = identify(transport=self.transport, client_info=client_info, principal=principal)
        # A copy of a mutable info: what was compared stays what was identified.
        kept = dict(client_info) if isinstance(client_info, dict) else client_info
        self._last_client = (kept, principal, client)
        return client

    def record_refused(
        self,
        envelope: Any,
        refused: Refusal,
        depth: int,
        *,
        principal: Principal = LOCAL_USER,
        session_id: str | None = None,
    ) -> None:
        """Record a `tools/call` whose message nested `depth` levels deep, past what the edge
        reads, and was refused unread (`envelope`: its top two levels). Whichever lane would
        have taken it, every call is in the audit log, with the error its client got."""
        params = envelope.get("params") if isinstance(envelope, dict) else None
        if (
            not isinstance(envelope, dict)
            or envelope.get("method") != "tools/call"
            or not isinstance(params, dict)
            or refused.answer is None
        ):
            return
        name = params.get("name")
        meta = params.get("_meta")  # emptied, as everything below the top two levels is
        call = ToolCall(
            name if isinstance(name, str) else "",
            params,
            isinstance(meta, dict) and PROTOCOL_VERSION_META in meta,
            client=identify(
                transport=self.transport, client_info=None, session_id=session_id, principal=principal
            ),
        )
        error = refused.answer["error"]
        call.error = MCPError(code=error["code"], message=error["message"])
        call.extra[ARGUMENTS_UNREAD] = f"the message nests {depth} levels deep"
        self.gateway.record_refused(call)

    async def answer(self, request_id: str | int, call: ToolCall) -> dict[str, Any]:
        """The JSON-RPC response to the call: its result, or the error it ended with."""
        try:
            result = await self.gateway.pipeline.run(call)
        except MCPError as exc:
            return {"jsonrpc": "2.0", "id": request_id, "error": exc.error.model_dump(exclude_none=True)}
        except Exception as exc:
            failed = internal_error(exc, f"tools/call of {call.name!r}")
            return {"jsonrpc": "2.0", "id": request_id, "error": failed.error.model_dump(exclude_none=True)}
        return {"jsonrpc": "2.0", "id": request_id, "result": for_client_era(result, True, self.server_info)}
