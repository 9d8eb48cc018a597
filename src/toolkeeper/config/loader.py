"""Find, read and validate the configuration file.

A file-level problem (bad JSON, an unknown top-level key, a wrong type in the `toolkeeper`
section) stops the gateway with a `ConfigError` naming the file, the line or field and the fix.
A problem inside one server entry only skips that server, with a warning: the others serve.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from toolkeeper.config.entries import EntryError, EntryKind, ServerEntry, expand
from toolkeeper.config.mcp import MCP_ENTRIES
from toolkeeper.config.model import (
    CONFIRM_MODES,
    DEFAULT_APPROVAL_TIMEOUT,
    DEFAULT_AUDIT_RETENTION_DAYS,
    DEFAULT_DATABASE_TIMEOUT,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_SERVER_INSTRUCTIONS,
    DEFAULT_RETRY_WINDOW,
    INFER_HINTS,
    MAX_MESSAGE_BYTES_ENV,
    Config,
    GatewaySettings,
    SourceConfig,
)

logger = logging.getLogger(__name__)

TOP_LEVEL_KEYS = {"mcpServers", "toolkeeper", "$schema"}
SETTINGS_KEYS = {
    "home", "databaseUrl", "databaseTimeout", "http", "stdio", "logLevel", "maxConcurrentConnects",
    "featureFlags",
    "inferHints", "sanitizeUntrustedHints",
    "confirm", "autoApproveReadOnly", "confirmDestructive", "trustIdempotentRetries", "retryWindow",
    "approvalTimeout", "auditArguments", "auditRetentionDays", "maxServerInstructions",
}  # fmt: skip
HTTP_KEYS = {"host", "port", "allowedHosts", "allowedOrigins", "maxRequestBytes"}
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
    path, origin = find_config(explicit)
    logger.info("configuration: %s (%s)", path, origin)
    return parse_config_file(path, environ=environ, kinds=kinds)


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
    return Config(
        path=path,
        servers=tuple(servers),
        settings=settings,
        skipped=skipped,
        disabled=tuple(disabled),
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


def _parse_settings(raw: Any, where: str, env: Mapping[str, str]) -> GatewaySettings:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: 'toolkeeper' must be an object of gateway settings.")
    for key in raw:
        if key not in SETTINGS_KEYS:
            raise ConfigError(
                f"{where}: unknown setting 'toolkeeper.{key}'. Allowed: {', '.join(sorted(SETTINGS_KEYS))}."
            )

    def source(path: str, env_name: str) -> str:
        """Where a setting's value comes from, as messages name it: the environment wins."""
        return f"environment variable {env_name}" if env_name in env else f"{where}: toolkeeper.{path}"

    def setting(key: str, env_name: str, kind: type, default: Any) -> Any:
        if env_name not in env and key not in raw:
            return default
        value: Any = env[env_name] if env_name in env else raw[key]
        if isinstance(value, str) and kind is not str:
            value = _coerce(value, kind, source(key, env_name))
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{source(key, env_name)} must be a {kind.__name__}, got {value!r}.")
        return value

    http = raw.get("http", {})
    if not isinstance(http, dict) or set(http) - HTTP_KEYS:
        raise ConfigError(
            f'{where}: toolkeeper.http must look like {{"host": "127.0.0.1", "port": 8765}}, with optional '
            '"allowedHosts" and "allowedOrigins" (lists of strings) and "maxRequestBytes".'
        )
    allowed_hosts = _string_list(
        env.get("TOOLKEEPER_HTTP_ALLOWED_HOSTS"), http.get("allowedHosts"), where, "allowedHosts"
    )
    allowed_origins = _string_list(
        env.get("TOOLKEEPER_HTTP_ALLOWED_ORIGINS"), http.get("allowedOrigins"), where, "allowedOrigins"
    )
    max_request = http.get("maxRequestBytes", DEFAULT_MAX_REQUEST_BYTES)
    if isinstance(max_request, bool) or not isinstance(max_request, int) or max_request < 1024:
        raise ConfigError(
            f"{where}: toolkeeper.http.maxRequestBytes must be a whole number of at least 1024."
        )
    stdio = raw.get("stdio", {})
    if not isinstance(stdio, dict) or set(stdio) - {"maxMessageBytes"}:
        raise ConfigError(f'{where}: toolkeeper.stdio must look like {{"maxMessageBytes": 4194304}}.')
    max_message_source = source("stdio.maxMessageBytes", MAX_MESSAGE_BYTES_ENV)
    if MAX_MESSAGE_BYTES_ENV in env:
        max_message = _coerce(env[MAX_MESSAGE_BYTES_ENV], int, max_message_source)
    else:
        max_message = stdio.get("maxMessageBytes", DEFAULT_MAX_MESSAGE_BYTES)
    if isinstance(max_message, bool) or not isinstance(max_message, int) or max_message < 1024:
        raise ConfigError(
            f"{max_message_source} must be a whole number of at least 1024, got {max_message!r}."
        )
    flags = raw.get("featureFlags", {})
    if not isinstance(flags, dict) or not all(isinstance(v, bool) for v in flags.values()):
        raise ConfigError(f"{where}: toolkeeper.featureFlags must map flag names to true/false.")
    home = setting("home", "TOOLKEEPER_HOME", str, None)
    host = env.get("TOOLKEEPER_HTTP_HOST", http.get("host", DEFAULT_HTTP_HOST))
    port = _coerce(env.get("TOOLKEEPER_HTTP_PORT", http.get("port", DEFAULT_HTTP_PORT)), int, "http port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ConfigError(f"{where}: the HTTP port must be a whole number between 1 and 65535, got {port!r}.")
    connects = setting("maxConcurrentConnects", "TOOLKEEPER_MAX_CONCURRENT_CONNECTS", int, 8)
    if connects < 1:
        raise ConfigError(f"{where}: toolkeeper.maxConcurrentConnects must be at least 1.")
    infer_hints = setting("inferHints", "TOOLKEEPER_INFER_HINTS", str, "suggest")
    if infer_hints not in INFER_HINTS:
        raise ConfigError(
            f"{where}: toolkeeper.inferHints must be 'suggest' or 'apply', got {infer_hints!r}."
        )

    def seconds(key: str, env_name: str, default: float) -> float:
        named = source(key, env_name)
        value = _coerce(env[env_name], float, named) if env_name in env else raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"{named} must be a number of seconds above 0, got {value!r}.")
        return float(value)

    retention = setting(
        "auditRetentionDays", "TOOLKEEPER_AUDIT_RETENTION_DAYS", int, DEFAULT_AUDIT_RETENTION_DAYS
    )
    if retention < 1:
        raise ConfigError(f"{where}: toolkeeper.auditRetentionDays must be at least 1, got {retention}.")
    max_instructions = setting(
        "maxServerInstructions", "TOOLKEEPER_MAX_SERVER_INSTRUCTIONS", int, DEFAULT_MAX_SERVER_INSTRUCTIONS
    )
    if max_instructions < 0:
        raise ConfigError(
            f"{where}: toolkeeper.maxServerInstructions must be 0 (pass none on) or more characters, "
            f"got {max_instructions}."
        )
    confirm = setting("confirm", "TOOLKEEPER_CONFIRM", str, None)
    if confirm is not None and confirm not in CONFIRM_MODES:
        raise ConfigError(
            f"{where}: toolkeeper.confirm must be one of {', '.join(CONFIRM_MODES)}, got {confirm!r}."
        )
    return GatewaySettings(
        confirm=confirm,
        auto_approve_read_only=setting(
            "autoApproveReadOnly", "TOOLKEEPER_AUTO_APPROVE_READ_ONLY", bool, True
        ),
        confirm_destructive=setting("confirmDestructive", "TOOLKEEPER_CONFIRM_DESTRUCTIVE", bool, True),
        trust_idempotent_retries=setting(
            "trustIdempotentRetries", "TOOLKEEPER_TRUST_IDEMPOTENT_RETRIES", bool, True
        ),
        retry_window=seconds("retryWindow", "TOOLKEEPER_RETRY_WINDOW", DEFAULT_RETRY_WINDOW),
        approval_timeout=seconds("approvalTimeout", "TOOLKEEPER_APPROVAL_TIMEOUT", DEFAULT_APPROVAL_TIMEOUT),
        audit_arguments=setting("auditArguments", "TOOLKEEPER_AUDIT_ARGUMENTS", bool, False),
        audit_retention_days=retention,
        max_server_instructions=max_instructions,
        infer_hints=infer_hints,
        sanitize_untrusted_hints=setting(
            "sanitizeUntrustedHints", "TOOLKEEPER_SANITIZE_UNTRUSTED_HINTS", bool, False
        ),
        config_tools_menu=_feature_flag(flags, env, "enableConfigToolsMenu", True),
        home=Path(expand(home, env, "toolkeeper.home")).expanduser() if home else None,
        database_url=setting("databaseUrl", "TOOLKEEPER_DATABASE_URL", str, None),
        database_timeout=seconds("databaseTimeout", "TOOLKEEPER_DATABASE_TIMEOUT", DEFAULT_DATABASE_TIMEOUT),
        http_host=host,
        http_port=port,
        http_allowed_hosts=allowed_hosts,
        http_allowed_origins=allowed_origins,
        http_max_request_bytes=max_request,
        stdio_max_message_bytes=max_message,
        log_level=str(setting("logLevel", "TOOLKEEPER_LOG_LEVEL", str, "INFO")).upper(),
        max_concurrent_connects=connects,
        feature_flags=dict(flags),
    )


def _string_list(from_env: str | None, value: Any, where: str, key: str) -> tuple[str, ...]:
    """A list of strings from the file, or a comma-separated environment variable (which wins)."""
    if from_env is not None:
        return tuple(item.strip() for item in from_env.split(",") if item.strip())
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(
            f"{where}: toolkeeper.http.{key} must be a list of non-empty strings, got {value!r}."
        )
    return tuple(value)


FLAG_ENVIRONMENT = {
    # toolkeeper's own variable wins over hypertool's, which is honoured for people who migrate.
    "enableConfigToolsMenu": ("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "HYPERTOOL_ENABLE_CONFIG_TOOLS_MENU"),
}


def _feature_flag(flags: Mapping[str, bool], env: Mapping[str, str], name: str, default: bool) -> bool:
    """Environment variable (highest priority), then `toolkeeper.featureFlags`, then the default."""
    for variable in FLAG_ENVIRONMENT.get(name, ()):
        if variable in env:
            return bool(_coerce(env[variable], bool, f"environment variable {variable}"))
    return flags.get(name, default)


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
