"""One supervised, persistent connection to one downstream MCP server.

The supervisor connects (in whichever protocol era the server speaks), lists the tools (and the
resources, resource templates and prompts of a server that offers them), keeps the session open
for every client of the gateway, refreshes a list when the server says it changed, and
reconnects with exponential backoff when the connection is lost. The last known lists are kept
while the server is away, so its tools keep their names and a call to one of them gets an
answer that says what is going on.

What the server sends on its own (its requests for sampling, elicitation or roots, its log
messages, resource updates) goes to the `DownstreamListener`: this layer does not know the
gateway's clients.
"""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from contextlib import nullcontext
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, TypeAdapter, ValidationError

from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.accounts import AccountConnections, OnBehalfOf
from toolkeeper.downstreams.base import (
    RAW,
    CallTimedOut,
    ConnectionsForClients,
    DownstreamListener,
    Era,
    ProgressCallback,
    ServerInput,
    State,
    Unavailable,
)
from toolkeeper.downstreams.client_connections import ClientConnections, ForOneClient
from toolkeeper.downstreams.lists import CHANGED_LISTS, LISTS, ServerLists
from toolkeeper.downstreams.raw import LaneDeclined, LinkClosed, RawLane
from toolkeeper.downstreams.signin.auth import SignedInAuth, bearer_header, sign_in_needed
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, calling_account
from toolkeeper.downstreams.status import SourceStatus
from toolkeeper.downstreams.subscriptions import Subscriptions
from toolkeeper.downstreams.transports import SignedInRequests, open_transport
from toolkeeper.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LOG_LEVEL_META,
    METHOD_NOT_FOUND,
    RESOLUTION_EXTENSION,
    error_response,
    forwardable_meta,
)
from toolkeeper.sdk_private import send_unvalidated

logger = logging.getLogger(__name__)

# A downstream resolution is a preflight: it must never hold up a decision for long.
RESOLVE_TIMEOUT = 5.0
# What the SDK's server says when a tool asks through its session on the 2026-07-28 wire.
NO_BACK_CHANNEL = "no back-channel for server-initiated requests"
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 30.0
CONNECT_TIMEOUT = 30.0
CLOSED_BY_SERVER = "connection closed by the server"
RECONNECT_ASKED = "reconnecting: a person asked for it"
LISTEN_RETRY_SECONDS = 1.0
SERVER_INPUT: TypeAdapter[ServerInput] = TypeAdapter(ServerInput)


