"""Find, read and validate the configuration file.

A file-level problem (bad JSON, an unknown top-level key, a wrong type in the `toolkeeper`
section) stops the gateway with a `ConfigError` naming the file, the line or field and the fix.
A problem inside one server entry only skips that server, with a warning: the others serve.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

import platformdirs

from toolkeeper.config.entries import EntryError, EntryKind, ServerEntry, expand
from toolkeeper.config.mcp import MCP_ENTRIES
from toolkeeper.config.model import (
    CONFIRM_MODES,
    DEFAULT_APPROVAL_TIMEOUT,
    DEFAULT_AUDIT_MAX_WAITING,
    DEFAULT_AUDIT_RETENTION_DAYS,
    DEFAULT_CLIENT_CONNECTION_IDLE_SECONDS,
    DEFAULT_DATABASE_TIMEOUT,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_CLIENT_CONNECTIONS,
    DEFAULT_MAX_DESCRIPTION_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_SERVER_INSTRUCTIONS,
    DEFAULT_MAX_TOOL_TOKENS,
    DEFAULT_REPLICA,
    DEFAULT_RETRY_WINDOW,
    DEFAULT_WORKING_SET_MAX_TOKENS,
    DEFAULT_WORKING_SET_MAX_TOOLS,
    DISCOVERY_MODES,
    HTTP_AUTH_MODES,
    INFER_HINTS,
    MAX_MESSAGE_BYTES_ENV,
    OAUTH_MODES,
    Config,
    GatewaySettings,
    OAuthSettings,
    SourceConfig,
    is_loopback_host,
)
from toolkeeper.config.rates import RATE_FORMS, Rate, parse_rate
from toolkeeper.log import hide_in_logs

logger = logging.getLogger(__name__)

TOP_LEVEL_KEYS = {"mcpServers", "toolkeeper", "$schema"}
# No '.': it separates server and tool in namespaced names (`server.tool`), which must not collide.
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The kinds of server entry the loader knows unless told more: the `mcpServers` format's own. The
# gateway passes every kind it has registered (downstreams/kinds.py).
STANDARD_KINDS: tuple[EntryKind, ...] = (MCP_ENTRIES,)


class ConfigError(Exception):
    """The configuration cannot be used at all. The message says where and what to do."""


def user_config_path() -> Path:
    return Path(platformdirs.user_config_dir("toolkeeper")) / "config.json"


def demo_config_path() -> Path:
    return Path(str(resources.files("toolkeeper.demo").joinpath("config.json")))


def find_config(explicit: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """Where the configuration comes from: `--config`, then `TOOLKEEPER_CONFIG`, then the user
    config directory, then the bundled demo configuration. Returns the path and its origin."""
    if explicit:
        return Path(explicit).expanduser(), "--config"
    from_env = os.environ.get("TOOLKEEPER_CONFIG")
    if from_env:
        return Path(from_env).expanduser(), "TOOLKEEPER_CONFIG"
    user = user_config_path()
    if user.exists():
        return user, "user config directory"
    return demo_config_path(), "bundled demo (no --config, no TOOLKEEPER_CONFIG, no " + str(user) + ")"


def load_config(
    explicit: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    kinds: Sequence[EntryKind] = STANDARD_KINDS,
) -> Config:
    """The configuration this process runs with. From here on its secrets are kept out of every
    log line (`toolkeeper.log`), a server's stderr and the libraries' messages included."""
    path, origin = find_config(explicit)
    logger.info("configuration: %s (%s)", path, origin)
    config = parse_config_file(path, environ=environ, kinds=kinds)
    hide_in_logs(config.redact)
    return config


def parse_config_file(
    path: Path, environ: Mapping[str, str] | None = None, *, kinds: Sequence[EntryKind] = STANDARD_KINDS
) -> Config:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file. Create it (see the README's configuration reference) "
            "or pass another file with --config."
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}). Check its permissions.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}). Save it as UTF-8.") from None
    return parse_config_text(text, path, environ=environ, kinds=kinds)


def parse_config_text(
    text: str,
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    kinds: Sequence[EntryKind] = STANDARD_KINDS,
) -> Config:
    """The configuration `text` holds. `kinds`: the kinds of tool source a server entry may be,
    the first serving entries that name no `type`."""
    env = os.environ if environ is None else environ
    where = str(path) if path else "<config>"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}. "
            "Fix the syntax there (a trailing comma or a missing quote is the usual cause)."
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError(f'{where}: the top level must be a JSON object like {{"mcpServers": {{...}}}}.')
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(
                f"{where}:{_line_of_key(text, key)}: unknown top-level key {key!r}. "
                f"Allowed: {', '.join(sorted(TOP_LEVEL_KEYS))}; gateway settings go under 'toolkeeper'."
            )
    servers_raw = raw.get("mcpServers", {})
    if not isinstance(servers_raw, dict):
        raise ConfigError(f"{where}: 'mcpServers' must be an object mapping server names to entries.")
    try:
        settings = _parse_settings(raw.get("toolkeeper", {}), where, env)
    except EntryError as exc:
        raise ConfigError(f"{where}: {exc}") from None

    servers: list[SourceConfig] = []
    skipped: dict[str, str] = {}
    disabled: list[str] = []
    for name, entry in servers_raw.items():
        try:
            if isinstance(entry, dict) and entry.get("disabled") is True:
                disabled.append(name)
                continue
            servers.append(_parse_server(name, entry, env, kinds))
        except EntryError as exc:
            reason = str(exc)
            skipped[name] = reason
            logger.warning("%s: server %r skipped: %s", where, name, reason)
    _warn_of_limits_for_no_server(settings, {*servers_raw}, where)
    return Config(
        path=path,
        servers=tuple(servers),
        settings=settings,
        skipped=skipped,
        disabled=tuple(disabled),
    )


def _warn_of_limits_for_no_server(settings: GatewaySettings, servers: set[str], where: str) -> None:
    """A tool's rate limit whose server is not in the file (a typing mistake, most likely) would
    never hold: said at every start."""
    for name in settings.rate_limit_tools:
        server = name.partition(".")[0]
        if server not in servers:
            logger.warning(
                "%s: toolkeeper.rateLimits.tools names %r, but there is no server %r in mcpServers: "
                "that limit holds for no call",
                where,
                name,
                server,
            )


def _line_of_key(text: str, key: str) -> int:
    """The line of `key` in the top-level object of `text` (already known to be valid JSON)."""
    decoder = json.JSONDecoder()
    pos = _skip_space(text, 0) + 1  # after the opening brace
    while True:
        pos = _skip_space(text, pos)
        if text[pos] != '"':
            return 1
        found, end = decoder.raw_decode(text, pos)
        if found == key:
            return text.count("\n", 0, pos) + 1
        value_start = _skip_space(text, _skip_space(text, end) + 1)  # past the ':'
        pos = _skip_space(text, decoder.raw_decode(text, value_start)[1]) + 1  # past ',' or '}'


def _skip_space(text: str, pos: int) -> int:
    """The position of the first character at or after `pos` that is not JSON whitespace."""
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def _parse_server(name: str, entry: Any, env: Mapping[str, str], kinds: Sequence[EntryKind]) -> SourceConfig:
    if not SERVER_NAME.match(name):
        raise EntryError("server names may use letters, digits, '_' and '-', at most 64 characters")
    if not isinstance(entry, dict):
        raise EntryError(f"the entry must be {kinds[0].entry_shape}")
    if not isinstance(entry.get("disabled", False), bool):
        raise EntryError(f"'disabled' must be true or false, got {entry['disabled']!r}")
    written_type = entry.get("type", entry.get("transport"))
    if written_type is not None and not isinstance(written_type, str):
        shown = [f"'{t}'" for kind in kinds for t in kind.shown_types]
        raise EntryError(
            f"'type' must be a string such as {', '.join(shown[:-1])} or {shown[-1]}, got {written_type!r}"
        )
    kind = _kind_of(written_type, kinds)
    return kind.parse(ServerEntry(name=name, raw=entry, type=written_type, env=env))


def _kind_of(written_type: str | None, kinds: Sequence[EntryKind]) -> EntryKind:
    """The kind an entry's `type` selects; the first kind if it names none."""
    if written_type is None:
        return kinds[0]
    for kind in kinds:
        if written_type in kind.types:
            return kind
    usage = " or ".join(kind.usage for kind in kinds)
    raise EntryError(f"unknown transport {written_type!r}; use {usage}")


