"""What the configuration file describes: downstream tool sources and gateway settings.

The `mcpServers` part is the format Claude Desktop, Cursor and Claude Code use, so a person can
point toolkeeper at the file they already have. toolkeeper's own per-server keys (`prefix`,
`trust`, `timeout`) sit beside the standard ones; gateway settings live under `toolkeeper`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from toolkeeper.config.rates import Rate

Transport = Literal["stdio", "http", "sse"]
Trust = Literal["trusted", "untrusted"]
# Inferred hints: shown as suggestions only, or also emitted where the server left a hint absent.
InferHints = Literal["suggest", "apply"]
# How calls are confirmed where no per-tool or per-toolset mode is stored: always ask, ask once
# per session, never ask, or never run. None: the approval policy decides from the hints.
Confirm = Literal["always", "session", "never", "deny"]
CONFIRM_MODES: tuple[Confirm, ...] = ("always", "session", "never", "deny")
INFER_HINTS: tuple[InferHints, ...] = ("suggest", "apply")
# Who may use the HTTP endpoint: holders of a client key, of an OAuth access token, of either,
# or anyone. `auto`: anyone on loopback, a key or a token once it can be reached from elsewhere.
HttpAuthMode = Literal["auto", "keys", "oauth", "keys+oauth", "none"]
HTTP_AUTH_MODES: tuple[HttpAuthMode, ...] = ("auto", "keys", "oauth", "keys+oauth", "none")
OAUTH_MODES: frozenset[HttpAuthMode] = frozenset({"oauth", "keys+oauth"})
# How a client finds tools beyond those listed: "search" lists the read-only `find-tools`, which
# adds the tools it finds to the caller's working set; "off" lists only what is listed.
Discovery = Literal["search", "off"]
DISCOVERY_MODES: tuple[Discovery, ...] = ("search", "off")
# Whose account a remote server that asks for OAuth is used with: one for the whole gateway, or
# each principal's own (a client key, an OAuth subject, the local user), each signed in apart.
SignInMode = Literal["shared", "perPrincipal"]
SIGN_IN_MODES: tuple[SignInMode, ...] = ("shared", "perPrincipal")
# How the gateway gets a token: a person signs in in a browser, or (no person) the gateway's own
# client id and secret are exchanged for one.
Grant = Literal["authorization_code", "client_credentials"]
GRANTS: tuple[Grant, ...] = ("authorization_code", "client_credentials")

# A password in a URL (`scheme://user:password@`) and a value whose name says it is a credential
# (`?token=…`, `--api-key=…`, `PASSWORD=…`): masked wherever the configuration is shown.
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^/\s@]*@")
CREDENTIAL_NAME = re.compile(
    r"[\w.-]*(?:token|secret|passw(?:or)?d|pwd|key|auth|credential|session|sig(?:nature)?)[\w.-]*",
    re.IGNORECASE,
)
_NAMED_CREDENTIAL = re.compile(rf"(^|[\s?&;,]|-)({CREDENTIAL_NAME.pattern})=([^&\s#;,]+)", re.IGNORECASE)
MASK = "***"


def mask_credentials(text: str) -> str:
    """`text` with URL passwords and the values of credential-named parameters masked."""
    text = _URL_PASSWORD.sub(rf"\1:{MASK}@", text)
    return _NAMED_CREDENTIAL.sub(rf"\1\2={MASK}", text)


class Redactor:
    """Replaces secret values in any text, each by what to show instead, in one pass: a longer
    value wins over one it contains, and a replacement is never searched again."""

    __slots__ = ("_pattern", "_shown")

    def __init__(self, hidden: Iterable[tuple[str, str]]) -> None:
        self._shown: dict[str, str] = {}
        for secret, shown in hidden:
            self._shown.setdefault(secret, shown)
        longest_first = sorted(self._shown, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, longest_first))) if longest_first else None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(self._replacement, text)

    def _replacement(self, match: re.Match[str]) -> str:
        return self._shown[match.group(0)]


def is_loopback_host(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 without brackets) is this machine: where plain
    http is as private as https."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


DEFAULT_CALL_TIMEOUT = 60.0
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8765
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
# The longest line a client may send over stdio: as large as an HTTP request body, so a message
# that passes one transport passes the other.
DEFAULT_MAX_MESSAGE_BYTES = DEFAULT_MAX_REQUEST_BYTES
MAX_MESSAGE_BYTES_ENV = "TOOLKEEPER_STDIO_MAX_MESSAGE_BYTES"
# A call waiting for a person is refused before common clients give up on it themselves: the
# TypeScript SDK's requests time out after 60 s (DEFAULT_REQUEST_TIMEOUT_MSEC), which is what the
# MCP Inspector's CLI and clients built on that SDK wait; a client that gave up first hears only
# its own timeout, never why. A yes that comes later is not lost: it holds for the same call
# retried within `retryWindow` (the Python SDK and Claude Code wait far longer, and are told so).
DEFAULT_APPROVAL_TIMEOUT = 55.0
DEFAULT_DATABASE_TIMEOUT = 10.0
DEFAULT_RETRY_WINDOW = 600.0
DEFAULT_AUDIT_RETENTION_DAYS = 30
# Audit records kept in memory while the store refuses them; past this the oldest are dropped (and a
# gap record counts them).
DEFAULT_AUDIT_MAX_WAITING = 10_000
# What this gateway process calls itself where replicas share a store (the audit's records, the
# approvals it ran): the machine's name, unique per container; replicas on one machine set their own.
DEFAULT_REPLICA = socket.gethostname() or "toolkeeper"
DEFAULT_MAX_SERVER_INSTRUCTIONS = 4000
# A description longer than this is sent in every tools/list and sits in the model's context; a
# few screens of text is plenty (lint warns past it).
DEFAULT_MAX_DESCRIPTION_BYTES = 16 * 1024
# The estimated tokens of one tool's definition past which lint warns: a client is sent it in every
# tools/list, and a typical server's whole list costs about twice this.
DEFAULT_MAX_TOOL_TOKENS = 1500
# A caller's working set (the tools `find-tools` added to its list): at most this many tools, and
# at most this many estimated tokens of definitions; past either, the least recently used go.
DEFAULT_WORKING_SET_MAX_TOOLS = 20
# Per handshake-era server, connections of one client each in use at once besides the server's own
# (see downstreams/client_connections.py), and how long one stays open with no call on it.
DEFAULT_MAX_CLIENT_CONNECTIONS = 8
DEFAULT_CLIENT_CONNECTION_IDLE_SECONDS = 60.0
DEFAULT_WORKING_SET_MAX_TOKENS = 20_000


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """One configured tool source, of whatever kind: what the gateway itself needs of it, after
    `${VAR}` expansion and validation. Each kind of source adds what it needs to connect."""

    name: str
    # How the source is reached, as inspection shows it (an MCP server's stdio, http or sse).
    transport: str
    prefix: str = ""
    trust: Trust = "untrusted"
    timeout: float = DEFAULT_CALL_TIMEOUT
    # None: the gateway-wide setting applies.
    infer_hints: InferHints | None = None
    sanitize_untrusted_hints: bool | None = None
    confirm: Confirm | None = None
    # Where the source is, as the file wrote it (`${VAR}` unexpanded, literal credentials
    # masked): what `toolkeeper servers` shows.
    written: str = field(default="", compare=False)
    # Text that must never be shown, each with what to show instead: values read from the
    # environment (shown as their `${VAR}`), and other values the kind keeps secret.
    hidden: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def describe(self) -> str:
        """A one-line, secret-free description for logs and `toolkeeper servers`."""
        return f"{self.transport} {self.written}"

    def redact(self, text: str) -> str:
        """`text` (a log line, an error) without this source's secrets."""
        return mask_credentials(self._redactor(text))

    @cached_property
    def _redactor(self) -> Redactor:
        return Redactor(self.hidden)


