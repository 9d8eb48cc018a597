"""What passes between a client and a downstream server during and around a call, besides the
call itself: the server's requests for sampling, elicitation and roots, its log messages, and
resource updates.

A downstream server's connection is shared by every client of the gateway. In the handshake era
a server's request does not say which call it belongs to, so toolkeeper never guesses (see
server_calls.py): a request goes to the client whose calls are the only ones in flight on the
connection it came on. A client whose call meets another client's on a handshake-era server gets
a connection of its own to it (up to `maxClientConnections` at once, closed when idle); beyond
that, a request that comes while calls of several clients are in flight waits (up to
`PLACING_TIMEOUT`) until the others' calls have ended, and is refused only if they do not, and a
server that has asked something once has its calls taken in turns from then on.

The two protocol eras meet here:
- a handshake-era (legacy) client gets the server's request as a real request on its call's
  stream; a modern client gets it as an `InputRequiredResult` for its `tools/call`, retries,
  and the answer goes back to the waiting server (an `Exchange` keeps that call running between
  the client's rounds; the `requestState` that leads back to it is sealed to the client, the tool
  and the arguments);
- a modern server's `InputRequiredResult` is answered for a legacy client by asking it each
  embedded request, then retrying the call downstream with the answers; a modern client gets it
  as it is and retries through the gateway;
- a server that takes roots outside of calls gets what every client allows (roots.py): a legacy
  client is asked for its roots on its first call's stream, a modern client in its first call's
  result (`InputRequiredResult`, sealed like the others), before that call runs.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from toolkeeper.config.model import DEFAULT_CLIENT_CONNECTION_IDLE_SECONDS, DEFAULT_MAX_CLIENT_CONNECTIONS
from toolkeeper.downstreams.base import Downstream, Era, ProgressCallback, ServerInput
from toolkeeper.policy.binding import call_hash
from toolkeeper.protocol import (
    CAPABILITY_FOR_REQUEST,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LOG_LEVEL_META,
    METHOD_NOT_FOUND,
    MISSING_CAPABILITY,
    check_input_requests,
    undeclared_message,
)
from toolkeeper.relay.exchange import EXCHANGE_TIMEOUT, RESULT_TYPES, Exchange
from toolkeeper.relay.roots import ClientRoots
from toolkeeper.relay.seal import TokenSeal
from toolkeeper.relay.server_calls import Caller, Lane, ServerCalls, declares
from toolkeeper.sdk_private import connection_of

logger = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# The level and logger of the gateway's own word to a client about its call (see `tell_caller`).
WAITING_LOG_LEVEL: types.LoggingLevel = "warning"
GATEWAY_LOGGER = "toolkeeper"
# How many input rounds a modern server may ask of a legacy client for one call.
MAX_INPUT_ROUNDS = 10
ROOTS_ASK_TIMEOUT = 10.0
# How long a server's request that came while calls of several clients were in flight on its
# connection waits for the calls of all but one client to end (then it is that client's) before
# it is refused. Calls of several clients share a connection only beyond `maxClientConnections`
# (or where a server has no connections of one client each), and only until the server first
# asks: later ones take turns.
PLACING_TIMEOUT = 10.0
REQUEST_STATE_PREFIX = "toolkeeper:"
# The requestState and inputRequests key of the gateway's own roots question to a modern client.
ROOTS_STATE_PREFIX = "toolkeeper-roots:"
ROOTS_ANSWER_KEY = "toolkeeper.roots"
ROOTS_SUBJECT = "roots"

_REQUEST_TYPES: dict[str, Any] = {
    "sampling/createMessage": types.CreateMessageRequest,
    "elicitation/create": types.ElicitRequest,
    "roots/list": types.ListRootsRequest,
}


# Told that a downstream's state changed (no lists) or which of its lists changed.
OnDownstreamChanged = Callable[[Downstream, set[str]], None]


def is_modern(ctx: ServerRequestContext[Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _connection(ctx: ServerRequestContext[Any]) -> object:
    return connection_of(ctx.session)


def _declared(ctx: ServerRequestContext[Any], method: str) -> bool:
    return declares(ctx.session.client_capabilities, method)


@dataclass(eq=False)
class ForwardedCall:
    """One client's `tools/call` on its way to a downstream server: what each era's handler
    needs to run it, and to run it again (a retry with answers)."""

    ctx: ServerRequestContext[Any]
    downstream: Downstream
    calls: ServerCalls
    name: str
    arguments: Any
    meta: dict[str, Any]
    # The level the client wants the call's log messages at (None: not asked), and the level a
    # handshake-era server is asked for (the most verbose any client wants).
    level: str | None
    server_log_level: str | None
    on_progress: ProgressCallback | None
    session: str

    @property
    def digest(self) -> str:
        """The call (server, tool, arguments) a sealed retry must repeat."""
        return call_hash(self.downstream.name, self.name, self.arguments, "")

    @property
    def client_can_answer(self) -> bool:
        """Whether the client declared anything a server may ask of it during a call."""
        return any(_declared(self.ctx, method) for method in CAPABILITY_FOR_REQUEST)

    def legacy_caller(self) -> Caller:
        """A handshake-era client's call: its connection answers what the server asks, if it can."""
        return Caller(self.ctx, _connection(self.ctx) if self.client_can_answer else None)

    async def run(self, caller: Caller, extra: dict[str, Any]) -> dict[str, Any]:
        """One `tools/call` downstream (`extra`: a retry's answers), taking its turn on the server:
        while it runs, what the server sends (requests, logs) may go to `caller`."""
        connection = await self.calls.start(caller)
        try:
            if connection is not self.downstream and self.server_log_level is not None:
                await connection.set_log_level(self.server_log_level)
            return await connection.call_tool(
                self.name,
                self.arguments,
                meta=self.meta,
                on_progress=self.on_progress,
                extra=extra,
                log_level=self.level,
            )
        finally:
            self.calls.finish(caller)


