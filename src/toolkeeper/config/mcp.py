"""MCP server entries, the `mcpServers` format's own: a command to start (stdio) or a URL to
reach (streamable HTTP or SSE). An entry naming no `type` is one of these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkeeper.config.entries import ENV_REFERENCE, EntryError, EntryKind, ServerEntry, expand, hidden_values
from toolkeeper.config.model import (
    CREDENTIAL_NAME,
    GRANTS,
    MASK,
    SIGN_IN_MODES,
    ServerConfig,
    SignInSettings,
    Transport,
    mask_credentials,
)

STDIO_KEYS = {"command", "args", "env", "cwd"}
REMOTE_KEYS = {"url", "headers", "oauth", "signIn"}
# The keys of a remote entry's `oauth` object, as written.
OAUTH_KEYS = ("clientId", "clientSecret", "scope", "clientMetadataUrl", "grant")
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
    headers = entry.string_map("headers", hidden)
    return ServerConfig(
        name=entry.name,
        transport=transport,
        url=url,
        headers=headers,
        protocol=protocol,
        sign_in=_sign_in(entry, headers, hidden),
        written=mask_credentials(entry.raw["url"]),
        hidden=hidden_values(hidden),
        **common,
    )


def _sign_in(
    entry: ServerEntry, headers: dict[str, str], hidden: list[tuple[str, str]]
) -> SignInSettings | None:
    """How the gateway signs in to the server when it asks: on for every remote server (so an
    imported entry of a server that needs a sign-in works once a person signs in), unless the
    entry says `"oauth": false` or carries its own `Authorization` header."""
    written = entry.raw.get("oauth", {})
    mode = entry.raw.get("signIn", "shared")
    if mode not in SIGN_IN_MODES:
        raise EntryError(f"'signIn' must be one of {', '.join(repr(m) for m in SIGN_IN_MODES)}, got {mode!r}")
    if written is False:
        if "signIn" in entry.raw:
            raise EntryError("'signIn' needs OAuth, which '\"oauth\": false' turns off")
        return None
    if not isinstance(written, dict):
        raise EntryError(
            "'oauth' must be an object (clientId, clientSecret, scope, clientMetadataUrl, grant) or false"
        )
    unknown = sorted(set(written) - set(OAUTH_KEYS))
    if unknown:
        raise EntryError(
            f"'oauth' has unknown keys {', '.join(map(repr, unknown))}; known: {', '.join(OAUTH_KEYS)}"
        )
    if any(name.lower() == "authorization" for name in headers):
        if "oauth" in entry.raw or "signIn" in entry.raw:
            raise EntryError(
                "an entry with its own 'Authorization' header does not sign in: remove one or the other"
            )
        return None
    values: dict[str, str | None] = {}
    for key in ("clientId", "clientSecret", "scope", "clientMetadataUrl"):
        value = written.get(key)
        if value is not None and not isinstance(value, str):
            raise EntryError(f"'oauth.{key}' must be a string")
        values[key] = expand(value, entry.env, f"oauth.{key}", hidden) if value is not None else None
    grant = written.get("grant", "authorization_code")
    if grant not in GRANTS:
        raise EntryError(f"'oauth.grant' must be one of {', '.join(repr(g) for g in GRANTS)}, got {grant!r}")
    if grant == "client_credentials":
        if not values["clientId"] or not values["clientSecret"]:
            raise EntryError("'oauth.grant' client_credentials needs 'clientId' and 'clientSecret'")
        if mode == "perPrincipal":
            raise EntryError("client_credentials signs the gateway in, not a person: use 'signIn': 'shared'")
    metadata_url = values["clientMetadataUrl"]
    if metadata_url is not None and not metadata_url.startswith("https://"):
        raise EntryError("'oauth.clientMetadataUrl' must be an https:// URL with a path")
    if values["clientSecret"]:
        hidden.append((values["clientSecret"], MASK))
    return SignInSettings(
        mode=mode,
        grant=grant,
        client_id=values["clientId"],
        client_secret=values["clientSecret"],
        scope=values["scope"],
        client_metadata_url=metadata_url,
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
