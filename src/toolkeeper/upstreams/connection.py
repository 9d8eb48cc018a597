"""One supervised, persistent connection to one downstream MCP server.

The supervisor connects (in whichever protocol era the server speaks), lists the tools, keeps
the session open for every client of the gateway, refreshes the tool list when the server says
it changed, and reconnects with exponential backoff when the connection is lost. The last known
tool list is kept while the server is away, so its tools keep their names and a call to one of
them gets an answer that says what is going on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from toolkeeper.config.model import ServerConfig
from toolkeeper.protocol import RESOLUTION_EXTENSION
from toolkeeper.upstreams.transports import open_transport

logger = logging.getLogger(__name__)

RAW = TypeAdapter(dict[str, Any])
CONNECTION_CLOSED = -32000
# A downstream resolution is a preflight: it must never hold up a decision for long.
RESOLVE_TIMEOUT = 5.0
REQUEST_TIMEOUT = -32001
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 30.0
CONNECT_TIMEOUT = 30.0
MAX_PAGES = 1000
# `_meta` keys the gateway's own client session owns on the downstream leg.
_RESERVED_META_PREFIX = "io.modelcontextprotocol/"

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]


class State(StrEnum):
    STARTING = "starting"
    READY = "ready"
    RECONNECTING = "reconnecting"
    STOPPED = "stopped"


class Unavailable(Exception):
    """The server cannot take calls right now; the message says why and what happens next."""


class CallTimedOut(Exception):
    pass


class Upstream:
    def __init__(self, config: ServerConfig, on_change: Callable[[Upstream], None]) -> None:
        self.config = config
        self.name = config.name
        self.state = State.STARTING
        self.tools: list[dict[str, Any]] = []
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] | None = None
        self.last_error: str | None = None
        self.connected_since: float | None = None
        self.connects = 0
        self.first_attempt_done = anyio.Event()
        self._on_change = on_change
        self._client: Client | None = None
        self._lost = anyio.Event()
        self._tools_dirty = anyio.Event()

    # ------------------------------------------------------------------ status
    @property
    def era(self) -> str | None:
        if self.protocol_version is None:
            return None
        return "modern" if self.protocol_version in MODERN_PROTOCOL_VERSIONS else "legacy"

    @property
    def available(self) -> bool:
        return self.state is State.READY

    def describe_unavailable(self) -> str:
        reason = f" (last error: {self.last_error})" if self.last_error else ""
        if self.state is State.STARTING:
            return f"server '{self.name}' is still starting{reason}; try again in a moment"
        if self.state is State.STOPPED:
            return f"server '{self.name}' is stopped{reason}"
        return (
            f"server '{self.name}' is {self.state.value}{reason}; toolkeeper retries with backoff and its "
            "tools come back when it does. `toolkeeper servers` shows its state."
        )

    # -------------------------------------------------------------- supervisor
    async def run(self, connect_slots: anyio.CapacityLimiter) -> None:
        """Supervise the connection until cancelled."""
        backoff = INITIAL_BACKOFF
        try:
            while True:
                self._lost = anyio.Event()
                self._tools_dirty = anyio.Event()
                attempt_started = time.monotonic()
                try:
                    await self._serve_one_connection(connect_slots)
                    self.last_error = self.last_error or "connection closed by the server"
                except Exception as exc:  # any failure of one connection is retried, never fatal
                    self.last_error = _explain(exc, self.config)
                    logger.warning("server %r: %s", self.name, self.last_error)
                finally:
                    self._client = None
                    self.first_attempt_done.set()
                # A connection that served for a while starts the backoff over; a flapping one does not.
                served_since = self.connected_since
                if (
                    served_since
                    and served_since >= attempt_started
                    and time.monotonic() - served_since > MAX_BACKOFF
                ):
                    backoff = INITIAL_BACKOFF
                self._set_state(State.RECONNECTING)
                logger.info("server %r: reconnecting in %.1fs", self.name, backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
        finally:
            self._client = None
            self.state = State.STOPPED

    async def _serve_one_connection(self, connect_slots: anyio.CapacityLimiter) -> None:
        client = Client(
            open_transport(self.config, self._lost),
            mode="auto",
            message_handler=self._on_message,
            cache=None,
            extensions=[_ToolResolution()],
        )
        # The deadline covers the handshake and the first tool list only; it is lifted once ready.
        # (A scope, not fail_after around __aenter__: the client's task groups must nest inside it.)
        with anyio.CancelScope(deadline=anyio.current_time() + CONNECT_TIMEOUT) as handshake:
            await connect_slots.acquire()
            holding_slot = True
            try:
                async with client:
                    tools = await self._fetch_tools(client)
                    connect_slots.release()
                    holding_slot = False
                    handshake.deadline = math.inf
                    await self._serve_ready(client, tools)
            finally:
                if holding_slot:
                    connect_slots.release()
        if handshake.cancelled_caught:
            raise TimeoutError

    async def _serve_ready(self, client: Client, tools: list[dict[str, Any]]) -> None:
        self.protocol_version = client.protocol_version
        info = client.server_info
        self.server_info = info.model_dump(mode="json", exclude_none=True) if info else None
        self.connects += 1
        self.connected_since = time.monotonic()
        self.last_error = None
        self.tools = tools
        self._client = client
        logger.info(
            "server %r: ready (%s, protocol %s, %d tools)",
            self.name,
            self.era,
            self.protocol_version,
            len(tools),
        )
        self._set_state(State.READY)
        self.first_attempt_done.set()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._refresh_when_dirty, client)
                if self.era == "modern" and _announces_tool_changes(client):
                    tg.start_soon(self._listen_for_changes, client)
                await self._lost.wait()
                tg.cancel_scope.cancel()
        finally:
            self._client = None

    async def _fetch_tools(self, client: Client) -> list[dict[str, Any]]:
        """The whole tool list as raw JSON (the SDK's models would drop unknown fields)."""
        tools: list[dict[str, Any]] = []
        names: set[str] = set()
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            page = await self._list_page(client, cursor)
            for tool in page.get("tools") or []:
                name = tool.get("name") if isinstance(tool, dict) else None
                if not isinstance(name, str) or not name:
                    logger.warning("server %r listed a tool without a name; ignored: %.200r", self.name, tool)
                elif name in names:
                    logger.warning("server %r listed tool %r twice; the first one is used", self.name, name)
                else:
                    names.add(name)
                    tools.append(tool)
            cursor = page.get("nextCursor")
            if not cursor or cursor in seen:
                break
            seen.add(cursor)
        return tools

    async def _list_page(self, client: Client, cursor: str | None) -> dict[str, Any]:
        request = types.ListToolsRequest(params=types.PaginatedRequestParams(cursor=cursor))
        try:
            return await client.session.send_request(
                request, RAW, request_read_timeout_seconds=self.config.timeout
            )
        except ValidationError as exc:
            # The SDK refuses a whole page for one bad field (a hint of "yes"); the gateway
            # treats such a field as absent instead (annotations/hints.py says which, per tool).
            problem = exc.errors()[0]
            logger.warning(
                "server %r: its tools/list does not follow the schema (%s at %s); reading it as plain JSON",
                self.name,
                problem["msg"],
                ".".join(str(p) for p in problem["loc"]),
            )
            params = request.model_dump(by_alias=True, mode="json", exclude_none=True).get("params")
            return await send_unvalidated(client, request.method, params, self.config.timeout)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools_dirty.set()

    async def _refresh_when_dirty(self, client: Client) -> None:
        while True:
            await self._tools_dirty.wait()
            self._tools_dirty = anyio.Event()
            try:
                tools = await self._fetch_tools(client)
            except MCPError as exc:
                logger.warning("server %r: refreshing its tool list failed: %s", self.name, exc)
                if exc.error.code == CONNECTION_CLOSED:
                    self._lost.set()
                continue
            if tools == self.tools:
                continue
            self.tools = tools
            logger.info("server %r: tool list changed (%d tools)", self.name, len(tools))
            self._on_change(self)

    async def _listen_for_changes(self, client: Client) -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                # A change between the first listing and this subscription would be lost: look once.
                self._tools_dirty.set()
                async for _event in subscription:
                    self._tools_dirty.set()
        except Exception as exc:  # a server without a working listen stream still serves calls
            logger.info(
                "server %r: no change subscription (%s); tool list refreshed on reconnect", self.name, exc
            )

    def _set_state(self, state: State) -> None:
        changed = state is not self.state
        self.state = state
        if changed:
            self._on_change(self)

    # -------------------------------------------------------------------- calls
    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        meta: dict[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Forward one `tools/call`; returns the downstream's raw result."""
        client = self._client
        if client is None or self.state is not State.READY:
            raise Unavailable(self.describe_unavailable())
        forwarded_meta = {k: v for k, v in (meta or {}).items() if not k.startswith(_RESERVED_META_PREFIX)}
        forwarded_meta.pop("progressToken", None)
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=name, arguments=arguments, _meta=forwarded_meta or None)
        )
        try:
            return await client.session.send_request(
                request,
                RAW,
                request_read_timeout_seconds=self.config.timeout,
                progress_callback=on_progress,
            )
        except MCPError as exc:
            if exc.error.code == REQUEST_TIMEOUT:
                raise CallTimedOut(
                    f"server '{self.name}' did not answer '{name}' within {self.config.timeout:g}s "
                    f"(its 'timeout' setting); the call may still be running there"
                ) from None
            if exc.error.code == CONNECTION_CLOSED:
                self._lost.set()
                raise Unavailable(
                    f"server '{self.name}' closed the connection during the call to '{name}'"
                ) from None
            raise

    async def resolve_hints(self, name: str, arguments: dict[str, Any], method: str) -> dict[str, Any]:
        """Ask the server for its own argument-specific hints (`tools/resolve` or
        `tools/annotations`); returns the `annotations` object. Raises on any failure."""
        client = self._client
        if client is None or self.state is not State.READY:
            raise Unavailable(self.describe_unavailable())
        timeout = min(self.config.timeout, RESOLVE_TIMEOUT)
        with anyio.fail_after(timeout):
            result = await send_unvalidated(client, method, {"name": name, "arguments": arguments}, timeout)
        annotations = result.get("annotations")
        if not isinstance(annotations, dict):
            raise ValueError(f"{method} answered without an annotations object: {result!r:.200}")
        return annotations


