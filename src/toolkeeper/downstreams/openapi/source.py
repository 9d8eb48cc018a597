"""An OpenAPI source: a REST API whose operations the gateway serves as tools.

The spec is loaded and converted in a worker thread (a large spec never holds up the event
loop), then its tools are served with what the gateway knows of each for itself: the hints of
its HTTP method, and `openWorldHint` from the entry's `openWorld`. Those travel as the source's
`known_hints`, a Python value, never in the tools' wire form, so no MCP server can claim them.

A first load that takes longer than `LOADING_AFTER_SECONDS` puts the source in the `loading`
state, which counts as started: the gateway answers its clients without it, and its tools
arrive with a tool-list change when ready. While it loads, `load_progress` says how many of
the spec's operations are converted.

A local spec's files are watched: an edit serves the new tools, and clients hear of it as any
tool-list change. A new version that cannot be loaded leaves the last good tools served, with
the reason it was refused as the source's `last_error`; a spec that never loaded leaves this
source stopped with the reason, while the rest of the gateway serves. A fixed file brings
either back.

Each call is one HTTP request from one connection pool per source (`requests.py`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from http.cookiejar import CookieJar, DefaultCookiePolicy
from types import MappingProxyType
from typing import Any

import anyio
import httpx2
import jsonschema  # type: ignore[import-untyped]
from mcp.shared.exceptions import MCPError

from toolkeeper.config.openapi import Credential, OpenApiConfig, OperationFilter, is_web_url
from toolkeeper.downstreams.base import DownstreamListener, KnownHint, State
from toolkeeper.downstreams.openapi.addresses import unsafe_server
from toolkeeper.downstreams.openapi.operations import (
    Conversion,
    Operation,
    SecurityScheme,
    Selection,
    convert,
)
from toolkeeper.downstreams.openapi.requests import CallRefused, error, prepare, send
from toolkeeper.downstreams.openapi.spec import SpecError, load_spec
from toolkeeper.downstreams.source import ToolSource
from toolkeeper.protocol import INVALID_PARAMS

logger = logging.getLogger(__name__)

# How often a local spec's files are checked for changes: one stat per file.
WATCH_INTERVAL = 1.0
# A first load still going after this long shows as `loading` and stops holding up the
# gateway's start-up. Small specs (the demo's, most public ones: well under 0.2 s) are still in
# the first list a client gets, with no change to hear of; one that takes longer (Graph's:
# 10-20 s) would hold every client's first answer past the SDK's 10 s `server/discover`
# deadline. One second is far below that, and far above what a small spec takes.
LOADING_AFTER_SECONDS = 1.0
# A spec at a URL that could not be loaded is tried again after this long.
RETRY_INTERVAL = 30.0
HINT_NAMES = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
# The inner deadline of a request, before the call's own (the entry's `timeout`), so a slow API
# is answered with the URL it did not hear from.
REQUEST_DEADLINE_SHARE = 0.95

Stamps = dict[str, tuple[int, int] | None]
# What each method means, as the method table has it (for the reason a hint shows).
METHOD_MEANING = {
    "GET": "only reads",
    "HEAD": "only reads",
    "OPTIONS": "only reads",
    "POST": "may change things and is not idempotent",
    "PATCH": "may change things and is not idempotent",
    "PUT": "replaces a resource (idempotent, not destructive)",
    "DELETE": "deletes (destructive, idempotent)",
}


class LoadAbandoned(Exception):
    """Raised in the worker thread of a load the source no longer waits for."""


@dataclass(frozen=True)
class Route:
    """What a call of one tool needs: its operation, where it goes, how it is authorized."""

    operation: Operation
    base_url: str
    credentials: tuple[tuple[SecurityScheme, Credential], ...]
    validator: Any  # a jsonschema validator of the tool's inputSchema
    output: Any | None  # one of its outputSchema, when it declares one


class OpenApiSource(ToolSource):
    def __init__(self, config: OpenApiConfig, listener: DownstreamListener) -> None:
        super().__init__(config, listener)
        self.openapi = config
        self.capabilities = {"tools": {"listChanged": True}}
        self._routes: Mapping[str, Route] = MappingProxyType({})
        self._client: httpx2.AsyncClient | None = None
        self._reload = anyio.Event()
        self._served_at = 0.0  # when the tools served now were loaded (time.time())

    def reload(self) -> None:
        """Load the spec again now (a person asked for it), whether or not a file changed."""
        self._reload.set()

    # -- learning the tools --------------------------------------------------------------------
    async def run(self, connect_slots: anyio.CapacityLimiter) -> None:
        timeout = httpx2.Timeout(self.openapi.timeout)
        # Every client of the gateway calls through this one pool: a cookie one call's response
        # sets must never ride along on another's request, so none is kept.
        no_cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        async with httpx2.AsyncClient(timeout=timeout, follow_redirects=False, cookies=no_cookies) as client:
            self._client = client
            try:
                while True:
                    async with connect_slots:
                        stamps = await self._load()
                    await self._until_changed(stamps)
            finally:
                self._client = None
                self.state = State.STOPPED

    async def _load(self) -> Stamps:
        """Load and convert the spec, and serve its tools; or say why not. The stamps of the
        local files to watch."""
        config = self.openapi
        self._reload = anyio.Event()
        watched = [] if is_web_url(config.spec) else [config.spec]
        ready = await self._loaded()
        if isinstance(ready, SpecError):
            self._refuse(str(ready))
            return _stamps(watched)
        if isinstance(ready, Exception):  # a spec the converter fails on must not take the gateway down
            logger.error("server %r: converting %s failed", self.name, config.written, exc_info=ready)
            self._refuse(f"{config.written}: cannot be converted ({type(ready).__name__}: {ready})")
            return _stamps(watched)
        self._report(ready.conversion)
        self._routes = ready.routes
        self.known_hints = ready.known_hints
        logger.info(
            "server %r: %d operations of %s served as tools", self.name, len(ready.tools), config.written
        )
        self._served_at = time.time()
        self.serve(ready.tools)
        return _stamps(list(ready.files) or watched)

    async def _loaded(self) -> Ready | Exception:
        """What the spec gives, made in a worker thread; or why it could not be made. A first
        load that takes a while shows as `loading` meanwhile."""
        self.load_progress = None
        abandoned = threading.Event()

        def progressed(done: int, total: int) -> None:
            """From the worker thread: one name rebound to a new tuple, which the loop only reads.
            A load nobody waits for any more (the gateway stopped) ends at the next operation,
            so a stopping process is not held up by a thread converting a large spec."""
            if abandoned.is_set():
                raise LoadAbandoned
            self.load_progress = (done, total)

        async with anyio.create_task_group() as tg:
            if self.state is not State.READY:  # a new version of a served spec: the old one serves on
                tg.start_soon(self._loading_after, LOADING_AFTER_SECONDS)
            try:
                ready: Ready | Exception = await anyio.to_thread.run_sync(
                    partial(_ready, self.openapi, progressed), abandon_on_cancel=True
                )
            except Exception as exc:
                ready = exc
            finally:
                abandoned.set()
            tg.cancel_scope.cancel()
        self.load_progress = None
        return ready

    async def _loading_after(self, delay: float) -> None:
        await anyio.sleep(delay)
        self.state = State.LOADING
        logger.info("server %r: loading %s (its tools follow when ready)", self.name, self.openapi.written)
        # Counts as started: nobody waits for it. Its tools arrive with a tool-list change.
        self.first_attempt_done.set()

    def _refuse(self, reason: str) -> None:
        """The spec (or its new version) cannot be served: keep serving the last good version's
        tools if there is one, else stop; say why either way."""
        if self.state is not State.READY:
            self._stop(f"{reason} (this server is skipped until that is fixed)")
            return
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._served_at))
        self.last_error = (
            f"its new version was refused: {reason}; the {len(self.tools)} tools of the version "
            f"loaded at {since} are served until the spec is fixed"
        )
        logger.error("server %r: %s", self.name, self.last_error)

    def _stop(self, reason: str) -> None:
        self.last_error = reason
        logger.error("server %r skipped: %s", self.name, self.last_error)
        self._routes = MappingProxyType({})
        self.known_hints = MappingProxyType({})
        self.tools = []
        self.state = State.STOPPED
        self.listener.downstream_changed(self)
        self.first_attempt_done.set()

    async def _until_changed(self, stamps: Stamps) -> None:
        """Return when a watched file changed or a reload was asked for (a spec at a URL that
        failed is also tried again after a while)."""
        retry_at = anyio.current_time() + RETRY_INTERVAL if self.state is State.STOPPED else None
        reload = self._reload
        while True:
            with anyio.move_on_after(WATCH_INTERVAL):
                await reload.wait()
                return
            if stamps and _stamps(list(stamps)) != stamps:
                return
            if retry_at is not None and not stamps and anyio.current_time() >= retry_at:
                return

    def _report(self, conversion: Conversion) -> None:
        """Say at start what will not work as the person may expect: skipped operations,
        security schemes without a value."""
        if conversion.skipped:
            listed = "; ".join(f"{s.method.upper()} {s.path}: {s.reason}" for s in conversion.skipped[:20])
            more = f" (and {len(conversion.skipped) - 20} more)" if len(conversion.skipped) > 20 else ""
            logger.warning(
                "server %r: %d operations skipped: %s%s", self.name, len(conversion.skipped), listed, more
            )
        if not self.openapi.base_url:  # the warnings are about the spec's servers, which baseUrl replaces
            for warning in conversion.warnings:
                logger.warning("server %r: %s", self.name, warning)
        for credential in self.openapi.missing_credentials:
            logger.warning(
                "server %r: security scheme %r has no value: environment variable %s is not set; "
                "calls needing it are sent without it",
                self.name,
                credential.scheme,
                credential.variable,
            )
        for credential in self.openapi.credentials:
            if credential.scheme not in conversion.security_schemes:
                known = ", ".join(conversion.security_schemes) or "none"
                logger.warning(
                    "server %r: 'auth' names security scheme %r, which the spec does not define (it has: %s)",
                    self.name,
                    credential.scheme,
                    known,
                )

    # -- answering a call ----------------------------------------------------------------------
    async def answer(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        route = self._routes.get(name)
        if route is None or self._client is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        given = arguments or {}
        problem = next(iter(sorted(route.validator.iter_errors(given), key=lambda e: list(e.path))), None)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "arguments"
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Invalid arguments for {name}: {where}: {problem.message}. Nothing was sent.",
            )
        config = self.openapi
        try:
            request = prepare(
                route.operation,
                given,
                base_url=route.base_url,
                headers=config.headers,
                credentials=route.credentials,
            )
        except CallRefused as exc:
            raise MCPError(code=INVALID_PARAMS, message=f"{name}: {exc}") from None
        with anyio.move_on_after(config.timeout * REQUEST_DEADLINE_SHARE):
            try:
                result = await send(
                    self._client,
                    request,
                    max_bytes=config.max_response_bytes,
                    output=route.output,
                )
            except (httpx2.HTTPError, httpx2.InvalidURL, ValueError) as exc:
                cause = str(exc) or type(exc).__name__
                return error(config.redact(f"{request.shown} failed: {cause}"))
            return _redacted(result, config) if result.get("isError") else result
        return error(
            config.redact(
                f"{request.shown} did not answer within {config.timeout:g}s (the server's 'timeout' setting)"
            )
        )


@dataclass(frozen=True)
class Ready:
    """What a loaded spec gives the source: everything it serves, made off the event loop."""

    files: tuple[str, ...]
    conversion: Conversion
    routes: Mapping[str, Route]
    tools: list[dict[str, Any]]
    known_hints: Mapping[str, Mapping[str, KnownHint]]


def _ready(config: OpenApiConfig, progress: Callable[[int, int], None] | None = None) -> Ready:
    """In a worker thread: load and convert the spec, and make what serving it takes.
    `progress` hears (done, total) operations as they are converted."""
    spec = load_spec(config.spec, timeout=config.timeout, limits=config.spec_limits)
    conversion = convert(
        spec,
        include=_selection(config.include),
        exclude=_selection(config.exclude),
        open_world=config.open_world,
        progress=progress,
    )
    routes = _routes(config, conversion, _base_url(config, conversion))
    return Ready(
        files=spec.files,
        conversion=conversion,
        routes=MappingProxyType(routes),
        tools=[_served_tool(route.operation) for route in routes.values()],
        known_hints=MappingProxyType({name: _known_hints(r.operation, config) for name, r in routes.items()}),
    )


def _routes(config: OpenApiConfig, conversion: Conversion, base_url: str) -> dict[str, Route]:
    schemes = conversion.security_schemes
    usable = tuple((schemes[c.scheme], c) for c in config.credentials if c.scheme in schemes and c.value)
    routes: dict[str, Route] = {}
    for operation in conversion.operations:
        output = operation.tool.get("outputSchema")
        routes[operation.tool_name] = Route(
            operation=operation,
            base_url=base_url,
            credentials=_credentials_for(operation, usable),
            validator=_validator(operation.tool.get("inputSchema") or {"type": "object"}),
            output=_validator(output) if output is not None else None,
        )
    return routes


def _selection(written: OperationFilter | None) -> Selection | None:
    if written is None:
        return None
    return Selection(operation_ids=written.operation_ids, tags=written.tags, methods=written.methods)


def _base_url(config: OpenApiConfig, conversion: Conversion) -> str:
    if config.base_url:
        return config.base_url
    if not conversion.servers:
        why = f" ({'; '.join(conversion.warnings)})" if conversion.warnings else ""
        raise SpecError(
            f"{config.written}: the spec names no http(s) server to send requests to{why}; "
            "set 'baseUrl' in the server entry"
        )
    url = conversion.servers[0]
    if not is_web_url(url):
        raise SpecError(
            f"{config.written}: its server {url!r} is not an http:// or https:// URL; "
            "toolkeeper sends HTTP requests only (set 'baseUrl' to the API's http(s) address)"
        )
    refusal = unsafe_server(url, config)
    if refusal is not None:
        raise SpecError(f"{config.written}: {refusal}")
    return url.rstrip("/")


def _validator(schema: Mapping[str, Any]) -> Any:
    """A validator of `schema`: JSON Schema 2020-12 unless it names another draft."""
    validator_type = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return validator_type(dict(schema))


def _credentials_for(
    operation: Operation, usable: tuple[tuple[SecurityScheme, Credential], ...]
) -> tuple[tuple[SecurityScheme, Credential], ...]:
    """The credentials a call of `operation` sends: those of the first of its security
    requirements all of whose schemes have a value (one that needs no scheme comes last);
    none when it needs none. Nothing is sent for a scheme without a value."""
    by_name = {scheme.name: (scheme, credential) for scheme, credential in usable}
    for requirement in sorted(operation.security, key=lambda names: not names):
        if all(name in by_name for name in requirement):
            return tuple(by_name[name] for name in requirement)
    return ()


def _served_tool(operation: Operation) -> dict[str, Any]:
    """The tool as clients get it: its annotations only what the spec itself declares
    (`x-mcp-annotations`); what the method says reaches the listing as the source `method`."""
    tool = dict(operation.tool)
    tool["name"] = operation.tool_name
    written = tool.get("annotations")
    annotations = {k: v for k, v in (written or {}).items() if k not in HINT_NAMES}
    annotations.update({k: v for k, v in operation.declared_hints.items() if k in HINT_NAMES})
    if annotations:
        tool["annotations"] = annotations
    else:
        tool.pop("annotations", None)
    return tool


def _known_hints(operation: Operation, config: OpenApiConfig) -> Mapping[str, KnownHint]:
    """What the method says of the operation, and the entry's `openWorld`."""
    method = operation.method.upper()
    meaning = METHOD_MEANING.get(method, "an HTTP method")
    reason = f"known from the HTTP method {method}, which {meaning}; reliable whatever the server's trust"
    known = {
        hint: KnownHint(bool(value), reason)
        for hint, value in operation.method_hints.items()
        if hint in HINT_NAMES and hint != "openWorldHint"
    }
    setting = "true, the default" if config.open_world else "false"
    known["openWorldHint"] = KnownHint(
        config.open_world, f"the 'openWorld' setting of server '{config.name}' ({setting})"
    )
    return MappingProxyType(known)


def _stamps(paths: list[str]) -> Stamps:
    out: Stamps = {}
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            out[path] = None
        else:
            out[path] = (stat.st_mtime_ns, stat.st_size)
    return out


def _redacted(result: dict[str, Any], config: OpenApiConfig) -> dict[str, Any]:
    """An error result without the source's secrets (an API may echo a key back)."""
    return {
        **result,
        "content": [{**part, "text": config.redact(str(part.get("text", "")))} for part in result["content"]],
    }
