"""Protocol names, codes and shapes the gateway uses on both sides that the SDK does not define."""

import logging
from dataclasses import dataclass
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import RequestParams

from toolkeeper.jsonwire import MAX_NESTING

logger = logging.getLogger(__name__)

# The experimental extension that grew out of the seed SEP (PROTOCOL.md, "Argument-specific annotations").
RESOLUTION_EXTENSION = "io.modelcontextprotocol/tool-resolution"
RESOLVE_METHOD = "tools/resolve"  # the extension's form
ANNOTATIONS_METHOD = "tools/annotations"  # the seed SEP's form


class ResolveParams(RequestParams):
    """`tools/annotations` and `tools/resolve` params; `arguments` is checked by whoever resolves."""

    name: str
    arguments: Any = None


PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MISSING_CAPABILITY = -32021


def error_response(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


# How much of an unexpected exception's own text its one-line answer carries.
_REASON_MAX = 200


def internal_error(exc: Exception, doing: str) -> MCPError:
    """An unexpected failure while `doing` something (a bug, or a fault nothing translated), as
    the error the client gets: −32603 with a one-line reason. The log gets the traceback. Left
    to the SDK, such a failure would reach the client as error code 0."""
    logger.error("%s failed inside the gateway", doing, exc_info=exc)
    lines = str(exc).strip().splitlines()
    reason = type(exc).__name__ + (f": {lines[0]}" if lines else "")
    if len(reason) > _REASON_MAX:
        reason = reason[: _REASON_MAX - 1] + "…"
    return MCPError(
        code=INTERNAL_ERROR,
        message=f"toolkeeper: {doing} failed inside the gateway ({reason}); its log has the details",
    )


@dataclass(frozen=True)
class Refusal:
    """A client message the transport does not pass on as it came.

    `answer`: the error response the client gets; None for a notification or a response, which
    JSON-RPC never answers. `instead`: what the session gets in its place, if anything (a
    client's answer that cannot be forwarded becomes an error answer, so whoever asked is not
    left waiting). `reason`: for the log."""

    reason: str
    answer: dict[str, Any] | None = None
    instead: dict[str, Any] | None = None


def error_result(text: str) -> dict[str, Any]:
    """A tool error result: the text tells the model (or person) what went wrong and what to do."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def valid_id(value: Any) -> bool:
    """MCP request ids are strings or integers (never null, fractions, objects or booleans)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def unreadable(problem: str) -> Refusal:
    return Refusal(
        reason=f"not JSON: {problem}",
        answer=error_response(
            None, PARSE_ERROR, f"Parse error: the message is not JSON ({problem}); send one JSON-RPC object"
        ),
    )


def refusal(message: Any, surrogate_at: str | None = None, *, nested: int | None = None) -> Refusal | None:
    """Why a parsed client message must not reach the SDK's session as it is, or None if it may.

    The SDK's session drops a message that is not a well-formed JSON-RPC request, notification
    or response without a word, and one whose text has no UTF-8 form breaks whatever connection
    it is forwarded on; so both are answered here. `surrogate_at`: where its text holds a lone
    surrogate, if anywhere. `nested`: how deep a message nested past the limit goes (`message`
    is then its top level only), which is refused like text with no UTF-8 form. Only dict
    lookups, no parsing: a good message costs next to nothing."""
    if isinstance(message, list):
        return Refusal(
            reason="a batch",
            answer=error_response(
                None,
                INVALID_REQUEST,
                "Invalid Request: batches are not part of MCP; send each message on its own",
            ),
        )
    if not isinstance(message, dict):
        return Refusal(
            reason="not an object",
            answer=error_response(
                None, INVALID_REQUEST, "Invalid Request: a JSON-RPC message is a JSON object"
            ),
        )
    has_id = "id" in message
    request_id = message.get("id")
    method = message.get("method")
    if "method" not in message and ("result" in message or "error" in message):
        # A response: never answered. One that cannot be forwarded becomes an error for its request.
        if not has_id or not valid_id(request_id) or message.get("jsonrpc") != "2.0":
            return Refusal(reason="a response without a valid id or jsonrpc version")
        if surrogate_at is not None:
            return Refusal(
                reason="a response holding text with no UTF-8 form",
                instead=error_response(
                    request_id,
                    INVALID_PARAMS,
                    "the client's answer holds text with no UTF-8 form (a lone UTF-16 surrogate)",
                ),
            )
        if nested is not None:
            return Refusal(
                reason=f"a response nested {nested} levels deep",
                instead=error_response(
                    request_id, INVALID_PARAMS, f"the client's answer is {_too_deep(nested)}"
                ),
            )
        return None
    if has_id and not valid_id(request_id):
        return Refusal(
            reason=f"a request id that is {type(request_id).__name__}",
            answer=error_response(
                None,
                INVALID_REQUEST,
                f"Invalid Request: the id must be a string or an integer, not {_json_kind(request_id)}",
            ),
        )
    reply_to = request_id if has_id else None
    if message.get("jsonrpc") != "2.0":
        problem = f'"jsonrpc" must be "2.0", not {_json_kind(message.get("jsonrpc"))}'
    elif not isinstance(method, str):
        problem = (
            "a request needs a method (a string)"
            if has_id
            else "neither a request, a notification nor a response"
        )
    else:
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return _refuse(
                has_id,
                reply_to,
                INVALID_PARAMS,
                f"Invalid params: params of {method} must be an object, not {_json_kind(params)}",
            )
        if surrogate_at is not None:
            return _refuse(
                has_id,
                reply_to,
                INVALID_PARAMS,
                f"Invalid params: {method} was not run: the text at {surrogate_at} holds a lone UTF-16 "
                "surrogate (a \\ud800-style escape with no pair), which has no UTF-8 form and cannot be "
                "encoded for any server; send valid Unicode",
            )
        if nested is not None:
            return _refuse(
                has_id,
                reply_to,
                INVALID_PARAMS,
                f"Invalid params: {method} was not run: the message is {_too_deep(nested)}; "
                "send data nested less deeply",
            )
        return None
    # Not even a notification: answered, with a null id if it has none (as JSON-RPC asks).
    return Refusal(
        reason=problem, answer=error_response(reply_to, INVALID_REQUEST, f"Invalid Request: {problem}")
    )


def _too_deep(depth: int) -> str:
    # The message itself is level 1, so a call's arguments are level 3.
    return (
        f"nested {depth} levels deep (arrays and objects inside each other, the message itself being "
        f"level 1), deeper than the {MAX_NESTING} levels toolkeeper accepts"
    )


def _refuse(has_id: bool, request_id: Any, code: int, message: str) -> Refusal:
    # A notification (no id) is never answered, whatever is wrong with it.
    return Refusal(reason=message, answer=error_response(request_id, code, message) if has_id else None)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number" if isinstance(value, int) else "a fraction"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def client_resolves(capabilities: object) -> bool:
    """Whether these client capabilities (an SDK `ClientCapabilities`) include the extension."""
    extensions = getattr(capabilities, "extensions", None)
    return bool(extensions and RESOLUTION_EXTENSION in extensions)


def advertise_resolution(result: dict[str, Any]) -> None:
    """Add `tools.dynamicAnnotations` and the extension to an `initialize` / `server/discover` result.

    The SDK's capability models have no room for the seed's flag, so the wire dict is edited.
    """
    capabilities = result.get("capabilities")
    if isinstance(capabilities, dict):
        capabilities["tools"] = {**(capabilities.get("tools") or {}), "dynamicAnnotations": True}
        capabilities["extensions"] = {**(capabilities.get("extensions") or {}), RESOLUTION_EXTENSION: {}}


def flag_resolvable(tool: dict[str, Any], marker: bool) -> None:
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
