"""`mcp-remote` bridges: a stdio entry that runs `npx mcp-remote URL …` only to reach a remote
server (and sign in to it) from a client that starts stdio servers alone, as Claude Desktop's
file does. toolkeeper reaches and signs in to remote servers itself, so such an entry becomes the
remote entry it stands for: its URL, transport, headers and static OAuth client."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkeeper.config.entries import ENV_REFERENCE
from toolkeeper.services.clients.remote import remote_type

PACKAGE = re.compile(r"^mcp-remote(@[\w.\-]+)?$")
TRANSPORTS = {"http-only": "http", "http-first": "http", "sse-only": "sse", "sse-first": "sse"}
# mcp-remote's flags that take a value, and those that take none.
VALUED = {
    "--header", "--transport", "--static-oauth-client-info", "--static-oauth-client-metadata",
    "--host", "--resource", "--ignore-tool", "--auth-timeout",
}  # fmt: skip
SWITCHES = {"--allow-http", "--debug", "--silent", "--enable-proxy"}


def bridged_url(entry: Mapping[str, Any]) -> list[str] | None:
    """mcp-remote's own arguments (from the URL on) when `entry` runs it, else None."""
    command, args = entry.get("command"), entry.get("args")
    if not isinstance(command, str) or not isinstance(args, list):
        return None
    words = [Path(command).name, *(str(arg) for arg in args)]
    for i, word in enumerate(words):
        if PACKAGE.match(word):
            rest = words[i + 1 :]
            return rest if rest and rest[0].startswith(("http://", "https://")) else None
    return None


def unbridged(name: str, entry: Mapping[str, Any], notes: list[str]) -> dict[str, Any] | None:
    """The remote entry an mcp-remote bridge stands for (in the client's keys, which the remote
    conversion then reads), or None if `entry` is no such bridge."""
    words = bridged_url(entry)
    if words is None:
        return None
    written_env = entry.get("env")
    env: Mapping[str, Any] = written_env if isinstance(written_env, dict) else {}
    url, flags = words[0], _flags(name, words[1:], notes)
    remote: dict[str, Any] = {
        "type": TRANSPORTS.get(flags.pop("--transport", [""])[-1]) or remote_type(None, url) or "http",
        "url": url,
    }
    written_headers = flags.pop("--header", [])
    headers = dict(_header(value, env) for value in written_headers)
    unused = [key for key in env if not any(f"${{{key}" in header for header in written_headers)]
    if unused:
        notes.append(f"{name}: env {', '.join(unused)} not kept: they were for mcp-remote, which is gone.")
    if headers:
        remote["headers"] = headers
    oauth = _static_client(name, flags, notes)
    if oauth:
        remote["oauth"] = oauth
    for key in ("disabled", "timeout", "description", "trust", "confirm", "prefix"):
        if key in entry:
            remote[key] = entry[key]
    for flag in flags:
        notes.append(f"{name}: mcp-remote's {flag} is not kept; toolkeeper reaches {url} itself.")
    notes.append(f"{name}: was reached through mcp-remote; toolkeeper now reaches {url} itself.")
    return remote


def _flags(name: str, words: list[str], notes: list[str]) -> dict[str, list[str]]:
    """Each flag with its values; a bare number after the URL is mcp-remote's callback port."""
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.isdigit():
            notes.append(
                f"{name}: mcp-remote's callback port {word} is not kept: toolkeeper's sign-in comes "
                "back to its own address (/oauth/callback)."
            )
        elif word in VALUED and i + 1 < len(words):
            flags.setdefault(word, []).append(words[i + 1])
            i += 1
        elif word.startswith("-"):
            flags.setdefault(word, [])
        i += 1
    return flags


def _header(written: str, env: Mapping[str, Any]) -> tuple[str, str]:
    """`Name: value` as mcp-remote takes it, with the entry's own variables filled in (mcp-remote
    ran with them; toolkeeper's remote entry has no `env`)."""
    header, _, value = written.partition(":")

    def filled(match: re.Match[str]) -> str:
        found = env.get(match.group(1))
        return str(found) if found is not None else match.group(0)

    return header.strip(), ENV_REFERENCE.sub(filled, value.strip())


def _static_client(name: str, flags: dict[str, list[str]], notes: list[str]) -> dict[str, str]:
    """toolkeeper's `oauth` keys from mcp-remote's static client information and metadata."""
    info = _json_flag(name, flags.pop("--static-oauth-client-info", []), notes)
    metadata = _json_flag(name, flags.pop("--static-oauth-client-metadata", []), notes)
    found = {
        "clientId": info.get("client_id"),
        "clientSecret": info.get("client_secret"),
        "scope": metadata.get("scope"),
    }
    return {key: value for key, value in found.items() if isinstance(value, str) and value}


def _json_flag(name: str, values: list[str], notes: list[str]) -> dict[str, Any]:
    if not values:
        return {}
    try:
        parsed = json.loads(values[-1])
    except ValueError:
        notes.append(f"{name}: mcp-remote's OAuth client settings are not JSON here (a file?); not kept.")
        return {}
    return parsed if isinstance(parsed, dict) else {}
