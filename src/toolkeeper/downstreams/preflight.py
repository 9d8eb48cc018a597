"""The seed SEP's client flow, for any MCP server: before calling a tool, ask for the hints that
hold for these arguments; fall back to the static hints on an error; surface the error when
there are none. `toolkeeper resolve` is its CLI face."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError

from toolkeeper.protocol import ANNOTATIONS_METHOD, RESOLUTION_EXTENSION, RESOLVE_METHOD
from toolkeeper.sdk_private import send_unvalidated

TIMEOUT = 10.0


class PreflightError(Exception):
    """No hints at all: the tool is unknown, or resolution failed and it has no static hints."""


@dataclass(frozen=True)
class Preflight:
    tool: str
    annotations: dict[str, Any]
    source: str  # "tools/resolve", "tools/annotations" or "static"
    error: str | None = None  # why the static hints are used, when a query failed
    static: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = {
            "tool": self.tool,
            "annotations": self.annotations,
            "source": self.source,
            "static": self.static,
        }
        if self.error:
            out["error"] = self.error
        return out


async def list_tools(client: Client) -> dict[str, dict[str, Any]]:
    """Every tool as raw JSON (the SDK's models would drop `dynamicAnnotations`)."""
    tools: dict[str, dict[str, Any]] = {}
    cursor = None
    for _ in range(100):
        page = await send_unvalidated(client, "tools/list", {"cursor": cursor} if cursor else {}, TIMEOUT)
        for tool in page.get("tools") or ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                tools.setdefault(tool["name"], tool)
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return tools


async def preflight(client: Client, name: str, arguments: dict[str, Any]) -> Preflight:
    tools = await list_tools(client)
    tool = tools.get(name)
    if tool is None:
        raise PreflightError(
            f"the server lists no tool {name!r} (it has: {', '.join(sorted(tools)) or 'none'})"
        )
    static = _object(tool.get("annotations"))
    meta = _object(tool.get("_meta"))
    marker = meta.get(RESOLUTION_EXTENSION)
    if isinstance(marker, dict) and marker.get("resolvable") is True:
        method = RESOLVE_METHOD
    elif tool.get("dynamicAnnotations") is True:
        method = ANNOTATIONS_METHOD
    else:
        return Preflight(name, static, "static", static=static)
    try:
        result = await send_unvalidated(client, method, {"name": name, "arguments": arguments}, TIMEOUT)
        annotations = result.get("annotations")
        if not isinstance(annotations, dict):
            raise PreflightError(f"{method} answered without annotations")
        return Preflight(name, annotations, method, static=static)
    except (MCPError, PreflightError, TimeoutError) as exc:
        reason = f"{method} failed: {exc}"
        if not static:
            raise PreflightError(f"{reason}, and {name} has no static annotations to fall back on") from None
        return Preflight(name, static, "static", error=reason, static=static)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