@dataclass(frozen=True, kw_only=True)
class ServerConfig(SourceConfig):
    """One downstream MCP server: the command that starts it (stdio) or its URL (http, sse).
    `written` is its command line or URL; `hidden` also holds its `env` and header values."""

    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # "auto" (newest era the server speaks), "legacy" (handshake era), or a modern version.
    protocol: str = "auto"
    # How the gateway signs in when the server asks for OAuth; None: it never does (stdio, a
    # static `Authorization` header, or `"oauth": false`).
    sign_in: SignInSettings | None = None

    def describe(self) -> str:
        if self.transport == "stdio":
            return self.written or self.redact(" ".join([self.command or "", *self.args]).strip())
        return f"{self.transport} {self.written or self.redact(self.url or '')}"


@dataclass(frozen=True, kw_only=True)
class SignInSettings:
    """How the gateway signs in to a remote server that answers 401 with an OAuth challenge, as a
    client of that server's authorization server. Every field is optional: discovery, the
    registration order (a client ID metadata document, the pre-registered `client_id`, dynamic
    registration) and the scope the server asks for cover the rest."""

    mode: SignInMode = "shared"
    grant: Grant = "authorization_code"
    client_id: str | None = None
    client_secret: str | None = None  # among the entry's hidden values
    # Space-separated; None: the scope in the server's challenge or its metadata.
    scope: str | None = None
    # A client ID metadata document of the person's own (https); None: the gateway's, where it is
    # reachable over https.
    client_metadata_url: str | None = None

    @property
    def machine(self) -> bool:
        """Whether the gateway signs itself in with its client's credentials, no person."""
        return self.grant == "client_credentials"


@dataclass(frozen=True, kw_only=True)
class OAuthSettings:
    """The authorization server whose access tokens the HTTP endpoint accepts, and what a token
    must hold. `audience` is the gateway's own resource URL: a token is for this gateway only if
    the issuer wrote it into `aud`."""

    issuer: str
    audience: str
    # None: found in the issuer's metadata.
    jwks_uri: str | None = None
    # Scopes every token must grant; a token without one of them is refused as insufficient.
    required_scopes: tuple[str, ...] = ()
    # The scope that makes a token's holder an admin; None: no token does.
    admin_scope: str | None = None