@dataclass(frozen=True, kw_only=True)
class Found:
    """A setting's value as written, and where: `source` names the place as messages say it."""

    value: Any
    source: str
    where: str
    from_environment: bool
    environ: Mapping[str, str]


@dataclass(frozen=True)
class Bounds:
    """What a setting's value must be; `refusal` is formatted with `where`, `source` and `value`."""

    refusal: str
    at_least: int | None = None
    at_most: int | None = None
    above: float | None = None
    one_of: tuple[str, ...] | None = None

    def admits(self, value: Any) -> bool:
        return not (
            (self.at_least is not None and value < self.at_least)
            or (self.at_most is not None and value > self.at_most)
            or (self.above is not None and value <= self.above)
            or (self.one_of is not None and value not in self.one_of)
        )


NO_BOUNDS = Bounds(refusal="")


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One gateway setting: its key under `toolkeeper` (`http.port` is `port` in the `http` object),
    the environment variables that override the file (the first one set wins), how its value is
    read and bounded, its default, and the `GatewaySettings` field it fills."""

    key: str
    field: str
    read: Callable[[Setting, Found], Any]
    kind: type = str
    default: Any
    env: tuple[str, ...] = ()
    bounds: Bounds = NO_BOUNDS

    def refuse(self, found: Found, value: Any) -> ConfigError:
        return ConfigError(self.bounds.refusal.format(where=found.where, source=found.source, value=value))

    def admit(self, found: Found, value: Any) -> None:
        if not self.bounds.admits(value):
            raise self.refuse(found, value)


def _typed(setting: Setting, found: Found) -> Any:
    """A value of the setting's kind; text, from the file or the environment, is read as one."""
    kind, value = setting.kind, found.value
    if isinstance(value, str) and kind is not str:
        value = _coerce(value, kind, found.source)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{found.source} must be a {kind.__name__}, got {value!r}.")
    setting.admit(found, value)
    return value