class McpConnection(SourceStatus):
    config: ServerConfig

    def __init__(
        self,
        config: ServerConfig,
        listener: DownstreamListener,
        sign_ins: SignIns | None = None,
        *,
        account: str = SHARED_ACCOUNT,
        for_one_client: bool = False,
    ) -> None:
        """`sign_ins`: the gateway's signed-in accounts, for a server that signs in (its requests
        carry `account`'s token). `for_one_client`: this is one of the server's connections for
        one client at a time (it opens none of its own)."""
        super().__init__(config)
        self._lists = ServerLists(config)
        self.server_info: dict[str, Any] | None = None
        # The number of the connection attempt under way or next (counted from 1 again once the
        # server was ready), whether it is under way, and when the next one starts (None while
        # one is under way or the lost connection is still being closed).
        self.attempt = 1
        self._attempting = False
        self._backoff = INITIAL_BACKOFF
        self._next_attempt_at: float | None = None
        self._listener = listener
        self._client: Client | None = None
        # The raw lane while connected (None for SSE servers).
        self._link: RawLane | None = None
        self._lost = anyio.Event()
        # Set to skip the wait before the next attempt (a person asked to reconnect now).
        self._reconnect_now = anyio.Event()
        self._subscriptions = Subscriptions(self, timeout=config.timeout)
        # The log level last asked of a handshake-era server (None: never asked).
        self.log_level: str | None = None
        # `"protocol": "auto"`: a server is spoken to in the handshake era if it speaks it. There
        # everything every SDK's servers do works, their own requests during a call included (many
        # SDK 2.x servers ask through the session, which has no back-channel on the 2026-07-28
        # wire), and its calls take the raw lane over stdio and HTTP alike. A server that refuses
        # the era it was asked in is asked in the other on the next attempt; one reached in
        # 2026-07-28 that asks through its session anyway is moved back (`_needs_back_channel`).
        self._handshake_first = True
        self._sign_ins = sign_ins if config.sign_in is not None and config.transport != "stdio" else None
        self.account = account
        # The connection's auth, and whether the server refused this account's requests (its
        # token, or the lack of one) since the attempt began.
        self._auth: SignedInAuth | None = None
        self._sign_in_refused = False
        # Per principal: this connection lists and takes its own account's calls; each other
        # account's calls go over a connection of that account's.
        self._accounts: AccountConnections | None = None
        if self._sign_ins is not None:
            self._sign_ins.track(config)
            self._sign_ins.subscribe(self._account_changed)
            if (
                config.sign_in is not None
                and config.sign_in.mode == "perPrincipal"
                and account == SHARED_ACCOUNT
            ):
                self._accounts = AccountConnections(config.name, self._account_connection)
        # More connections to the server, each for one client at a time (see client_connections.py);
        # a per-principal server's accounts have a connection each already.
        self._for_clients: ClientConnections | None = None
        if not for_one_client and self._accounts is None and account == SHARED_ACCOUNT:
            self._for_clients = ClientConnections(config.name, self._client_connection)

    # ------------------------------------------------------------------ status
    @property
    def sign_ins(self) -> SignIns | None:
        """The gateway's signed-in accounts where this server signs in; None where it does not."""
        return self._sign_ins

    @property
    def era(self) -> Era | None:
        if self.protocol_version is None:
            return None
        return Era.MODERN if self.protocol_version in MODERN_PROTOCOL_VERSIONS else Era.LEGACY

    @property
    def client_connections(self) -> ConnectionsForClients | None:
        return self._for_clients

    @property
    def may_ask_client(self) -> bool:
        # A 2026-07-28 server's questions come back inside its result; until the era is known,
        # the server may turn out to be a handshake-era one.
        return self.era is not Era.MODERN

    def describe_unavailable(self) -> str:
        if self.state is State.NEEDS_SIGN_IN:
            return str(sign_in_needed(self.name, self.account))
        reason = f" (last error: {self.last_error})" if self.last_error else ""
        if self.state is State.STARTING:
            return f"server '{self.name}' is still starting{reason}; try again in a moment"
        if self.state is State.STOPPED:
            return f"server '{self.name}' is stopped{reason}"
        if self.state is State.READY:
            # Ready, yet no session: a call that raced the session being set up or torn down.
            return f"server '{self.name}' has no open session at this moment{reason}; try again"
        if self._attempting:
            when = f"attempt {self.attempt} under way"
        else:
            next_at = self._next_attempt_at
            wait = self._backoff if next_at is None else next_at - time.monotonic()
            when = f"attempt {self.attempt}, next in {max(wait, 0):.1f}s"
        what = "lost its connection and is reconnecting" if self.connects else "could not connect yet"
        return (
            f"server '{self.name}' {what} ({when}): {self.last_error or 'no reason known'}. "
            "Its tools come back when it connects; `toolkeeper servers` shows its state."
        )

    # The server's lists as last fetched, kept while it is away.
    @property
    def tools(self) -> list[dict[str, Any]]:
        return self._lists.tools

    @property
    def resources(self) -> list[dict[str, Any]]:
        return self._lists.resources

    @property
    def resource_templates(self) -> list[dict[str, Any]]:
        return self._lists.resource_templates

    @property
    def prompts(self) -> list[dict[str, Any]]:
        return self._lists.prompts

    # -------------------------------------------------------------- supervisor
    async def run(self, connect_slots: anyio.CapacityLimiter) -> None:
        """Supervise the connection (and, per principal, its accounts' connections) until cancelled."""
        if self._accounts is None and self._for_clients is None:
            await self._supervise(connect_slots)
            return
        async with anyio.create_task_group() as tg:
            for more in (self._accounts, self._for_clients):
                if more is not None:
                    await tg.start(more.run, connect_slots)
            await self._supervise(connect_slots)

    async def _supervise(self, connect_slots: anyio.CapacityLimiter) -> None:
        try:
            while True:
                self._lost = anyio.Event()
                self._reconnect_now = anyio.Event()
                self._lists.clear_dirty()
                self._next_attempt_at = None
                self._attempting = True
                self._sign_in_refused = False
                connects_before = self.connects
                try:
                    await self._serve_one_connection(connect_slots)
                    self.last_error = self.last_error or CLOSED_BY_SERVER
                except Exception as exc:  # any failure of one connection is retried, never fatal
                    self._connection_failed(exc)
                finally:
                    self._client = None
                    self._attempting = False
                    self.first_attempt_done.set()
                if self._sign_in_refused:
                    await self._wait_for_sign_in()
                    continue
                if self.connects == connects_before:
                    self.attempt += 1
                backoff = self._backoff
                self._next_attempt_at = time.monotonic() + backoff
                self._set_state(State.RECONNECTING)
                logger.info("server %r: reconnecting in %.1fs", self.name, backoff)
                with anyio.move_on_after(backoff):
                    await self._reconnect_now.wait()
                asked = self._reconnect_now.is_set()
                self._backoff = INITIAL_BACKOFF if asked else min(backoff * 2, MAX_BACKOFF)
        finally:
            self._client = None
            self.state = State.STOPPED
            if self._sign_ins is not None:
                self._sign_ins.unsubscribe(self._account_changed)

    def _listing_account(self, sign_ins: SignIns) -> str:
        """Per principal, the account the server's own connection lists with: the gateway's, or
        else the first that signed in."""
        if sign_ins.current(self.name, SHARED_ACCOUNT) is not None:
            return SHARED_ACCOUNT
        return next(iter(sign_ins.accounts_of(self.name)), SHARED_ACCOUNT)

    def _account_connection(self, account: str) -> McpConnection:
        return McpConnection(self.config, OnBehalfOf(self, self._listener), self._sign_ins, account=account)

    def _client_connection(self) -> McpConnection:
        return McpConnection(
            self.config,
            ForOneClient(self._listener),
            self._sign_ins,
            account=self.account,
            for_one_client=True,
        )

    async def _call_as(
        self, account: str, name: str, arguments: dict[str, Any] | None, **how: Any
    ) -> dict[str, Any]:
        """A call of another account than this connection's, over that account's connection."""
        assert self._accounts is not None and self._sign_ins is not None
        if self._sign_ins.current(self.name, account) is None:
            raise sign_in_needed(self.name, account)
        connection = await self._accounts.connection(account)
        if connection.state is State.NEEDS_SIGN_IN:
            raise sign_in_needed(self.name, account)
        return await connection.call_tool(name, arguments, **how)

    def _connection_failed(self, exc: Exception) -> None:
        if self._sign_in_refused:  # the server's 401, which the SDK's transport reports as an error
            logger.debug(
                "server %r: the connection ended on a refused sign-in (%s)", self.name, type(exc).__name__
            )
            return
        self.last_error = _explain(exc, self.config)
        logger.warning("server %r: %s", self.name, self.last_error)
        if self.config.protocol == "auto" and self.connected_since is None and _refused(exc):
            self._handshake_first = not self._handshake_first
            era = "handshake era" if self._handshake_first else "2026-07-28 era"
            logger.info("server %r: trying the %s next", self.name, era)

    async def _wait_for_sign_in(self) -> None:
        """Wait, without retrying, until the account signs in (or a person asks to reconnect)."""
        self.last_error = str(sign_in_needed(self.name, self.account))
        self._backoff = INITIAL_BACKOFF
        self.attempt = 1
        logger.info("server %r: %s", self.name, self.last_error)
        self._set_state(State.NEEDS_SIGN_IN)
        await self._reconnect_now.wait()

    def _account_changed(self, server: str, account: str) -> None:
        """`SignIns` says an account signed in or was forgotten."""
        if server != self.name or self._sign_ins is None:
            return
        signed_in = self._sign_ins.current(server, account) is not None
        if account != self.account:
            if self._accounts is None:
                return
            if not signed_in:
                self._accounts.close(account)
                return
        if signed_in and self.state is State.NEEDS_SIGN_IN:
            self._reconnect_now.set()
        elif not signed_in and self._client is not None and self._auth is not None and self._auth.sent_token:
            # Signed out: the open session is the account's; the next connection asks again.
            self.last_error = "the account signed out"
            self._lost.set()

    def _refused_sign_in(self) -> None:
        """The server refused this account's requests and no renewal helped."""
        self._sign_in_refused = True
        if self._sign_ins is not None:
            self._sign_ins.note_open(self.name, self.account, False)
        self._lost.set()

    def _signed_in_requests(self) -> SignedInRequests | None:
        if self._sign_ins is None:
            return None
        if self._accounts is not None:
            self.account = self._listing_account(self._sign_ins)
        self._auth = SignedInAuth(self._sign_ins, self.config, self.account, self._refused_sign_in)
        return SignedInRequests(self._auth, bearer_header(self._sign_ins, self.name, self.account))

    async def _serve_one_connection(self, connect_slots: anyio.CapacityLimiter) -> None:
        # The deadline covers the handshake and the first tool list only; it is lifted once ready.
        # (A scope, not fail_after around __aenter__: the client's task groups must nest inside it.)
        with anyio.CancelScope(deadline=anyio.current_time() + CONNECT_TIMEOUT) as handshake:
            await connect_slots.acquire()
            holding_slot = True
            try:
                signed_in = self._signed_in_requests()
                async with open_transport(self.config, self._lost, signed_in) as (
                    read_stream,
                    write_stream,
                    link,
                ):
                    client = Client(
                        nullcontext((read_stream, write_stream)),
                        mode=self._connect_mode(),
                        message_handler=self._on_message,
                        cache=None,
                        extensions=[ToolResolution()],
                        # The gateway can pass these on to the client whose call caused them, so it
                        # offers them.
                        sampling_callback=self._ask_client,
                        elicitation_callback=self._ask_client,
                        list_roots_callback=self._ask_client_for_roots,
                        logging_callback=self._on_log,
                    )
                    async with client:
                        capabilities = client.server_capabilities
                        self.capabilities = (
                            capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
                            if capabilities
                            else {}
                        )
                        lists = await self._lists.fetch_offered(client, self.capabilities)
                        connect_slots.release()
                        holding_slot = False
                        handshake.deadline = math.inf
                        self._link = link
                        if link is not None:
                            link.on_notification = self._on_raw_notification
                            link.on_request = self._on_raw_request
                        try:
                            await self._serve_ready(client, lists)
                        finally:
                            self._link = None
            finally:
                if holding_slot:
                    connect_slots.release()
        if handshake.cancelled_caught:
            raise TimeoutError

    def _connect_mode(self) -> str:
        if self.config.protocol == "legacy" or (self.config.protocol == "auto" and self._handshake_first):
            return "legacy"
        # A 2026-07-28 version is reached through `server/discover` too: a pinned version would
        # skip it and leave the server's capabilities unknown.
        return "auto"

    async def _serve_ready(self, client: Client, lists: dict[str, list[dict[str, Any]]]) -> None:
        self.protocol_version = client.protocol_version
        info = client.server_info
        self.server_info = info.model_dump(mode="json", exclude_none=True) if info else None
        self.instructions = client.instructions
        self.connects += 1
        self.attempt = 1
        if self._sign_ins is not None and self._auth is not None and not self._auth.sent_token:
            self._sign_ins.note_open(self.name, self.account, True)
        self._attempting = False
        self.connected_since = time.monotonic()
        self.last_error = None
        self._lists.store(lists)
        self._client = client
        self.log_level = None
        logger.info(
            "server %r: ready (%s, protocol %s, %s)",
            self.name,
            self.era,
            self.protocol_version,
            ", ".join(f"{len(entries)} {kind}" for kind, entries in lists.items()),
        )
        self._set_state(State.READY)
        self.first_attempt_done.set()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._refresh_when_dirty, client)
                if self.era is Era.MODERN:
                    tg.start_soon(self._listen_for_changes, client)
                elif self._subscriptions.uris:
                    # Subscriptions made before a reconnect are renewed on the new session.
                    tg.start_soon(self._subscriptions.renew)
                await self._lost.wait()
                tg.cancel_scope.cancel()
            self._connection_lost()
        except Exception:
            self._connection_lost()
            raise
        finally:
            self._client = None

    def reconnect(self) -> None:
        """Close the session (the server's process too, over stdio) and connect again at once, the
        backoff started over; while waiting to reconnect, stop waiting. An attempt already under
        way is left to finish: it is the reconnection asked for."""
        if self._attempting or self.state is State.STOPPED:
            return
        logger.info("server %r: reconnecting now, as asked", self.name)
        self._backoff = INITIAL_BACKOFF
        if self._client is not None:
            self.last_error = RECONNECT_ASKED
            self._lost.set()
        self._reconnect_now.set()

    def _connection_lost(self) -> None:
        """Say so at once: closing the old session and its process can take seconds, and a call
        meanwhile must not read that the server is ready."""
        self._client = None
        self.last_error = self.last_error or CLOSED_BY_SERVER
        # A connection that served for a while starts the backoff over; a flapping one does not.
        if self.connected_since is not None and time.monotonic() - self.connected_since > MAX_BACKOFF:
            self._backoff = INITIAL_BACKOFF
        self._set_state(State.RECONNECTING)

    async def _on_message(self, message: Any) -> None:
        kinds = CHANGED_LISTS.get(type(message))
        if kinds:
            self._lists.mark_dirty(*kinds, announced=True)
        elif isinstance(message, types.ResourceUpdatedNotification):
            await self._listener.resource_updated(self, message.params.uri)

    async def _on_raw_notification(self, message: dict[str, Any]) -> None:
        """A notification that came with a raw-lane answer: a log message reaches the gateway as
        through the SDK; others (lists, resources) arrive on the change subscription."""
        if message.get("method") != "notifications/message":
            return
        try:
            params = types.LoggingMessageNotificationParams.model_validate(message.get("params"))
        except ValidationError:
            logger.warning("server %r sent a malformed log message: %.200r", self.name, message)
            return
        await self._on_log(params)

    async def _on_raw_request(self, message: dict[str, Any]) -> dict[str, Any]:
        """A request the server sent on a raw call's own stream: the gateway answers it as it
        answers those that reach the SDK's session; the whole JSON-RPC response."""
        request_id = message["id"]
        method = message.get("method")
        if method == "ping":
            return {"jsonrpc": "2.0", "id": request_id, "result": {}}
        try:
            request = SERVER_INPUT.validate_python({"method": method, "params": message.get("params")})
        except ValidationError as exc:
            known = method in {"sampling/createMessage", "elicitation/create", "roots/list"}
            code, problem = (INVALID_PARAMS, f"invalid params: {exc}") if known else (METHOD_NOT_FOUND, "")
            return error_response(request_id, code, problem or f"toolkeeper does not answer {method!r}")
        answer = await self._listener.downstream_request(self, request)
        if isinstance(answer, types.ErrorData):
            return {"jsonrpc": "2.0", "id": request_id, "error": _wire(answer)}
        return {"jsonrpc": "2.0", "id": request_id, "result": _wire(answer)}

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        await self._listener.downstream_log(self, params)

    async def _ask_client(self, context: Any, params: Any) -> Any:
        request: ServerInput = (
            types.CreateMessageRequest(params=params)
            if isinstance(params, types.CreateMessageRequestParams)
            else types.ElicitRequest(params=params)
        )
        return await self._listener.downstream_request(self, request)

    async def _ask_client_for_roots(self, context: Any) -> Any:
        return await self._listener.downstream_request(self, types.ListRootsRequest())

    async def _refresh_when_dirty(self, client: Client) -> None:
        while True:
            changed = await self._lists.refresh(client, self._lost)
            if changed:
                self._listener.downstream_changed(self, changed)

    async def _listen_for_changes(self, client: Client) -> None:
        """Keep a `subscriptions/listen` stream open (modern servers announce changes only there),
        reopened whenever the set of subscribed resources changes. Its notifications reach
        `_on_message` like any other."""
        subscriptions = self._subscriptions
        while True:
            version = subscriptions.stream_opening()
            tools, prompts, resources = (
                _announces(client, kind) for kind in ("tools", "prompts", "resources")
            )
            uris = subscriptions.uris
            if not (tools or prompts or resources or uris):
                subscriptions.listening_for(version)
                await subscriptions.wait_for_change()
                continue
            try:
                async with client.listen(
                    tools_list_changed=tools,
                    prompts_list_changed=prompts,
                    resources_list_changed=resources,
                    resource_subscriptions=uris,
                ) as subscription:
                    subscriptions.listening_for(version)
                    # A change between the first listing and this subscription would be lost: look once.
                    self._lists.mark_dirty(*LISTS)
                    async with anyio.create_task_group() as tg:

                        async def drain() -> None:
                            async for _event in subscription:
                                pass
                            tg.cancel_scope.cancel()

                        tg.start_soon(drain)
                        await subscriptions.wait_for_change()
                        tg.cancel_scope.cancel()
                if not subscriptions.changed:
                    # The server ended the stream: open another, but not in a tight loop.
                    await anyio.sleep(LISTEN_RETRY_SECONDS)
            except Exception as exc:  # a server without a working listen stream still serves calls
                logger.info(
                    "server %r: no change subscription (%s); lists refreshed on reconnect",
                    self.name,
                    self.config.redact(str(exc)),
                )
                subscriptions.listening_for(version)
                await subscriptions.wait_for_change()

    def _set_state(self, state: State) -> None:
        changed = state is not self.state
        self.state = state
        if changed:
            self._listener.downstream_changed(self)

    # -------------------------------------------------------------------- calls
    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        meta: dict[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
        extra: dict[str, Any] | None = None,
        log_level: str | None = None,
    ) -> dict[str, Any]:
        """Forward one `tools/call`; returns the downstream's raw result.

        `extra` carries a modern retry's `inputResponses` and `requestState`; `log_level` is the
        level the caller wants this call's log messages at (a modern server is asked per call)."""
        if self._accounts is not None and (account := calling_account.get()) not in (
            self.account,
            SHARED_ACCOUNT,
        ):
            return await self._call_as(
                account, name, arguments, meta=meta, on_progress=on_progress, extra=extra, log_level=log_level
            )
        what = f"the call to '{name}'"
        with self._calls.stoppable(what) as call:
            try:
                result = await self._call_tool(name, arguments, meta, on_progress, extra, log_level)
            except MCPError as exc:
                self._needs_back_channel(name, exc.error.message)
                raise
            if result.get("isError") is True:
                self._needs_back_channel(name, json.dumps(result.get("content"), ensure_ascii=False))
            return result
        raise Unavailable(self._calls.shutting_down(what, call))

    def _needs_back_channel(self, name: str, error: str) -> None:
        """A server reached in 2026-07-28 under "auto" whose call failed because it tried to ask
        the client through its session: it is reconnected in the handshake era, where that works,
        and the caller is told to call again (the call may have done part of its work, so the
        gateway does not repeat it on its own)."""
        if self.config.protocol != "auto" or self.era is not Era.MODERN or NO_BACK_CHANNEL not in error:
            return
        self._handshake_first = True
        self._lost.set()
        logger.warning(
            "server %r: '%s' asked the client something through its session, which works only in "
            "the handshake era; reconnecting in that era",
            self.name,
            name,
        )
        raise MCPError(
            code=INTERNAL_ERROR,
            message=f"server '{self.name}' tried to ask the client something during '{name}', which it "
            "can do only in the handshake era; toolkeeper is reconnecting to it in that era: call the "
            "tool again in a moment",
        )

    async def _call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None,
        on_progress: ProgressCallback | None,
        extra: dict[str, Any] | None,
        log_level: str | None,
    ) -> dict[str, Any]:
        forwarded_meta = forwardable_meta(meta)
        if log_level is not None and self.era is Era.MODERN:
            forwarded_meta[LOG_LEVEL_META] = log_level
        params: dict[str, Any] = {"name": name, "arguments": arguments, **(extra or {})}
        link = self._link
        if (
            link is not None
            and on_progress is None
            and self.state is State.READY
            and (self.config.transport == "stdio" or self._raw_over_http(name))
        ):
            if self.era is Era.MODERN:
                forwarded_meta.update(link.stamp)
            if forwarded_meta:
                params["_meta"] = forwarded_meta
            if arguments is None:
                del params["arguments"]
            try:
                return await self._raw_request(link, "tools/call", params, f"'{name}'")
            except LaneDeclined as exc:
                logger.debug("server %r: %s on the raw lane; the call goes the SDK's way", self.name, exc)
                params.setdefault("arguments", arguments)
        elif forwarded_meta:
            params["_meta"] = forwarded_meta
        request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params))
        return await self.request(request, on_progress=on_progress)

    def _raw_over_http(self, name: str) -> bool:
        return name not in self._lists.header_bound

    async def _raw_request(
        self, link: RawLane, method: str, params: dict[str, Any], what: str
    ) -> dict[str, Any]:
        """One request on the raw lane: no request or result models are built."""
        try:
            response = await link.request(method, params, self.config.timeout)
        except TimeoutError:
            raise CallTimedOut(self._timed_out(what)) from None
        except LinkClosed:
            self._lost.set()
            raise Unavailable(f"server '{self.name}' closed the connection during {what}") from None
        except TypeError as exc:  # orjson: text that has no UTF-8 form (a lone surrogate), say
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"{what} was not sent to server '{self.name}': its params cannot be encoded ({exc})",
            ) from None
        error = response.get("error")
        if error is not None:
            raise MCPError.from_error_data(types.ErrorData.model_validate(error))
        result = response.get("result")
        return result if isinstance(result, dict) else {}

    def _timed_out(self, what: str) -> str:
        return (
            f"server '{self.name}' did not answer {what} within {self.config.timeout:g}s "
            "(its 'timeout' setting); it may still be working on it"
        )

    async def request(self, request: Any, *, on_progress: ProgressCallback | None = None) -> dict[str, Any]:
        """Forward one request (a call, or a request for resources, prompts, completion, logging)
        and return the downstream's raw result: fields the SDK's models do not know are kept."""
        what = (
            f"the call to '{request.params.name}'"
            if isinstance(request, types.CallToolRequest)
            else request.method
        )
        with self._calls.stoppable(what) as call:
            return await self._request(request, on_progress)
        raise Unavailable(self._calls.shutting_down(what, call))

    async def _request(self, request: Any, on_progress: ProgressCallback | None) -> dict[str, Any]:
        client = self._client
        if self.state is State.NEEDS_SIGN_IN or self._sign_in_refused:
            raise sign_in_needed(self.name, self.account)
        if client is None or self.state is not State.READY:
            raise Unavailable(self.describe_unavailable())
        what = f"'{request.params.name}'" if isinstance(request, types.CallToolRequest) else request.method
        try:
            return await client.session.send_request(  # type: ignore[type-var]  # RAW: see its comment
                request, RAW, request_read_timeout_seconds=self.config.timeout, progress_callback=on_progress
            )
        except MCPError as exc:
            if self._sign_in_refused:
                raise sign_in_needed(self.name, self.account) from None
            if exc.error.code == REQUEST_TIMEOUT:
                raise CallTimedOut(self._timed_out(what)) from None
            if exc.error.code == CONNECTION_CLOSED:
                self._lost.set()
                raise Unavailable(f"server '{self.name}' closed the connection during {what}") from None
            raise

    # ----------------------------------------------------------------- shutdown
    def stop_calls(self, reason: str) -> int:
        """The gateway is stopping (`reason`): refuse calls from now on and cancel those in
        flight; the server is told of each cancellation, and each caller gets an `Unavailable`
        that says the gateway is shutting down. How many were in flight (on its connections for
        one client too)."""
        stopped = self._calls.stop(reason)
        if self._for_clients is not None:
            stopped += self._for_clients.stop_calls(reason)
        return stopped

    @property
    def calls_in_flight(self) -> int:
        more = self._for_clients.calls_in_flight if self._for_clients is not None else 0
        return self._calls.count + more

    async def subscribe(self, uri: str) -> None:
        """Count one more subscriber to `uri`; the first one subscribes downstream."""
        await self._subscriptions.subscribe(uri)

    async def unsubscribe(self, uri: str) -> None:
        """One subscriber fewer; the last one unsubscribes downstream."""
        await self._subscriptions.unsubscribe(uri)

    async def set_log_level(self, level: str) -> None:
        """Ask a handshake-era server for log messages at `level` and above."""
        if self.era is not Era.LEGACY or "logging" not in self.capabilities or level == self.log_level:
            return
        params = types.SetLevelRequestParams.model_validate({"level": level})
        await self.request(types.SetLevelRequest(params=params))
        self.log_level = level

    async def roots_changed(self) -> None:
        """Tell the server (over its connections for one client too) that the roots changed."""
        if self._for_clients is not None:
            await self._for_clients.roots_changed()
        client = self._client
        if client is None or self.era is not Era.LEGACY:
            return
        with warnings.catch_warnings():  # roots are deprecated in 2026-07-28, not in this era
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            announce = client.session.send_roots_list_changed()
        await announce

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


class ToolResolution(ClientExtension):
    """Advertises the tool-resolution extension to downstream servers, so they mark resolvable tools."""

    identifier = RESOLUTION_EXTENSION


def _wire(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def _announces(client: Client, kind: str) -> bool:
    capability = getattr(client.server_capabilities, kind, None)
    return bool(capability and capability.list_changed)


def _refused(exc: BaseException) -> bool:
    """Whether a connection failed because the server answered with a protocol error (it may not
    speak the era it was asked in), not because it went away or said nothing."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_refused(e) for e in exc.exceptions)
    return isinstance(exc, MCPError) and exc.error.code != CONNECTION_CLOSED


def _explain(exc: BaseException, config: ServerConfig) -> str:
    """A person-readable reason for a failed connection (`last_error` removes the secrets)."""
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
