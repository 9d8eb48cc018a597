"""OpenAPI server entries (`"type": "openapi"`): a REST API described by an OpenAPI 3.0 or 3.1
document, whose operations the gateway serves as tools and calls as HTTP requests.

Loading a spec is bounded by the entry (`SpecLimits`): `maxSpecBytes` (every document the spec is
made of, together), `maxAliases` (what a YAML document's aliases may add when expanded), and
`allowRefOrigins` (where else than its own origin a spec from the network may refer to).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from toolkeeper.config.entries import EntryError, EntryKind, ServerEntry, hidden_values
from toolkeeper.config.model import MASK, SourceConfig, mask_credentials

OPENAPI_KEYS = {
    "spec", "baseUrl", "headers", "auth", "include", "exclude", "openWorld", "maxResponseBytes",
    "maxSpecBytes", "maxAliases", "allowRefOrigins",
}  # fmt: skip
SELECTION_KEYS = ("operationIds", "tags", "methods")
HTTP_METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "TRACE")
DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
# The largest spec of APIs.guru's directory (Microsoft Graph beta) is 47 MB.
DEFAULT_MAX_SPEC_BYTES = 64 * 1024 * 1024
# Nodes (mappings, lists, scalars) that YAML aliases may add to a document when expanded: a
# 592-byte "billion laughs" adds a billion; a spec sharing its parameters by aliases, thousands.
DEFAULT_MAX_ALIASES = 100_000
ANY_ORIGIN = "*"
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class OperationFilter:
    """Which operations an `include` or `exclude` names: operationId globs, tags, methods. What
    each means is the converter's (`Selection`): an included operation matches every list given,
    an excluded one any."""

    operation_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()


@dataclass(frozen=True)
class Credential:
    """A security scheme's value, read from the environment variable the entry's `auth` names."""

    scheme: str
    variable: str
    # None: the variable is not set, and the scheme is never sent.
    value: str | None = field(repr=False)


@dataclass(frozen=True)
class SpecLimits:
    """What loading a spec may cost and where it may reach.

    `ref_origins` are origins (`https://host:port`, see `origin_of`) that a document from the
    network may refer to besides its own, or `*` for any; a loopback, private or link-local host
    is reached only when named here (or when it is the spec's own)."""

    max_bytes: int = DEFAULT_MAX_SPEC_BYTES
    max_aliases: int = DEFAULT_MAX_ALIASES
    ref_origins: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OpenApiConfig(SourceConfig):
    """One REST API: where its spec is, where its requests go, what it sends with them."""

    spec: str
    base_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    credentials: tuple[Credential, ...] = ()
    include: OperationFilter | None = None
    exclude: OperationFilter | None = None
    open_world: bool = True
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    spec_limits: SpecLimits = SpecLimits()

    @property
    def missing_credentials(self) -> tuple[Credential, ...]:
        return tuple(c for c in self.credentials if c.value is None)


def is_web_url(text: str) -> bool:
    return text.lower().startswith(("http://", "https://"))


def origin_of(url: str) -> str | None:
    """The origin of an http(s) URL as `scheme://host:port` (port always written, host in lower
    case), or None when `url` is not one."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{scheme}://{host}:{port or DEFAULT_PORTS[scheme]}"


def foreign_spec_location(spec: str) -> bool:
    """A spec location that is a URL of another scheme than http(s) (ftp://, file://, …): refused,
    where the entry is read and where a spec is previewed."""
    return "://" in spec and not is_web_url(spec)


def parse_openapi_entry(entry: ServerEntry) -> OpenApiConfig:
    entry.warn_unused(OPENAPI_KEYS, "openapi")
    common = entry.common()
    hidden: list[tuple[str, str]] = []
    spec = entry.string("spec", hidden)
    if not spec:
        raise EntryError(
            "an openapi server needs 'spec': a file path or an http(s) URL of an OpenAPI document"
        )
    if foreign_spec_location(spec):
        raise EntryError(
            f"'spec' must be a file path or an http:// or https:// URL, got {mask_credentials(spec)!r}"
        )
    base_url = entry.string("baseUrl", hidden)
    if base_url is not None and not is_web_url(base_url):
        raise EntryError(
            f"'baseUrl' must start with http:// or https://, got {mask_credentials(base_url)!r}; "
            "an openapi server sends HTTP requests only"
        )
    credentials = _credentials(entry, hidden)
    open_world = entry.raw.get("openWorld", True)
    if not isinstance(open_world, bool):
        raise EntryError(f"'openWorld' must be true or false, got {open_world!r}")
    max_bytes = _positive(entry.raw, "maxResponseBytes", DEFAULT_MAX_RESPONSE_BYTES, "bytes")
    return OpenApiConfig(
        name=entry.name,
        transport="openapi",
        spec=spec,
        base_url=base_url.rstrip("/") if base_url else None,
        headers=entry.string_map("headers", hidden),
        credentials=credentials,
        include=_filter(entry.raw, "include"),
        exclude=_filter(entry.raw, "exclude"),
        open_world=open_world,
        max_response_bytes=max_bytes,
        spec_limits=SpecLimits(
            max_bytes=_positive(entry.raw, "maxSpecBytes", DEFAULT_MAX_SPEC_BYTES, "bytes"),
            max_aliases=_positive(entry.raw, "maxAliases", DEFAULT_MAX_ALIASES, "YAML nodes"),
            ref_origins=_origins(entry.raw.get("allowRefOrigins", [])),
        ),
        written=mask_credentials(str(entry.raw["spec"])),
        hidden=hidden_values(hidden),
        **common,
    )


def _positive(raw: Mapping[str, Any], key: str, default: int, unit: str) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EntryError(f"'{key}' must be a positive whole number of {unit}, got {value!r}")
    return value


def _origins(written: Any) -> tuple[str, ...]:
    """`allowRefOrigins`: origins (`https://schemas.example.com`, a port when not the scheme's
    own) or `*` for any origin; a path is not part of an origin."""
    origins: list[str] = []
    for origin in _strings(written, "allowRefOrigins"):
        text = origin.strip()
        if text == ANY_ORIGIN:
            origins.append(ANY_ORIGIN)
            continue
        normal = origin_of(text)
        if normal is None or urlsplit(text).path not in ("", "/") or urlsplit(text).query:
            raise EntryError(
                f"'allowRefOrigins': {origin!r} is not an origin; write scheme, host and port only, "
                'e.g. "https://schemas.example.com" or "http://10.0.0.5:8080", or "*" for any'
            )
        origins.append(normal)
    return tuple(origins)


def _credentials(entry: ServerEntry, hidden: list[tuple[str, str]]) -> tuple[Credential, ...]:
    """`auth`: each security scheme of the spec, named by the environment variable holding its
    value (`${VAR}` or the bare name). An unset variable leaves the scheme without a value."""
    auth = entry.raw.get("auth")
    if auth is None:
        return ()
    if not isinstance(auth, dict):
        raise EntryError("'auth' must be an object mapping security scheme names to environment variables")
    out: list[Credential] = []
    for scheme, written in auth.items():
        if not isinstance(written, str) or not written.strip():
            raise EntryError(f"'auth.{scheme}' must name an environment variable, e.g. \"API_TOKEN\"")
        variable = written.strip()
        if variable.startswith("${") and variable.endswith("}"):
            variable = variable[2:-1]
        if not variable.replace("_", "a").isalnum() or variable[0].isdigit():
            raise EntryError(f"'auth.{scheme}': {written!r} is not an environment variable name")
        value = entry.env.get(variable) or None
        if value is not None:
            hidden.append((value, MASK))
        out.append(Credential(scheme=str(scheme), variable=variable, value=value))
    return tuple(out)


def _filter(raw: Mapping[str, Any], key: str) -> OperationFilter | None:
    written = raw.get(key)
    if written is None:
        return None
    if not isinstance(written, dict):
        raise EntryError(f"'{key}' must be an object with any of {', '.join(SELECTION_KEYS)}")
    for name in written:
        if name not in SELECTION_KEYS:
            raise EntryError(f"'{key}.{name}' is not known; use {', '.join(SELECTION_KEYS)}")
    lists = {name: _strings(written.get(name, []), f"{key}.{name}") for name in SELECTION_KEYS}
    methods = tuple(m.upper() for m in lists["methods"])
    for method in methods:
        if method not in HTTP_METHODS:
            raise EntryError(f"'{key}.methods': {method!r} is not an HTTP method ({', '.join(HTTP_METHODS)})")
    return OperationFilter(operation_ids=lists["operationIds"], tags=lists["tags"], methods=methods)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EntryError(f"'{where}' must be a list of strings")
    return tuple(value)


OPENAPI_ENTRIES = EntryKind(
    types=frozenset({"openapi"}),
    shown_types=("openapi",),
    usage="'openapi' (with 'spec')",
    entry_shape="an object with 'type': 'openapi' and 'spec'",
    parse=parse_openapi_entry,
)