def _home(setting: Setting, found: Found) -> Path | None:
    home = str(_typed(setting, found))
    return Path(expand(home, found.environ, "toolkeeper.home")).expanduser() if home else None


AUDIT_KEY_MIN_LENGTH = 32


def _audit_key(setting: Setting, found: Found) -> str | None:
    """The audit chain's key as text (`${VAR}` expanded); its value is never shown in a message."""
    if not isinstance(found.value, str):
        raise ConfigError(f"{found.source} must be text (the audit key), got a {type(found.value).__name__}.")
    key = expand(found.value, found.environ, "toolkeeper.auditKey").strip()
    if not key:
        return None
    if len(key) < AUDIT_KEY_MIN_LENGTH:
        raise ConfigError(
            f"{found.source} is {len(key)} characters long; an audit key needs at least "
            f"{AUDIT_KEY_MIN_LENGTH}. Use the text of a gateway's audit.key file (every gateway of a "
            "store needs the same key), or a new one from `openssl rand -hex 32`."
        )
    return key


def _log_level(setting: Setting, found: Found) -> str:
    return str(_typed(setting, found)).upper()


def _number(setting: Setting, found: Found) -> Any:
    """A number of the setting's kind (an int will do for a float). Only the environment's text is
    read as one: the file must hold a number. The wrong type gets the same refusal as out of bounds."""
    kind = setting.kind
    value = _coerce(found.value, kind, found.source) if found.from_environment else found.value
    wanted = (int, float) if kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, wanted):
        raise setting.refuse(found, value)
    setting.admit(found, value)
    return kind(value)


def _port(setting: Setting, found: Found) -> int:
    # Unlike other numbers, a port written as text in the file is read too.
    return int(_number(setting, replace(found, value=_coerce(found.value, int, "http port"))))


def _string_list(setting: Setting, found: Found) -> tuple[str, ...]:
    """A list of strings from the file, or a comma-separated environment variable."""
    value = found.value
    if found.from_environment:
        return tuple(item.strip() for item in value.split(",") if item.strip())
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{found.source} must be a list of non-empty strings, got {value!r}.")
    return tuple(value)


def _public_url(setting: Setting, found: Found) -> str:
    """Where clients reach the gateway from outside (behind a reverse proxy): an absolute https URL
    (http only for a loopback host), without a query; kept without its trailing slash."""
    return _web_url(found.source, found.value, "https://gateway.example.com", query=False).rstrip("/")


def _replica_url(setting: Setting, found: Found) -> str:
    """Where the other replicas reach this one's /mcp: an absolute http(s) URL with a path. Plain
    http is allowed off the loopback too: replicas usually talk over their own private network."""
    parts = _url_parts(found.value)
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not parts.path:
        raise ConfigError(
            f"{found.source} must be an absolute URL of this replica's MCP endpoint, like "
            f'"http://10.0.0.5:8765/mcp", got {found.value!r}.'
        )
    if parts.fragment or parts.query or parts.username is not None:
        raise ConfigError(f"{found.source} must not hold a query, a fragment or a user name.")
    return str(found.value)


