"""Protocol names, codes and shapes the gateway uses on both sides that the SDK does not define."""

from typing import Any

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