@dataclass(frozen=True)
class GatewaySettings:
    """The `toolkeeper` section: how the gateway itself runs."""

    home: Path | None = None
    database_url: str | None = None
    # Seconds a database gets to accept a connection and to answer each statement (PostgreSQL).
    database_timeout: float = DEFAULT_DATABASE_TIMEOUT
    http_host: str = DEFAULT_HTTP_HOST
    http_port: int = DEFAULT_HTTP_PORT
    # Host and Origin headers the HTTP endpoint accepts besides the local ones (DNS rebinding).
    http_allowed_hosts: tuple[str, ...] = ()
    http_allowed_origins: tuple[str, ...] = ()
    # Reverse proxies (addresses and networks, normalised as CIDRs) whose X-Forwarded-For and
    # X-Forwarded-Proto are believed; no other peer's are, loopback included.
    http_trusted_proxies: tuple[str, ...] = ()
    # Where clients reach the gateway from outside (a reverse proxy's https address), without a
    # trailing slash: its sign-in callback and its client ID metadata document are published there.
    http_public_url: str | None = None
    # Where the other replicas of a store reach this one's /mcp (a round it holds is handed to it
    # there); None: its own address and port (edge/handover.py).
    http_replica_url: str | None = None
    http_max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    http_auth_mode: HttpAuthMode = "auto"
    http_auth_oauth: OAuthSettings | None = None
    stdio_max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    log_level: str = "INFO"
    # How many downstream servers are started at once; the rest wait their turn.
    max_concurrent_connects: int = 8
    # Per handshake-era server: how many clients may each have a connection of their own at once,
    # and how long such a connection stays open with no call on it.
    max_client_connections: int = DEFAULT_MAX_CLIENT_CONNECTIONS
    client_connection_idle_seconds: float = DEFAULT_CLIENT_CONNECTION_IDLE_SECONDS
    feature_flags: dict[str, bool] = field(default_factory=dict)
    # Seed 001's `enableConfigToolsMenu`: configuration tools apart, behind a mode switch.
    config_tools_menu: bool = True
    # Tool search where no toolset is equipped (an equipped toolset says for itself).
    discovery: Discovery = "off"
    working_set_max_tools: int = DEFAULT_WORKING_SET_MAX_TOOLS
    working_set_max_tokens: int = DEFAULT_WORKING_SET_MAX_TOKENS
    infer_hints: InferHints = "suggest"
    # Emit conservative values instead of an untrusted server's claims of safety.
    sanitize_untrusted_hints: bool = False
    confirm: Confirm | None = None  # the gateway-wide default confirm mode (see Confirm)
    # The approval policy's preferences. Only reliably read-only calls are approved
    # automatically, so on is the safe default.
    auto_approve_read_only: bool = True
    confirm_destructive: bool = True
    # An idempotent call whose exact arguments were approved in the same session within
    # `retry_window` seconds is not asked again. It is also how long a yes given after its caller
    # stopped waiting can come, and then holds for that call's retry by the same client.
    trust_idempotent_retries: bool = True
    retry_window: float = DEFAULT_RETRY_WINDOW
    # How long a call waits for a person's answer before it is refused, in seconds (see the default's why).
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT
    # The audit log keeps a digest of every call's arguments; the arguments themselves only if on.
    audit_arguments: bool = False
    audit_retention_days: int = DEFAULT_AUDIT_RETENTION_DAYS
    audit_max_waiting: int = DEFAULT_AUDIT_MAX_WAITING
    # The secret the audit chain's MACs are keyed with, for gateways that share a store from
    # several machines; None: the key file in the home (made on first use). Never shown.
    audit_key: str | None = field(default=None, repr=False)
    # This process's name among replicas of one store (see DEFAULT_REPLICA).
    replica: str = DEFAULT_REPLICA
    # Rate limits (toolkeeper.rateLimits; config/rates.py says how a rate is counted), none by
    # default: each principal's calls together, a named principal's instead (None: unlimited), and
    # each principal's calls of one tool ("server.tool").
    rate_limit_per_principal: Rate | None = None
    rate_limit_principals: dict[str, Rate | None] = field(default_factory=dict)
    rate_limit_tools: dict[str, Rate] = field(default_factory=dict)
    # How many characters of each server's instructions the gateway's instructions carry (0: none).
    max_server_instructions: int = DEFAULT_MAX_SERVER_INSTRUCTIONS
    # Bytes (UTF-8) of a tool's description past which `toolkeeper lint` warns.
    max_description_bytes: int = DEFAULT_MAX_DESCRIPTION_BYTES
    # Estimated tokens of a tool's whole definition past which `toolkeeper lint` warns.
    max_tool_tokens: int = DEFAULT_MAX_TOOL_TOKENS


@dataclass(frozen=True)
class Config:
    path: Path | None
    servers: tuple[SourceConfig, ...]
    settings: GatewaySettings
    # Entries that were present but could not be used, with the reason (already logged).
    skipped: dict[str, str] = field(default_factory=dict)
    disabled: tuple[str, ...] = ()

    @cached_property
    def redact(self) -> Redactor:
        """Every server's secrets out of any text: what the log filter applies to every line."""
        return Redactor(pair for server in self.servers for pair in server.hidden)
