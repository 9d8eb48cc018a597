"""A client's remote entry in toolkeeper's form: `url` (Windsurf's `serverUrl`), `type` as
`http` or `sse`, and the client's OAuth hints as toolkeeper's `oauth` object (Claude Code's and
VS Code's `oauth`, Cursor's `auth`). An entry with its own `Authorization` header keeps signing
in with it, so its OAuth hints are not carried."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from toolkeeper.config.mcp import OAUTH_KEYS, TRANSPORT_ALIASES

REMOTE_TYPES = {alias for alias, transport in TRANSPORT_ALIASES.items() if transport != "stdio"}
# The client's OAuth hints that toolkeeper has no use for, with why.
UNCARRIED_HINTS = {
    "callbackPort": "toolkeeper's sign-in comes back to its own address (/oauth/callback); "
    "if the client ID was registered with a fixed redirect, register that address too",
    "authServerMetadataUrl": "toolkeeper finds the authorization server from the server's own metadata",
}
# Cursor's `auth` object, by the key toolkeeper writes.
CURSOR_AUTH = {"CLIENT_ID": "clientId", "CLIENT_SECRET": "clientSecret", "scopes": "scope"}


def is_remote(entry: Mapping[str, Any]) -> bool:
    written = entry.get("type")
    if "command" in entry or (written is not None and written not in REMOTE_TYPES):
        return False  # a stdio server, or a kind of source that is not an MCP server
    return "url" in entry or "serverUrl" in entry or written in REMOTE_TYPES


def remote_entry(name: str, entry: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """`entry` with its URL, type and sign-in in toolkeeper's keys; other keys as they were."""
    url = entry.get("url", entry.get("serverUrl"))
    converted: dict[str, Any] = {}
    transport = remote_type(entry.get("type"), url)
    if transport is not None:
        converted["type"] = transport
    if url is not None:
        converted["url"] = url
    converted.update(
        {k: v for k, v in entry.items() if k not in ("type", "url", "serverUrl", "oauth", "auth")}
    )
    oauth = sign_in_hints(name, entry, notes)
    if oauth is not None:
        converted["oauth"] = oauth
    return converted


def remote_type(written: Any, url: Any) -> str | None:
    """`http` or `sse` for every spelling a client uses; with none written, `sse` for a URL whose
    path ends in /sse (clients that guess the transport take such a server for SSE), else none."""
    if isinstance(written, str) and written in REMOTE_TYPES:
        return TRANSPORT_ALIASES[written]
    if isinstance(url, str) and urlsplit(url).path.rstrip("/").endswith("/sse"):
        return "sse"
    return None


def sign_in_hints(name: str, entry: Mapping[str, Any], notes: list[str]) -> dict[str, Any] | bool | None:
    """toolkeeper's `oauth` object from the client's hints; None where there are none to carry."""
    written = entry.get("oauth")
    if written is False:
        return False
    hints = {**_hints_of(name, written, notes), **_cursor_hints(name, entry.get("auth"), notes)}
    if not hints:
        return None
    if has_authorization_header(entry):
        notes.append(
            f"{name}: signs in with its own Authorization header, as before; its OAuth settings "
            f"({', '.join(sorted(hints))}) are not kept."
        )
        return None
    return hints


def has_authorization_header(entry: Mapping[str, Any]) -> bool:
    headers = entry.get("headers")
    return isinstance(headers, dict) and any(str(key).lower() == "authorization" for key in headers)


def _hints_of(name: str, written: Any, notes: list[str]) -> dict[str, Any]:
    """Claude Code's and VS Code's `oauth` object (or toolkeeper's own) in toolkeeper's keys."""
    if not isinstance(written, dict):
        return {}
    hints: dict[str, Any] = {}
    for key, value in written.items():
        if key == "scopes":
            key, value = "scope", _scope(value)
        if key in UNCARRIED_HINTS:
            notes.append(f"{name}: oauth.{key} is not kept: {UNCARRIED_HINTS[key]}.")
        elif key not in OAUTH_KEYS:
            notes.append(f"{name}: oauth.{key} is not kept (toolkeeper does not read it).")
        elif value not in ("", None, []):
            hints[key] = _scope(value) if key == "scope" else value
    return hints


def _cursor_hints(name: str, written: Any, notes: list[str]) -> dict[str, Any]:
    """Cursor's `auth` object (CLIENT_ID, CLIENT_SECRET, scopes) in toolkeeper's keys."""
    if not isinstance(written, dict):
        return {}
    hints: dict[str, Any] = {}
    for key, value in written.items():
        ours = CURSOR_AUTH.get(key)
        if ours is None:
            notes.append(f"{name}: auth.{key} is not kept (toolkeeper does not read it).")
        elif value not in ("", None, []):
            hints[ours] = _scope(value) if ours == "scope" else value
    return hints


def _scope(value: Any) -> Any:
    """A scope as OAuth writes it: one space-separated string (clients may write a list)."""
    return " ".join(str(item) for item in value) if isinstance(value, list) else value