# One pairing of client era and server era: runs the call, returns the client's result.
CallHandler = Callable[[ForwardedCall, dict[str, Any]], Awaitable[dict[str, Any]]]


class Relay:
    """The downstreams' listener: what a server sends reaches the client it is for, and a change
    to a server's state or lists goes to `on_changed` (the running gateway rebuilds its view)."""

    def __init__(
        self,
        bus: InMemorySubscriptionBus,
        on_changed: OnDownstreamChanged,
        *,
        max_client_connections: int = DEFAULT_MAX_CLIENT_CONNECTIONS,
        client_connection_idle_seconds: float = DEFAULT_CLIENT_CONNECTION_IDLE_SECONDS,
    ) -> None:
        """`max_client_connections`: per handshake-era server, how many connections of one client
        each may be in use at once, besides the server's own; each is closed once it has carried
        no call for `client_connection_idle_seconds`."""
        self.bus = bus
        self._max_client_connections = max_client_connections
        self._client_connection_idle_seconds = client_connection_idle_seconds
        self._on_changed = on_changed
        self._calls: dict[str, ServerCalls] = {}  # by server name
        self._exchanges: dict[str, Exchange] = {}  # by id
        self.seal = TokenSeal()
        self.roots = ClientRoots(self._roots_changed)
        # Per client connection (weakly: a departed client's entries disappear with it).
        self._log_levels: weakref.WeakKeyDictionary[object, tuple[Any, str]] = weakref.WeakKeyDictionary()
        self._subscribed: weakref.WeakKeyDictionary[object, tuple[Any, set[str]]] = (
            weakref.WeakKeyDictionary()
        )
        self._task_group: anyio.abc.TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the tasks that outlive a request (downstream calls waiting on a modern client)."""
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            tg.start_soon(self.roots.run)
            task_status.started()
            await anyio.sleep_forever()

    def downstream_changed(self, downstream: Downstream, lists: set[str] | None = None) -> None:
        self._on_changed(downstream, lists or set())

    def calls_on(self, downstream: Downstream) -> ServerCalls:
        calls = self._calls.get(downstream.name)
        if calls is None:
            calls = self._calls[downstream.name] = ServerCalls(
                downstream,
                max_client_connections=self._max_client_connections,
                idle_seconds=self._client_connection_idle_seconds,
            )
        return calls

    def roots_changed_by(self, session: ServerSession) -> None:
        """A handshake-era client said its roots changed: it is asked again on its next call."""
        self.roots.forget(session)

    async def _learn_roots(self, ctx: ServerRequestContext[Any]) -> None:
        """Ask a client its roots on the stream of its own call (a request outside of any call
        may have no way to reach an HTTP client)."""
        try:
            with anyio.fail_after(ROOTS_ASK_TIMEOUT):
                answer = await self._send_to_client(ctx, types.ListRootsRequest())
            roots = answer.get("roots")
            valid = isinstance(roots, list) and all(isinstance(r, dict) and "uri" in r for r in roots)
            if not valid:
                raise ValueError(f"not a roots list: {answer!r:.200}")
        except Exception as exc:
            logger.warning("a client declared roots but did not list them (%r); counted as none", exc)
            roots = None
        await self.roots.learn(ctx.session, roots)

    async def _roots_known(self, ctx: ServerRequestContext[Any], session: str) -> bool:
        """Whether the calling client's roots count for what servers get: a handshake-era client
        not asked yet is asked now, on its call's stream; a modern client can only be asked in its
        call's result (False)."""
        if is_modern(ctx):
            return self.roots.knows_modern(session)
        if not self.roots.knows(ctx.session):
            await self._learn_roots(ctx)
        return True

    def _ask_modern_roots(self, session: str, digest: str) -> dict[str, Any]:
        """The result that asks a modern client for its roots; its retry of the same call
        answers (see `_take_modern_roots`)."""
        token = self.seal.issue(session, digest, ROOTS_ASK_TIMEOUT, subject=ROOTS_SUBJECT)
        return {
            "resultType": "input_required",
            "inputRequests": {ROOTS_ANSWER_KEY: {"method": "roots/list"}},
            "requestState": ROOTS_STATE_PREFIX + token,
        }

    async def _take_modern_roots(self, state: str, responses: Any, session: str, digest: str) -> None:
        """A modern client's retry with its roots: only the client asked, retrying the same call,
        is heard; an answer that is not a roots list counts as none, as a handshake-era client's."""
        token = state.removeprefix(ROOTS_STATE_PREFIX)
        problem = self.seal.check(token, session, digest)
        if problem is None and self.seal.subject_of(token) != ROOTS_SUBJECT:
            problem = "the request state was not issued for roots"
        if problem is not None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"requestState was not accepted ({problem}); call the tool again without it",
            )
        answer = responses.get(ROOTS_ANSWER_KEY) if isinstance(responses, dict) else None
        roots: list[dict[str, Any]] | None = None
        try:
            listed = RESULT_TYPES["roots/list"].validate_python(answer)
            roots = listed.model_dump(by_alias=True, mode="json", exclude_none=True)["roots"]
        except (ValidationError, KeyError) as exc:
            logger.warning("a client declared roots but did not list them (%s); counted as none", exc)
        await self.roots.learn_modern(session, roots)

    async def _roots_changed(self) -> None:
        """Tell each server that took roots outside of a call that they changed; its calls wait
        (briefly) until it has asked again."""
        for calls in list(self._calls.values()):
            if not calls.takes_roots or not calls.downstream.available:
                continue
            calls.roots_pending = calls.roots_pending or anyio.Event()
            try:
                await calls.downstream.roots_changed()
            except Exception as exc:  # one server's trouble does not keep the others uninformed
                name = calls.downstream.name
                logger.warning("server %r: could not say that the roots changed: %s", name, exc)
                calls.roots_pending.set()
                calls.roots_pending = None

    # -- calls -----------------------------------------------------------------------------

    async def plain_call(
        self, downstream: Downstream, name: str, arguments: Any, meta: dict[str, Any] | None
    ) -> dict[str, Any]:
        """A call of a client that can be asked nothing (no request context): it still takes
        its turn, so that what the server asks meanwhile is never taken for this call's."""
        calls = self.calls_on(downstream)
        caller = Caller(None)
        connection = await calls.start(caller)
        try:
            return await connection.call_tool(name, arguments, meta=meta)
        finally:
            calls.finish(caller)

    async def call(
        self,
        ctx: ServerRequestContext[Any],
        downstream: Downstream,
        name: str,
        params: dict[str, Any],
        session: str,
    ) -> dict[str, Any]:
        """Forward one `tools/call` (params as the client sent them) and return the result for
        this client, translating between the eras where the two sides differ (one handler per
        pairing of client era and server era). `session` names the client (see
        gateway/clients.py): a sealed `requestState` holds for it only."""
        arguments = params.get("arguments")
        state = params.get("requestState")
        if isinstance(state, str) and state.startswith(REQUEST_STATE_PREFIX):
            digest = call_hash(downstream.name, name, arguments, "")
            return await self._resume(ctx, state, params.get("inputResponses") or {}, session, digest)
        if isinstance(state, str) and state.startswith(ROOTS_STATE_PREFIX):
            digest = call_hash(downstream.name, name, arguments, "")
            await self._take_modern_roots(state, params.get("inputResponses"), session, digest)
            # The retry's envelope was for the gateway alone: the downstream sees the plain call.
            params = {k: v for k, v in params.items() if k not in ("requestState", "inputResponses")}
        calls = self.calls_on(downstream)
        if calls.takes_roots and _declared(ctx, "roots/list") and not await self._roots_known(ctx, session):
            # A modern client's roots must narrow what the server gets before its call runs: it
            # is asked in this call's result, and its retry carries them.
            return self._ask_modern_roots(session, call_hash(downstream.name, name, arguments, ""))
        meta = dict(params.get("_meta") or {})
        level = self._log_level_for(ctx, meta)
        server_level = None
        if level is not None and downstream.era is Era.LEGACY:
            server_level = _most_verbose(level, *self._session_levels())
            await downstream.set_log_level(server_level)
        forwarded = ForwardedCall(
            ctx,
            downstream,
            calls,
            name,
            arguments,
            meta,
            level,
            server_level,
            _progress_reporter(ctx, params),
            session,
        )
        extra: dict[str, Any] = {k: params[k] for k in ("inputResponses", "requestState") if k in params}
        return await self._handler_for(ctx, downstream)(forwarded, extra)

    def _handler_for(self, ctx: ServerRequestContext[Any], downstream: Downstream) -> CallHandler:
        """The handler of this pairing of eras. A server whose era is not known yet (or a source
        that is no MCP server) is taken as a 2026-07-28 one: it can only answer."""
        if downstream.era is Era.LEGACY:
            return self._modern_to_legacy if is_modern(ctx) else self._legacy_to_legacy
        return self._modern_to_modern if is_modern(ctx) else self._legacy_to_modern

    async def _legacy_to_legacy(self, forwarded: ForwardedCall, extra: dict[str, Any]) -> dict[str, Any]:
        """What the server asks during the call is asked of the client on its call's stream."""
        return await forwarded.run(forwarded.legacy_caller(), extra)

    async def _modern_to_legacy(self, forwarded: ForwardedCall, extra: dict[str, Any]) -> dict[str, Any]:
        """The server may ask this client something during the call: the call keeps running apart
        from this request (an `Exchange`), so that the question can go back as its result."""
        if self._task_group is None or not forwarded.client_can_answer:
            return await forwarded.run(Caller(forwarded.ctx), extra)
        exchange = Exchange(
            session=forwarded.session,
            digest=forwarded.digest,
            capabilities=forwarded.ctx.session.client_capabilities,
        )
        self._task_group.start_soon(self._run_exchange, forwarded, exchange, extra)
        return await self._next_round(forwarded.ctx, exchange)

    async def _run_exchange(
        self, forwarded: ForwardedCall, exchange: Exchange, extra: dict[str, Any]
    ) -> None:
        try:
            with exchange.scope:
                exchange.result = await forwarded.run(Caller(forwarded.ctx, exchange), extra)
        except Exception as exc:  # handed to whichever request is waiting for it
            exchange.error = exc
        finally:
            if exchange.result is None and exchange.error is None:
                exchange.error = MCPError(
                    code=INTERNAL_ERROR, message=f"{forwarded.name}: the call was cancelled"
                )
            exchange.done.set()
            if exchange.waiting is None:
                self._exchanges.pop(exchange.id, None)  # nobody is coming back for it

    async def _modern_to_modern(self, forwarded: ForwardedCall, extra: dict[str, Any]) -> dict[str, Any]:
        """The client answers what the server asks itself (`InputRequiredResult` as it came), so it
        must be able to."""
        result = await forwarded.run(Caller(forwarded.ctx), extra)
        if result.get("resultType") == "input_required":
            capabilities = forwarded.ctx.session.client_capabilities
            wire = capabilities.model_dump(by_alias=True, exclude_none=True) if capabilities else {}
            check_input_requests(result, wire)
        return result

    async def _legacy_to_modern(self, forwarded: ForwardedCall, extra: dict[str, Any]) -> dict[str, Any]:
        """The server's `InputRequiredResult` is asked of the client, request by request, on its
        call's stream, and the call retried downstream with the answers, round by round."""
        caller = forwarded.legacy_caller()
        result = await forwarded.run(caller, extra)
        for _ in range(MAX_INPUT_ROUNDS):
            if result.get("resultType") != "input_required":
                return result
            answers = {
                key: await self._ask_legacy(forwarded.ctx, request)
                for key, request in (result.get("inputRequests") or {}).items()
            }
            retry: dict[str, Any] = {"inputResponses": answers}  # only what the server asked
            if "requestState" in result:
                retry["requestState"] = result["requestState"]
            result = await forwarded.run(caller, retry)
        if result.get("resultType") != "input_required":
            return result
        raise MCPError(
            code=INTERNAL_ERROR,
            message=f"{forwarded.name}: the server asked for input more than {MAX_INPUT_ROUNDS} times",
        )

    async def _ask_legacy(self, ctx: ServerRequestContext[Any], request: dict[str, Any]) -> dict[str, Any]:
        method = request.get("method")
        if method not in CAPABILITY_FOR_REQUEST:
            raise MCPError(code=METHOD_NOT_FOUND, message=f"the server asked for unknown input {method!r}")
        if not _declared(ctx, method):
            raise MCPError.from_error_data(_undeclared(method))
        return await self._send_to_client(ctx, _input_request(method, request.get("params")))

    async def ask_client(self, ctx: ServerRequestContext[Any], method: str, params: Any) -> dict[str, Any]:
        """Send the calling client a request of its own during its call (the approval gate's
        question), and return its answer as it came."""
        return await self._send_to_client(ctx, _input_request(method, params))

    async def tell_caller(
        self,
        ctx: ServerRequestContext[Any],
        params: dict[str, Any],
        *,
        text: str,
        progress: float,
        total: float | None,
    ) -> None:
        """Tell the client of a call that is still running something about it (the gateway's
        own word, e.g. that the call waits for a person), on that call's stream so that it
        reaches this client alone:
        1. as progress under the call's `progressToken`, when the client sent one (`progress`
           must grow from one note to the next);
        2. else as a warning log message from logger "toolkeeper", which a modern client gets
           only if it opted in at that level on this request (the SDK drops it otherwise), and
           a handshake-era client unless it asked for fewer with `logging/setLevel`."""
        token = _progress_token(params)
        if isinstance(token, str | int) and not isinstance(token, bool):
            report = _progress_reporter(ctx, params)
            assert report is not None  # the call carries a token
            await report(progress, total, text)
            return
        level = self._levels_for(ctx) if not is_modern(ctx) else None
        if level is None or _admits(level, WAITING_LOG_LEVEL):
            await ctx.session.send_log_message(
                WAITING_LOG_LEVEL, text, GATEWAY_LOGGER, related_request_id=ctx.request_id
            )

    async def _send_to_client(self, ctx: ServerRequestContext[Any], request: ServerInput) -> dict[str, Any]:
        result = await ctx.session.send_request(
            request, _RawResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
        )
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _next_round(self, ctx: ServerRequestContext[Any], exchange: Exchange) -> dict[str, Any]:
        """Wait until the downstream call ends or asks something, and tell the modern client."""
        exchange.waiting = ctx
        try:
            async with anyio.create_task_group() as tg:

                async def until(event: anyio.Event) -> None:
                    await event.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(until, exchange.done)
                tg.start_soon(until, exchange.asked)
        except anyio.get_cancelled_exc_class():
            # The client gave up on its call: so does the gateway, downstream.
            exchange.scope.cancel()
            self._exchanges.pop(exchange.id, None)
            raise
        finally:
            exchange.waiting = None
        if exchange.done.is_set():
            self._exchanges.pop(exchange.id, None)
            if exchange.error is not None:
                raise exchange.error
            assert exchange.result is not None
            return exchange.result
        self._exchanges[exchange.id] = exchange
        token = self.seal.issue(exchange.session, exchange.digest, EXCHANGE_TIMEOUT, subject=exchange.id)
        return {
            "resultType": "input_required",
            "inputRequests": exchange.pending(),
            "requestState": REQUEST_STATE_PREFIX + token,
        }

    async def _resume(
        self,
        ctx: ServerRequestContext[Any],
        state: str,
        responses: dict[str, Any],
        session: str,
        digest: str,
    ) -> dict[str, Any]:
        """A modern client's retry with the answers to a waiting call's questions. Only the
        client the state was issued to, retrying the same call, able to answer what was asked,
        carries the call on; anyone else is refused and the call keeps waiting for its client."""
        token = state.removeprefix(REQUEST_STATE_PREFIX)
        exchange = self._exchanges.get(self.seal.subject_of(token) or "")
        holder = self.seal.replica_of(token)
        if exchange is None and holder and holder != self.seal.replica:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"requestState belongs to a call held by gateway replica '{holder}', which this "
                f"replica ('{self.seal.replica}') could not reach; call the tool again without it",
            )
        if exchange is None:
            raise MCPError(
                code=INVALID_PARAMS,
                message="requestState is unknown or expired (the gateway restarted, or the call finished); "
                "call the tool again without it",
            )
        wire = ctx.session.client_capabilities
        missing = sorted(m for m in exchange.pending_methods() if not declares(wire, m))
        if missing:
            raise MCPError(
                code=MISSING_CAPABILITY,
                message=undeclared_message(missing[0]),
                data={"requiredCapabilities": {CAPABILITY_FOR_REQUEST[m]: {} for m in missing}},
            )
        problem = self.seal.check(token, session, digest)
        if problem is not None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"requestState was not accepted ({problem}); call the tool again without it",
            )
        del self._exchanges[exchange.id]
        exchange.answer(responses)
        return await self._next_round(ctx, exchange)

    # -- what a downstream server sends during a call --------------------------------------

    async def downstream_request(
        self, downstream: Downstream, request: ServerInput
    ) -> types.InputResponse | types.ErrorData:
        calls = self.calls_on(downstream)
        lane = calls.lane_of(downstream) or Lane(downstream)
        method = request.method
        if method == "roots/list" and not lane.running:
            return self._roots_outside_a_call(calls)
        if not calls.asks and lane.running:
            calls.asks = True
            logger.info(
                "server %r asks its clients things (%s): from now on its calls of different clients "
                "never share a connection, so that each question reaches the client whose call it "
                "belongs to",
                downstream.name,
                method,
            )
        if lane.asked_ambiguously() and not await lane.placeable(PLACING_TIMEOUT):
            return types.ErrorData(
                code=INTERNAL_ERROR,
                message=f"toolkeeper: {method} from '{downstream.name}' came while calls of several clients"
                " were in flight, and the handshake era does not say whose call it belongs to, so no"
                " client was asked; call the tool again (such calls now take turns)",
            )
        caller = lane.latest()
        if caller is None:
            return types.ErrorData(
                code=INTERNAL_ERROR,
                message=f"toolkeeper: {method} from '{downstream.name}' outside of a call has no client"
                " to ask",
            )
        if not caller.can_answer(method):
            return _undeclared(method)
        if caller.exchange is not None:
            return await caller.exchange.ask(request)
        assert caller.ctx is not None  # a caller that can answer has a request context
        try:
            result = await self._send_to_client(caller.ctx, request)
            return RESULT_TYPES[method].validate_python(result)
        except MCPError as exc:
            return exc.error

    def _roots_outside_a_call(self, calls: ServerCalls) -> types.ListRootsResult | types.ErrorData:
        calls.takes_roots = True
        pending, calls.roots_pending = calls.roots_pending, None
        if pending is not None:
            pending.set()
        roots = self.roots.answer()
        if roots is None:
            return types.ErrorData(
                code=INTERNAL_ERROR,
                message=f"toolkeeper: roots/list from '{calls.downstream.name}' outside of a call: no"
                " connected client declared roots",
            )
        return types.ListRootsResult.model_validate({"roots": roots})

    async def downstream_log(
        self, downstream: Downstream, params: types.LoggingMessageNotificationParams
    ) -> None:
        lane = self.calls_on(downstream).lane_of(downstream) or Lane(downstream)
        caller = lane.latest()
        if lane.mixed():
            # The message does not say whose call it belongs to: telling the wrong client would
            # hand it another client's data.
            logger.debug(
                "server %r: a log message during calls of several clients was dropped", downstream.name
            )
            return
        if caller is not None:
            # The message belongs to the call: it rides the stream of the client's request waiting
            # for it (the SDK drops it for a modern client that did not opt in at this level).
            ctx = caller.exchange.waiting if caller.exchange is not None else caller.ctx
            level = self._levels_for(ctx) if ctx is not None else None
            if ctx is not None and (level is None or _admits(level, params.level)):
                await _log_to(ctx.session, params, ctx.request_id)
            return
        for session, level in list(self._log_levels.values()):
            if _admits(level, params.level):
                await _log_to(session, params, None)

    async def resource_updated(self, downstream: Downstream, uri: str) -> None:
        await self.bus.publish(ResourceUpdated(uri))
        for session, uris in list(self._subscribed.values()):
            if uri in uris:
                try:
                    await session.send_resource_updated(uri)
                except Exception as exc:  # a client that went away must not stop the others
                    logger.debug("could not tell a client that %s changed: %s", uri, exc)

    # -- per-client settings ---------------------------------------------------------------

    async def set_log_level(
        self, ctx: ServerRequestContext[Any], level: str, downstreams: list[Downstream]
    ) -> None:
        """A legacy client's `logging/setLevel`: remembered for it, and asked of every legacy
        server at the most verbose level any client wants."""
        self._log_levels[_connection(ctx)] = (ctx.session, level)
        wanted = _most_verbose(*self._session_levels())
        for downstream in downstreams:
            if downstream.available:
                try:
                    await downstream.set_log_level(wanted)
                except Exception as exc:  # one server's refusal does not fail the client's request
                    logger.warning("server %r: logging/setLevel %s failed: %s", downstream.name, wanted, exc)

    def subscribed(self, ctx: ServerRequestContext[Any], uri: str) -> bool:
        """Record a legacy client's subscription; False if it already had it."""
        _, uris = self._subscribed.setdefault(_connection(ctx), (ctx.session, set()))
        if uri in uris:
            return False
        uris.add(uri)
        return True

    def unsubscribed(self, ctx: ServerRequestContext[Any], uri: str) -> bool:
        entry = self._subscribed.get(_connection(ctx))
        if entry is None or uri not in entry[1]:
            return False
        entry[1].discard(uri)
        return True

    def _session_levels(self) -> list[str]:
        return [level for _, level in self._log_levels.values()]

    def _levels_for(self, ctx: ServerRequestContext[Any]) -> str | None:
        entry = self._log_levels.get(_connection(ctx))
        return entry[1] if entry else None

    def _log_level_for(self, ctx: ServerRequestContext[Any], meta: dict[str, Any]) -> str | None:
        """The level this call's log messages are wanted at: a modern client's per-request
        opt-in, or a legacy client's `logging/setLevel`."""
        if is_modern(ctx):
            level = meta.get(LOG_LEVEL_META)
            return level if level in LOG_LEVELS else None
        return self._levels_for(ctx)


