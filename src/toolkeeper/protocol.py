"""Protocol names, codes and shapes the gateway uses on both sides that the SDK does not define."""

from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import RequestParams

# The experimental extension that grew out of the seed SEP (PROTOCOL.md, "Argument-specific annotations").
RESOLUTION_EXTENSION = "io.modelcontextprotocol/tool-resolution"
RESOLVE_METHOD = "tools/resolve"  # the extension's form
ANNOTATIONS_METHOD = "tools/annotations"  # the seed SEP's form


class ResolveParams(RequestParams):
    """`tools/annotations` and `tools/resolve` params; `arguments` is checked by whoever resolves."""

    name: str
    arguments: Any = None


METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MISSING_CAPABILITY = -32021


def client_resolves(capabilities: object) -> bool:
    """Whether these client capabilities (an SDK `ClientCapabilities`) include the extension."""
    extensions = getattr(capabilities, "extensions", None)
    return bool(extensions and RESOLUTION_EXTENSION in extensions)


def advertise_resolution(result: dict) -> None:
    """Add `tools.dynamicAnnotations` and the extension to an `initialize` / `server/discover` result.

    The SDK's capability models have no room for the seed's flag, so the wire dict is edited.
    """
    capabilities = result.get("capabilities")
    if isinstance(capabilities, dict):
        capabilities["tools"] = {**(capabilities.get("tools") or {}), "dynamicAnnotations": True}
        capabilities["extensions"] = {**(capabilities.get("extensions") or {}), RESOLUTION_EXTENSION: {}}


def flag_resolvable(tool: dict, marker: bool) -> None:
    """Flag one wire tool: the seed's `dynamicAnnotations`, and the extension's `_meta` marker for a
    client that advertised the extension."""
    tool["dynamicAnnotations"] = True
    if marker:
        tool["_meta"] = {**(tool.get("_meta") or {}), RESOLUTION_EXTENSION: {"resolvable": True}}


# The client capability each request a server may send to the client side needs.
CAPABILITY_FOR_REQUEST = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"


def declares(capabilities: dict[str, Any], method: str) -> bool:
    """Whether client capabilities in wire form declare what the server request `method` needs."""
    return capabilities.get(CAPABILITY_FOR_REQUEST[method]) is not None


def undeclared_message(method: str) -> str:
    return (
        f"toolkeeper: the client that made this call does not support {method} "
        f"(it did not declare the {CAPABILITY_FOR_REQUEST[method]} capability)"
    )


def check_input_requests(result: dict[str, Any], capabilities: dict[str, Any]) -> None:
    """Refuse an `InputRequiredResult` that asks a modern client for what it did not declare it
    can answer (−32021, naming the capability)."""
    for request in (result.get("inputRequests") or {}).values():
        method = request.get("method") if isinstance(request, dict) else None
        if method in CAPABILITY_FOR_REQUEST and not declares(capabilities, method):
            raise MCPError(
                code=MISSING_CAPABILITY,
                message=undeclared_message(method),
                data={"requiredCapabilities": {CAPABILITY_FOR_REQUEST[method]: {}}},
            )


def for_client_era(result: dict[str, Any], modern: bool, server_info: dict[str, Any]) -> dict[str, Any]:
    """A downstream's result with the fields of the calling client's era: a modern client gets
    `resultType` and the gateway's own `serverInfo` stamp (the server it talks to is the
    gateway); a handshake-era client gets neither, as from a direct connection in its era."""
    meta = result.get("_meta")
    if modern:
        if "resultType" not in result:
            result["resultType"] = "complete"
        if isinstance(meta, dict):
            result["_meta"] = {**meta, SERVER_INFO_META: server_info}
        elif meta is None:
            result["_meta"] = {SERVER_INFO_META: server_info}
        return result
    if result.get("resultType") == "complete":
        del result["resultType"]
    if isinstance(meta, dict) and SERVER_INFO_META in meta:
        rest = {k: v for k, v in meta.items() if k != SERVER_INFO_META}
        if rest:
            result["_meta"] = rest
        else:
            del result["_meta"]
    return result


# `_meta` keys the gateway's own client session owns on the downstream leg.
_RESERVED_META_PREFIX = "io.modelcontextprotocol/"
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"


def forwardable_meta(meta: Any) -> dict[str, Any]:
    """The part of a client's `_meta` that goes on downstream: the protocol's own keys and the
    progress token belong to each leg, and the gateway's session sets its own."""
    if not isinstance(meta, dict):
        return {}
    return {k: v for k, v in meta.items() if not k.startswith(_RESERVED_META_PREFIX) and k != "progressToken"}