class _ToolResolution(ClientExtension):
    """Advertises the tool-resolution extension to downstream servers, so they mark resolvable tools."""

    identifier = RESOLUTION_EXTENSION


def _announces_tool_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return bool(tools and tools.list_changed)


def _explain(exc: BaseException, config: ServerConfig) -> str:
    """A person-readable reason for a failed connection."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        if leaves:
            return _explain(leaves[0], config)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {config.command!r} (check 'command' and PATH)"
    if isinstance(exc, PermissionError):
        return f"cannot run {config.command!r}: permission denied"
    if isinstance(exc, TimeoutError):
        return f"no answer to the handshake within {CONNECT_TIMEOUT:g}s"
    if isinstance(exc, MCPError):
        if exc.error.code == CONNECTION_CLOSED:
            return "the server closed the connection (did the process exit? its stderr is in the log)"
        return f"protocol error {exc.error.code}: {exc.error.message}"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


async def send_unvalidated(
    client: Client, method: str, params: dict[str, Any] | None, timeout: float
) -> dict[str, Any]:
    """A request whose result skips the SDK's models (a custom method, or a result the models
    would refuse). mcp 2.x has no public way to do that, so this uses the session's stamp and
    dispatcher, exactly as `ClientSession.send_request` does."""
    session = client.session
    data: dict[str, Any] = {"method": method}
    if params is not None:
        data["params"] = params
    options: Any = {"timeout": timeout}
    session._stamp(data, options)  # noqa: SLF001
    result = await session._dispatcher.send_raw_request(data["method"], data.get("params"), options)  # noqa: SLF001
    return result if isinstance(result, dict) else {}
