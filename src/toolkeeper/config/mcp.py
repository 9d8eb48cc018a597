"""MCP server entries, the `mcpServers` format's own: a command to start (stdio) or a URL to
reach (streamable HTTP or SSE). An entry naming no `type` is one of these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkeeper.config.entries import ENV_REFERENCE, EntryError, EntryKind, ServerEntry, expand, hidden_values
from toolkeeper.config.model import CREDENTIAL_NAME, MASK, ServerConfig, Transport, mask_credentials

STDIO_KEYS = {"command", "args", "env", "cwd"}
REMOTE_KEYS = {"url", "headers"}
PROTOCOL_KEYS = {"protocol"}
TRANSPORT_ALIASES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamableHttp": "http",
    "sse": "sse",
}
# How to talk to a server: the newest era it speaks, or the handshake era even if it speaks both
# (a server may do less in one era, e.g. ask for sampling only over the handshake-era wire), or
# one modern protocol version (see `protocols()`).
PROTOCOL_MODES = ("auto", "legacy")


def protocols() -> tuple[str, ...]:
    """Every value the `protocol` key accepts."""
    # Imported here: loading mcp_types loads the whole protocol schema, which the configuration
    # needs only for a server that names a protocol version.
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return (*PROTOCOL_MODES, *MODERN_PROTOCOL_VERSIONS)


def parse_mcp_entry(entry: ServerEntry) -> ServerConfig:
    transport = _transport(entry)
    entry.warn_unused(PROTOCOL_KEYS | (STDIO_KEYS if transport == "stdio" else REMOTE_KEYS), transport)
    common = entry.common()
    protocol = entry.raw.get("protocol", "auto")
    if protocol not in PROTOCOL_MODES and protocol not in protocols():
        raise EntryError(
            f"'protocol' must be one of {', '.join(repr(p) for p in protocols())}, got {protocol!r} "
            "('auto' uses the newest era the server speaks)"
        )
    # Values from the environment, `env` and headers: kept out of everything shown about the server.
    hidden: list[tuple[str, str]] = []
    if transport == "stdio":
        command = entry.string("command", hidden)
        if not command:
            raise EntryError("a stdio server needs a non-empty 'command'")
        args = entry.raw.get("args", [])
        if not isinstance(args, list) or not all(
            isinstance(a, str | int | float) and not isinstance(a, bool) for a in args
        ):
            raise EntryError("'args' must be a list of strings")
        expanded_args = tuple(expand(str(a), entry.env, f"args[{i}]", hidden) for i, a in enumerate(args))
        if starts_toolkeeper(command, expanded_args):
            # A client config reused as toolkeeper's own usually lists toolkeeper itself.
            raise EntryError("this entry starts toolkeeper itself; a gateway in front of itself recurses")
        return ServerConfig(
            name=entry.name,
            transport="stdio",
            command=command,
            args=expanded_args,
            env=entry.string_map("env", hidden),
            cwd=entry.string("cwd", hidden),
            protocol=protocol,
            written=_written_command(entry.raw["command"], args),
            hidden=hidden_values(hidden),
            **common,
        )
    url = entry.string("url", hidden)
    if not url or not url.startswith(("http://", "https://")):
        raise EntryError(f"a {transport} server needs a 'url' starting with http:// or https://")
    return ServerConfig(
        name=entry.name,
        transport=transport,
        url=url,
        headers=entry.string_map("headers", hidden),
        protocol=protocol,
        written=mask_credentials(entry.raw["url"]),
        hidden=hidden_values(hidden),
        **common,
    )


def _transport(entry: ServerEntry) -> Transport:
    """The transport the entry names, or the one its `command` or `url` implies."""
    if entry.type is not None:
        return TRANSPORT_ALIASES[entry.type]
    if "command" in entry.raw:
        return "stdio"
    if "url" in entry.raw:
        return "http"
    raise EntryError("neither 'command' (stdio) nor 'url' (http/sse) is given")


def _written_command(command: str, args: list[Any]) -> str:
    """The command line as written, with literal credentials masked: in URLs and `name=value`
    arguments, and the argument after a flag named like a credential (`--token abc`)."""
    words = [command]
    for i, arg in enumerate(str(a) for a in args):
        flag = str(args[i - 1]) if i else ""
        if flag.startswith("-") and CREDENTIAL_NAME.fullmatch(flag.lstrip("-")) and "=" not in flag:
            arg = arg if ENV_REFERENCE.fullmatch(arg) else MASK
        words.append(arg)
    return mask_credentials(" ".join(words).strip())


def starts_toolkeeper(command: str, args: tuple[str, ...]) -> bool:
    words = [Path(command).name, *args]
    if words[0] == "toolkeeper":
        return "serve" in words[1:2]
    return any(words[i : i + 3] == ["-m", "toolkeeper", "serve"] for i in range(len(words) - 2))


MCP_ENTRIES = EntryKind(
    types=frozenset(TRANSPORT_ALIASES),
    shown_types=("stdio", "http", "sse"),
    usage="'stdio' (with 'command') or 'http' / 'sse' (with 'url')",
    entry_shape="an object with 'command' (stdio) or 'url' (http/sse)",
    parse=parse_mcp_entry,
)