class _RawResult(types.Result):
    """A client's answer as it is (the gateway hands it on; the server validates it)."""

    model_config = types.Result.model_config | {"extra": "allow"}


def _progress_token(params: dict[str, Any]) -> Any:
    """The `progressToken` a request's `_meta` carries, if any."""
    meta = params.get("_meta")
    return meta.get("progressToken") if isinstance(meta, dict) else None


def _progress_reporter(ctx: ServerRequestContext[Any], params: dict[str, Any]) -> ProgressCallback | None:
    """Progress of the downstream call, passed on to the client under the token it chose."""
    token = _progress_token(params)
    if token is None:
        return None

    async def report(progress: float, total: float | None, message: str | None) -> None:
        # The SDK routes by the request id as the client sent it (a number or a string); its
        # annotation names only strings.
        await ctx.session.send_progress_notification(
            token,
            progress,
            total,
            message,
            related_request_id=ctx.request_id,  # type: ignore[arg-type]
        )

    return report


def _input_request(method: str, params: Any) -> Any:
    wire = {"method": method} if params is None else {"method": method, "params": params}
    return _REQUEST_TYPES[method].model_validate(wire)


def _undeclared(method: str) -> types.ErrorData:
    return types.ErrorData(code=INTERNAL_ERROR, message=undeclared_message(method))


async def _log_to(session: Any, params: types.LoggingMessageNotificationParams, related: Any) -> None:
    try:
        await session.send_log_message(params.level, params.data, params.logger, related_request_id=related)
    except Exception as exc:  # a client that went away must not stop the server's call
        logger.debug("could not pass a log message on: %s", exc)


def _admits(threshold: str, level: str) -> bool:
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)


def _most_verbose(*levels: str) -> str:
    return min(levels, key=LOG_LEVELS.index) if levels else "info"