def _networks(setting: Setting, found: Found) -> tuple[str, ...]:
    """Addresses and networks (`10.0.0.5`, `10.0.0.0/8`, `fd00::/8`), each as a CIDR network."""
    networks = []
    for item in _string_list(setting, found):
        try:
            networks.append(str(ipaddress.ip_network(item.strip(), strict=False)))
        except ValueError:
            raise ConfigError(
                f"{found.source} lists {item!r}, which is no IP address or network: write the address "
                'your reverse proxy connects from, like "10.0.0.5" or "10.0.0.0/8" (names are not '
                "resolved)."
            ) from None
    return tuple(networks)


def _flag_map(setting: Setting, found: Found) -> dict[str, bool]:
    value = found.value
    if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
        raise ConfigError(f"{found.source} must map flag names to true/false.")
    return dict(value)


def _as_written(setting: Setting, found: Found) -> Any:
    return found.value


REPLICA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,62}")


def _replica_name(setting: Setting, found: Found) -> str:
    """A replica's name: shown in the audit and the approvals, so short and plain."""
    value = found.value
    if not isinstance(value, str) or not REPLICA_NAME.fullmatch(value):
        raise ConfigError(
            f"{found.source} must name this replica in 1 to 63 letters, digits, '.', '_', ':' or '-',"
            f' starting with a letter or digit, like "gateway-1"; got {value!r}.'
        )
    return value


# What a limit may say instead of a rate: this principal is not limited (or, for perPrincipal, nobody).
UNLIMITED = "unlimited"


def _rate_or_unlimited(source: str, value: Any) -> Rate | None:
    """A rate, or None for "unlimited" (and, in the file, null)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == UNLIMITED):
        return None
    rate = parse_rate(value) if isinstance(value, str) else None
    if rate is None:
        raise ConfigError(f'{source} must be {RATE_FORMS}, or "{UNLIMITED}"; got {value!r}.')
    return rate


def _rate(setting: Setting, found: Found) -> Rate | None:
    return _rate_or_unlimited(found.source, found.value)


def _rate_map(found: Found, example: str) -> dict[str, Any]:
    value = found.value
    if not isinstance(value, dict):
        raise ConfigError(f"{found.source} must be an object like {example}, got {value!r}.")
    return value


def _principal_rates(setting: Setting, found: Found) -> dict[str, Rate | None]:
    """Each named principal's own limit, in place of perPrincipal, by its name as the audit log
    shows it: a client key's name (or "key:<name>", as accounts are named), "oauth:<subject>",
    "local" or "anonymous"; "unlimited" exempts it."""
    rates: dict[str, Rate | None] = {}
    for name, value in _rate_map(found, '{"ci-bot": "30/minute", "oauth:alice": "unlimited"}').items():
        principal = name.removeprefix("key:")
        if not principal.strip():
            raise ConfigError(
                f'{found.source} must name each principal as a client key\'s name, "oauth:<subject>", '
                f'"local" or "anonymous"; got {name!r}.'
            )
        rates[principal] = _rate_or_unlimited(f"{found.source}[{name!r}]", value)
    return rates


def _tool_rates(setting: Setting, found: Found) -> dict[str, Rate]:
    """Each tool's limit, as "server.tool", for every principal's calls of it."""
    rates: dict[str, Rate] = {}
    for name, value in _rate_map(found, '{"github.create_issue": "10/minute"}').items():
        server, dot, tool = name.partition(".")
        if not (dot and SERVER_NAME.match(server) and tool):
            raise ConfigError(
                f"{found.source} names {name!r}, which is no tool: write it as server.tool, the name "
                "of its server in mcpServers, a dot, and the tool's name as its server lists it."
            )
        rate = _rate_or_unlimited(f"{found.source}[{name!r}]", value)
        if rate is not None:
            rates[name] = rate
    return rates


EXAMPLE_ISSUER = "https://auth.example.com"
EXAMPLE_AUDIENCE = "https://gateway.example.com/mcp"
EXAMPLE_JWKS_URI = f"{EXAMPLE_ISSUER}/.well-known/jwks.json"
OAUTH_SHAPE = (
    f'{{"issuer": "{EXAMPLE_ISSUER}", "audience": "{EXAMPLE_AUDIENCE}"}}, with optional "jwksUri", '
    '"requiredScopes" (a list of scopes) and "adminScope"'
)
OAUTH_KEYS = frozenset({"issuer", "audience", "jwksUri", "requiredScopes", "adminScope"})


def _oauth(setting: Setting, found: Found) -> OAuthSettings | None:
    """The authorization server the HTTP endpoint trusts. Its URLs are where tokens and keys
    come from, so each must be absolute and, off this machine, https."""
    value, source = found.value, found.source
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - OAUTH_KEYS:
        raise ConfigError(f"{source} must look like {OAUTH_SHAPE}.")
    for key, example in (("issuer", EXAMPLE_ISSUER), ("audience", EXAMPLE_AUDIENCE)):
        if key not in value:
            raise ConfigError(f'{source} needs "{key}", like "{example}".')
    jwks_uri = value.get("jwksUri")
    admin_scope = value.get("adminScope")
    if admin_scope is not None:
        admin_scope = _scope(f"{source}.adminScope", admin_scope)
    return OAuthSettings(
        issuer=_web_url(f"{source}.issuer", value["issuer"], EXAMPLE_ISSUER, query=False),
        audience=_web_url(f"{source}.audience", value["audience"], EXAMPLE_AUDIENCE),
        jwks_uri=None if jwks_uri is None else _web_url(f"{source}.jwksUri", jwks_uri, EXAMPLE_JWKS_URI),
        required_scopes=_scopes(f"{source}.requiredScopes", value.get("requiredScopes", [])),
        admin_scope=admin_scope,
    )


def _web_url(source: str, value: Any, example: str, *, query: bool = True) -> str:
    """An absolute http(s) URL, https unless its host is this machine. No fragment and no user
    name anywhere; an issuer has no query either (it is compared as written)."""
    parts = _url_parts(value)
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f'{source} must be an absolute https URL like "{example}", got {value!r}.')
    if parts.fragment or parts.username is not None or (parts.query and not query):
        kept_out = "a fragment" if query else "a query, a fragment"
        raise ConfigError(f'{source} must not hold {kept_out} or a user name; write it like "{example}".')
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ConfigError(
            f"{source} must use https (http only for a loopback host such as 127.0.0.1), got {value!r}."
        )
    return str(value)


def _url_parts(value: Any) -> SplitResult | None:
    """`value` split as a URL; None for what is not text or not a URL (a port that is not a
    number is only noticed when read)."""
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value)
        _ = parts.port
    except ValueError:
        return None
    return parts


def _scopes(source: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(f'{source} must be a list of scopes like ["mcp:tools"], got {value!r}.')
    return tuple(_scope(source, item) for item in value)


def _scope(source: str, value: Any) -> str:
    """One OAuth scope: a word, since a token lists its scopes separated by spaces."""
    if not isinstance(value, str) or not value or any(char.isspace() for char in value):
        raise ConfigError(
            f'{source} must name scopes as words without spaces, like "mcp:admin"; got {value!r}.'
        )
    return value


SECONDS = Bounds("{source} must be a number of seconds above 0, got {value!r}.", above=0)
# In the order they are checked: a file with several mistakes is refused for the first.
SETTINGS = (
    Setting(
        key="http.allowedHosts", field="http_allowed_hosts", read=_string_list, default=(),
        env=("TOOLKEEPER_HTTP_ALLOWED_HOSTS",),
    ),
    Setting(
        key="http.allowedOrigins", field="http_allowed_origins", read=_string_list, default=(),
        env=("TOOLKEEPER_HTTP_ALLOWED_ORIGINS",),
    ),
    Setting(
        key="http.trustedProxies", field="http_trusted_proxies", read=_networks, default=(),
        env=("TOOLKEEPER_HTTP_TRUSTED_PROXIES",),
    ),
    Setting(
        key="http.publicUrl", field="http_public_url", read=_public_url, default=None,
        env=("TOOLKEEPER_HTTP_PUBLIC_URL",),
    ),
    Setting(
        key="http.replicaUrl", field="http_replica_url", read=_replica_url, default=None,
        env=("TOOLKEEPER_HTTP_REPLICA_URL",),
    ),
    Setting(
        key="http.maxRequestBytes", field="http_max_request_bytes", read=_number, kind=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        bounds=Bounds("{source} must be a whole number of at least 1024.", at_least=1024),
    ),
    Setting(
        key="http.auth.mode", field="http_auth_mode", read=_typed, default="auto",
        env=("TOOLKEEPER_HTTP_AUTH_MODE",),
        bounds=Bounds(
            f"{{source}} must be one of {', '.join(HTTP_AUTH_MODES)}, got {{value!r}}.",
            one_of=HTTP_AUTH_MODES,
        ),
    ),
    Setting(key="http.auth.oauth", field="http_auth_oauth", read=_oauth, default=None),
    Setting(
        key="stdio.maxMessageBytes", field="stdio_max_message_bytes", read=_number, kind=int,
        default=DEFAULT_MAX_MESSAGE_BYTES, env=(MAX_MESSAGE_BYTES_ENV,),
        bounds=Bounds("{source} must be a whole number of at least 1024, got {value!r}.", at_least=1024),
    ),
    # Before the flags read one by one below, which rely on its check.
    Setting(key="featureFlags", field="feature_flags", read=_flag_map, default={}),
    Setting(key="home", field="home", read=_home, default=None, env=("TOOLKEEPER_HOME",)),
    Setting(
        key="http.host", field="http_host", read=_as_written, default=DEFAULT_HTTP_HOST,
        env=("TOOLKEEPER_HTTP_HOST",),
    ),
    Setting(
        key="http.port", field="http_port", read=_port, kind=int, default=DEFAULT_HTTP_PORT,
        env=("TOOLKEEPER_HTTP_PORT",),
        bounds=Bounds(
            "{where}: the HTTP port must be a whole number between 1 and 65535, got {value!r}.",
            at_least=1, at_most=65535,
        ),
    ),
    Setting(
        key="maxConcurrentConnects", field="max_concurrent_connects", read=_typed, kind=int, default=8,
        env=("TOOLKEEPER_MAX_CONCURRENT_CONNECTS",),
        bounds=Bounds("{where}: toolkeeper.maxConcurrentConnects must be at least 1.", at_least=1),
    ),
    Setting(
        key="maxClientConnections", field="max_client_connections", read=_typed, kind=int,
        default=DEFAULT_MAX_CLIENT_CONNECTIONS,
        env=("TOOLKEEPER_MAX_CLIENT_CONNECTIONS",),
        bounds=Bounds(
            "{where}: toolkeeper.maxClientConnections must be at least 0, got {value}.", at_least=0
        ),
    ),
    Setting(
        key="clientConnectionIdleSeconds", field="client_connection_idle_seconds", read=_number, kind=float,
        default=DEFAULT_CLIENT_CONNECTION_IDLE_SECONDS,
        env=("TOOLKEEPER_CLIENT_CONNECTION_IDLE_SECONDS",), bounds=SECONDS,
    ),
    Setting(
        key="inferHints", field="infer_hints", read=_typed, default="suggest",
        env=("TOOLKEEPER_INFER_HINTS",),
        bounds=Bounds(
            "{where}: toolkeeper.inferHints must be 'suggest' or 'apply', got {value!r}.", one_of=INFER_HINTS
        ),
    ),
    Setting(
        key="auditRetentionDays", field="audit_retention_days", read=_typed, kind=int,
        default=DEFAULT_AUDIT_RETENTION_DAYS,
        env=("TOOLKEEPER_AUDIT_RETENTION_DAYS",),
        bounds=Bounds("{where}: toolkeeper.auditRetentionDays must be at least 1, got {value}.", at_least=1),
    ),
    Setting(key="auditKey", field="audit_key", read=_audit_key, default=None, env=("TOOLKEEPER_AUDIT_KEY",)),
    Setting(
        key="replica", field="replica", read=_replica_name, default=DEFAULT_REPLICA,
        env=("TOOLKEEPER_REPLICA",),
    ),
    Setting(
        key="auditMaxWaiting", field="audit_max_waiting", read=_typed, kind=int,
        default=DEFAULT_AUDIT_MAX_WAITING,
        env=("TOOLKEEPER_AUDIT_MAX_WAITING",),
        bounds=Bounds("{where}: toolkeeper.auditMaxWaiting must be at least 1, got {value}.", at_least=1),
    ),
    Setting(
        key="maxServerInstructions", field="max_server_instructions", read=_typed, kind=int,
        default=DEFAULT_MAX_SERVER_INSTRUCTIONS, env=("TOOLKEEPER_MAX_SERVER_INSTRUCTIONS",),
        bounds=Bounds(
            "{where}: toolkeeper.maxServerInstructions must be 0 (pass none on) or more characters, "
            "got {value}.",
            at_least=0,
        ),
    ),
    Setting(
        key="maxDescriptionBytes", field="max_description_bytes", read=_typed, kind=int,
        default=DEFAULT_MAX_DESCRIPTION_BYTES, env=("TOOLKEEPER_MAX_DESCRIPTION_BYTES",),
        bounds=Bounds(
            "{where}: toolkeeper.maxDescriptionBytes must be a whole number of at least 1, got {value}.",
            at_least=1,
        ),
    ),
    Setting(
        key="maxToolTokens", field="max_tool_tokens", read=_typed, kind=int,
        default=DEFAULT_MAX_TOOL_TOKENS, env=("TOOLKEEPER_MAX_TOOL_TOKENS",),
        bounds=Bounds(
            "{where}: toolkeeper.maxToolTokens must be a whole number of at least 1, got {value}.",
            at_least=1,
        ),
    ),
    Setting(
        key="confirm", field="confirm", read=_typed, default=None, env=("TOOLKEEPER_CONFIRM",),
        bounds=Bounds(
            f"{{where}}: toolkeeper.confirm must be one of {', '.join(CONFIRM_MODES)}, got {{value!r}}.",
            one_of=CONFIRM_MODES,
        ),
    ),
    Setting(
        key="autoApproveReadOnly", field="auto_approve_read_only", read=_typed, kind=bool, default=True,
        env=("TOOLKEEPER_AUTO_APPROVE_READ_ONLY",),
    ),
    Setting(
        key="confirmDestructive", field="confirm_destructive", read=_typed, kind=bool, default=True,
        env=("TOOLKEEPER_CONFIRM_DESTRUCTIVE",),
    ),
    Setting(
        key="trustIdempotentRetries", field="trust_idempotent_retries", read=_typed, kind=bool, default=True,
        env=("TOOLKEEPER_TRUST_IDEMPOTENT_RETRIES",),
    ),
    Setting(
        key="retryWindow", field="retry_window", read=_number, kind=float, default=DEFAULT_RETRY_WINDOW,
        env=("TOOLKEEPER_RETRY_WINDOW",), bounds=SECONDS,
    ),
    Setting(
        key="approvalTimeout", field="approval_timeout", read=_number, kind=float,
        default=DEFAULT_APPROVAL_TIMEOUT,
        env=("TOOLKEEPER_APPROVAL_TIMEOUT",), bounds=SECONDS,
    ),
    Setting(
        key="auditArguments", field="audit_arguments", read=_typed, kind=bool, default=False,
        env=("TOOLKEEPER_AUDIT_ARGUMENTS",),
    ),
    Setting(
        key="sanitizeUntrustedHints", field="sanitize_untrusted_hints", read=_typed, kind=bool, default=False,
        env=("TOOLKEEPER_SANITIZE_UNTRUSTED_HINTS",),
    ),
    # toolkeeper's own variable wins over hypertool's, which is honoured for people who migrate.
    Setting(
        key="featureFlags.enableConfigToolsMenu", field="config_tools_menu", read=_typed, kind=bool,
        default=True,
        env=("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "HYPERTOOL_ENABLE_CONFIG_TOOLS_MENU"),
    ),
    Setting(
        key="discovery", field="discovery", read=_typed, default="off", env=("TOOLKEEPER_DISCOVERY",),
        bounds=Bounds(
            f"{{where}}: toolkeeper.discovery must be one of {', '.join(DISCOVERY_MODES)}, got {{value!r}}.",
            one_of=DISCOVERY_MODES,
        ),
    ),
    Setting(
        key="workingSetMaxTools", field="working_set_max_tools", read=_typed, kind=int,
        default=DEFAULT_WORKING_SET_MAX_TOOLS, env=("TOOLKEEPER_WORKING_SET_MAX_TOOLS",),
        bounds=Bounds(
            "{where}: toolkeeper.workingSetMaxTools must be a whole number of at least 1, got {value}.",
            at_least=1,
        ),
    ),
    Setting(
        key="workingSetMaxTokens", field="working_set_max_tokens", read=_typed, kind=int,
        default=DEFAULT_WORKING_SET_MAX_TOKENS, env=("TOOLKEEPER_WORKING_SET_MAX_TOKENS",),
        bounds=Bounds(
            "{where}: toolkeeper.workingSetMaxTokens must be a whole number of at least 1 (estimated "
            "tokens), got {value}.",
            at_least=1,
        ),
    ),
    Setting(
        key="databaseUrl", field="database_url", read=_typed, default=None, env=("TOOLKEEPER_DATABASE_URL",)
    ),
    Setting(
        key="databaseTimeout", field="database_timeout", read=_number, kind=float,
        default=DEFAULT_DATABASE_TIMEOUT,
        env=("TOOLKEEPER_DATABASE_TIMEOUT",), bounds=SECONDS,
    ),
    Setting(
        key="rateLimits.perPrincipal", field="rate_limit_per_principal", read=_rate, default=None,
        env=("TOOLKEEPER_RATE_LIMIT_PER_PRINCIPAL",),
    ),
    Setting(key="rateLimits.principals", field="rate_limit_principals", read=_principal_rates, default={}),
    Setting(key="rateLimits.tools", field="rate_limit_tools", read=_tool_rates, default={}),
    Setting(
        key="logLevel", field="log_level", read=_log_level, default="INFO", env=("TOOLKEEPER_LOG_LEVEL",)
    ),
)  # fmt: skip
SETTINGS_KEYS = frozenset(setting.key.partition(".")[0] for setting in SETTINGS)
# The objects whose keys are all settings of the table, by their dotted path under `toolkeeper`;
# `featureFlags` holds any flag names.
SECTION_SHAPES = {
    "http": '{where}: toolkeeper.http must look like {{"host": "127.0.0.1", "port": 8765}}, with optional '
    '"allowedHosts", "allowedOrigins" and "trustedProxies" (lists of strings), "publicUrl", '
    '"replicaUrl", "maxRequestBytes" and "auth".',
    "http.auth": '{where}: toolkeeper.http.auth must look like {{"mode": "oauth", "oauth": {{"issuer": '
    '"https://auth.example.com", "audience": "https://gateway.example.com/mcp"}}}}, with the mode one of '
    + ", ".join(HTTP_AUTH_MODES)
    + ".",
    "stdio": '{where}: toolkeeper.stdio must look like {{"maxMessageBytes": 4194304}}.',
    "rateLimits": '{where}: toolkeeper.rateLimits must look like {{"perPrincipal": "120/minute", '
    '"principals": {{"ci-bot": "30/minute"}}, "tools": {{"github.create_issue": "10/minute"}}}}, each '
    "part optional.",
}
# Each section's own keys: its settings' names and the sections inside it (`auth` in `http`).
SECTION_KEYS = {
    name: frozenset(
        setting.key.removeprefix(f"{name}.").partition(".")[0]
        for setting in SETTINGS
        if setting.key.startswith(f"{name}.")
    )
    for name in SECTION_SHAPES
}


def _parse_settings(raw: Any, where: str, env: Mapping[str, str]) -> GatewaySettings:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: 'toolkeeper' must be an object of gateway settings.")
    for key in raw:
        if key not in SETTINGS_KEYS:
            raise ConfigError(
                f"{where}: unknown setting 'toolkeeper.{key}'. Allowed: {', '.join(sorted(SETTINGS_KEYS))}."
            )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        found = _find(setting, raw, where, env)
        # A copy, so that no two configurations share a default object (`featureFlags`'s dict).
        values[setting.field] = copy.copy(setting.default) if found is None else setting.read(setting, found)
        if found is not None:
            sources[setting.field] = found.source
    _check_http_auth(values, sources)
    return GatewaySettings(**values)


def _check_http_auth(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """A mode that takes OAuth access tokens cannot check one without knowing their issuer."""
    mode = values["http_auth_mode"]
    if mode in OAUTH_MODES and values["http_auth_oauth"] is None:
        raise ConfigError(
            f"{sources['http_auth_mode']} is {mode!r}, which needs toolkeeper.http.auth.oauth: write "
            f'{{"issuer": "{EXAMPLE_ISSUER}", "audience": "{EXAMPLE_AUDIENCE}"}} there with your '
            "authorization server and this gateway's URL, or choose the mode 'keys' or 'none'."
        )


def _find(setting: Setting, raw: dict[str, Any], where: str, env: Mapping[str, str]) -> Found | None:
    """The setting's value from the environment, which wins, or from the file; None if in neither."""
    section_name, _, name = setting.key.rpartition(".")
    section = _section(raw, section_name, where) if section_name else raw
    for variable in setting.env:
        if variable in env:
            source = f"environment variable {variable}"
            return Found(value=env[variable], source=source, where=where, from_environment=True, environ=env)
    if name not in section:
        return None
    source = f"{where}: toolkeeper.{setting.key}"
    return Found(value=section[name], source=source, where=where, from_environment=False, environ=env)


def _section(raw: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    """One object of settings (`http.auth` is `auth` in `http`), each object on the way refused
    unless it holds only the table's keys (checked even when the environment overrides them all)."""
    section: Any = raw
    path: list[str] = []
    for part in name.split("."):
        path.append(part)
        section = section.get(part, {})
        dotted = ".".join(path)
        if dotted in SECTION_SHAPES and (
            not isinstance(section, dict) or set(section) - SECTION_KEYS[dotted]
        ):
            raise ConfigError(SECTION_SHAPES[dotted].format(where=where))
    return section  # type: ignore[no-any-return]


def _coerce(value: Any, kind: type, source: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        if kind is bool:
            lowered = value.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        return kind(value)
    except ValueError:
        raise ConfigError(f"{source} must be a {kind.__name__}, got {value!r}.") from None
