"""Run the gateway over stdio or streamable HTTP until the client leaves or a signal arrives.

Whichever way it ends (stdin closed, SIGTERM, SIGINT), the stop is orderly: the calls
in flight (and those waiting for a person's approval) are cancelled, each answered with an error
that says the gateway is shutting down,
the client streams end, and every downstream child is stopped and reaped by its transport
(SIGKILL after a grace period, for one that ignores SIGTERM) before the process exits with 0.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkeeper.config.model import Config
from toolkeeper.downstreams.base import Downstream, State
from toolkeeper.downstreams.cancellation import OwnCancellation
from toolkeeper.edge.clients import client_of
from toolkeeper.edge.fastlane import FastLane
from toolkeeper.edge.guard import HostGuard
from toolkeeper.edge.stdio import stdio_streams
from toolkeeper.faces.mcp.config_tools import ConfigMenu
from toolkeeper.faces.mcp.server import build_server
from toolkeeper.log import redact_every_handler
from toolkeeper.pipeline.otel_switch import open_telemetry
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.services.costs import serving_line
from toolkeeper.store import Store

# The HTTP edge (client keys, OAuth tokens, JWT and X.509) and the dashboard (its templates) are
# imported where they are served: a gateway over stdio answers its client's handshake without
# paying for them.
if TYPE_CHECKING:
    from toolkeeper.edge.auth import AuthPlan
    from toolkeeper.edge.web import Dashboard

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Asks the gateway to read its sources again (an OpenAPI source's spec files), as daemons do.
RELOAD_SIGNAL = signal.SIGHUP
# How long the calls cancelled by a stop get to return to their callers, and (over HTTP) the
# client streams to end, before they are cut.
CALLS_ENDED_SECONDS = 1  # whole seconds: uvicorn takes an int
STREAMS_POLL_SECONDS = 0.01
# Starts an orderly stop, given the reason.
Stop = Callable[[str], Coroutine[Any, Any, None]]


async def _on_signals(stop: Stop, at_once: anyio.CancelScope, gateway: Gateway) -> None:
    """The first SIGTERM or SIGINT starts an orderly stop (`stop`, with the reason); a second one
    cancels `at_once` (the children are still stopped, the answers are not waited for). SIGHUP
    reloads the gateway's sources."""
    with anyio.open_signal_receiver(*STOP_SIGNALS, RELOAD_SIGNAL) as signals:
        async with anyio.create_task_group() as tg:
            stopping = False
            async for signum in signals:
                name = signal.Signals(signum).name
                if signum == RELOAD_SIGNAL:
                    gateway.reload_sources(f"received {name}")
                    continue
                if not stopping:
                    stopping = True
                    tg.start_soon(stop, f"received {name}")
                    continue
                logger.warning("received %s again; stopping at once", name)
                at_once.cancel()
                return


# How long a stopping gateway waits at most for its last OpenTelemetry export.
TELEMETRY_FLUSH_SECONDS = 3.5


@asynccontextmanager
async def exporting_telemetry(gateway: Gateway) -> AsyncIterator[None]:
    """OpenTelemetry for the calls served inside, where the OTEL_* variables turn it on: the span
    stages join the gateway's pipeline, and what is left is sent as the gateway stops."""
    telemetry = open_telemetry(gateway.settings, gateway.call_metrics)
    if telemetry is None:
        yield
        return
    gateway.pipeline = telemetry.traced(gateway.pipeline)
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await telemetry.close(TELEMETRY_FLUSH_SECONDS)


def _announce_stop(reason: str) -> None:
    logger.info(
        "stopping (%s): cancelling the calls in flight, closing client streams, stopping downstream servers",
        reason,
    )


async def _collect_garbage_once_up(gateway: Gateway) -> None:
    """Everything start-up made lives as long as the gateway: freeze it, so that collections on
    the call path walk only what calls allocate, and turn the collector on again."""
    await gateway.started.wait()
    gc.freeze()
    gc.enable()


async def _serving(gateway: Gateway) -> str:
    """What the gateway serves once up: `serving 12 tools, ~3.1k tokens, of 140 tools, ~41k tokens
    (estimated, o200k_base) from 3 servers`, and which servers have not arrived yet."""
    await gateway.started.wait()
    costs = gateway.costs
    # Counted in a worker thread: tools counted before (by any toolkeeper process) are known at
    # once; only a tool new to this machine loads the tokenizer, which holds the interpreter.
    counted = await anyio.to_thread.run_sync(serving_line, costs, abandon_on_cancel=True)
    return f"{counted} from {len(gateway.config.servers)} servers{not_serving_yet(gateway.pool)}"


async def _announce_serving_stdio(gateway: Gateway) -> None:
    """The start-up line on stderr (the log's), since stdout is the client's."""
    line = await _serving(gateway)
    toolset = gateway.toolset.name if gateway.toolset else "none"
    logger.info("%s (mode: %s, toolset: %s)", line, gateway.mode_name, toolset)


async def serve_stdio(config: Config, store: Store, ui: tuple[str, int] | None = None) -> None:
    """Serve one client on stdin and stdout until it closes stdin or a signal stops the gateway;
    with `ui` (host, port), the dashboard too."""
    gateway = Gateway(config, store, menu=ConfigMenu)
    server = build_server(gateway, client_of)
    web = _dashboard_server(gateway, config, *ui) if ui is not None else None
    stop_reading = anyio.Event()
    reason = "the client closed stdin"

    async def stop(signal_reason: str) -> None:
        nonlocal reason
        reason = signal_reason
        stop_reading.set()

    async def wind_down() -> None:
        _announce_stop(reason)
        if web is not None:
            web.stop()
        gateway.stop_calls(reason)
        await gateway.calls_ended(CALLS_ENDED_SECONDS)

    async with exporting_telemetry(gateway), anyio.create_task_group() as tg:
        tg.start_soon(_on_signals, stop, tg.cancel_scope, gateway)
        await tg.start(gateway.run)
        tg.start_soon(_collect_garbage_once_up, gateway)
        tg.start_soon(_announce_serving_stdio, gateway)
        if web is not None:
            tg.start_soon(web.serve)
        fast_lane = FastLane(gateway, server.server_info_stamp)
        async with stdio_streams(
            fast_lane=fast_lane,
            max_message_bytes=config.settings.stdio_max_message_bytes,
            stop_reading=stop_reading,
            wind_down=wind_down,
        ) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        if web is not None:
            await web.stopped(CALLS_ENDED_SECONDS + 1)
        tg.cancel_scope.cancel()


class _WebServer(uvicorn.Server):
    """uvicorn without its own signal handling: after a graceful shutdown uvicorn re-raises the
    signal, which would kill the process before the downstream children are stopped."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ClosableStreams:
    """Knows the requests in progress, so that a stopping gateway can end their responses itself:
    a handshake-era client's GET stream never ends on its own, and uvicorn would otherwise wait
    for it, or cancel it with a traceback in the log. A response that started gets a proper end,
    one that did not gets a 503.

    uvicorn runs each request in a task of its own, so a request is ended by cancelling that
    task: no cancel scope per request, on every call's path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # Each request's cancellation (of the task uvicorn runs it in), with its method.
        self._open: dict[OwnCancellation, str] = {}

    @property
    def open(self) -> int:
        return len(self._open)

    def close(self, *methods: str) -> None:
        """End the requests in progress with one of `methods` (all of them without any)."""
        for request, method in list(self._open.items()):
            if not methods or method in methods:
                request.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = finished = False

        async def watched_send(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        task = asyncio.current_task()
        assert task is not None
        request = OwnCancellation(task)
        self._open[request] = scope["method"]
        try:
            await self.app(scope, receive, watched_send)
            return
        except asyncio.CancelledError:
            # Ended here (and by nobody else as well): answered below. Any other cancellation
            # (uvicorn's own, past its grace period) goes on.
            if not request.take_back():
                raise
        finally:
            del self._open[request]
        if finished:
            return
        from toolkeeper.edge.http_fastlane import respond

        with suppress(Exception):  # the client may be gone already
            if not started:
                await respond(send, 503, b"the gateway is shutting down\n", b"text/plain; charset=utf-8")
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _stop_web(web: uvicorn.Server, gateway: Gateway, streams: ClosableStreams) -> Stop:
    """How a signal stops the HTTP gateway: uvicorn takes no new connections, the standalone GET
    streams end (they carry no answers), the calls in flight are cancelled, and once their
    answers are out on their POST streams (CALLS_ENDED_SECONDS at most) the streams still open
    end too (a modern client's listen stream, a call that waits for something else)."""

    async def stop(reason: str) -> None:
        _announce_stop(reason)
        web.should_exit = True
        streams.close("GET")
        gateway.stop_calls(reason)
        with anyio.move_on_after(CALLS_ENDED_SECONDS):
            await gateway.calls_ended(CALLS_ENDED_SECONDS)
            while streams.open:
                await anyio.sleep(STREAMS_POLL_SECONDS)
        streams.close()

    return stop


LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def transport_security(config: Config, host: str) -> TransportSecuritySettings:
    """Host and Origin checks against DNS rebinding, always on: a web page the person visits
    must not reach the gateway through a name that resolves to this machine. Local names are
    accepted, plus the address the gateway is bound to and whatever the configuration allows."""
    settings = config.settings
    hosts = [*LOCAL_HOSTS]
    if host not in WILDCARD_HOSTS and host not in ("localhost", "127.0.0.1", "::1"):
        hosts.append(f"[{host}]" if ":" in host else host)
    elif host in WILDCARD_HOSTS and not settings.http_allowed_hosts:
        logger.warning(
            "listening on all interfaces, but only requests addressed to localhost are accepted; "
            "list the names clients use in toolkeeper.http.allowedHosts (or TOOLKEEPER_HTTP_ALLOWED_HOSTS)"
        )
    allowed_hosts = [h for name in hosts for h in (name, f"{name}:*")] + list(settings.http_allowed_hosts)
    origins = [f"{scheme}://{name}" for name in hosts for scheme in ("http", "https")]
    allowed_origins = [o for origin in origins for o in (origin, f"{origin}:*")] + list(
        settings.http_allowed_origins
    )
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
    )


class NoProxyBuffering:
    """`X-Accel-Buffering: no` on every response: a reverse proxy (nginx) that buffers would hold
    back a call's progress and log messages on its event stream until the call ends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_unbuffered(message: Message) -> None:
            headers = message.get("headers", [])
            if message["type"] == "http.response.start" and not any(
                k == b"x-accel-buffering" for k, _ in headers
            ):
                message["headers"] = [*headers, (b"x-accel-buffering", b"no")]
            await send(message)

        await self.app(scope, receive, send_unbuffered)


async def serve_http(config: Config, store: Store, host: str, port: int, *, ui: bool = False) -> None:
    """Serve streamable HTTP at /mcp, and with `ui` the dashboard at / on the same port;
    CannotStart when it would reach beyond this machine with no way for a client to
    authenticate."""
    from toolkeeper.edge.auth import Authenticator, AuthPlan
    from toolkeeper.edge.handover import Handover, own_address
    from toolkeeper.edge.health import HEALTH_PATH, READY_PATH, Health
    from toolkeeper.edge.http_fastlane import Endpoint, HttpFastLane
    from toolkeeper.edge.metrics import METRICS_PATH, MetricsEndpoint
    from toolkeeper.edge.oauth import JwtVerifier
    from toolkeeper.edge.web import McpOrDashboard, dashboard
    from toolkeeper.services.keys import KeyRing

    # Replicas behind one address are one gateway to a client: they share the mode.
    gateway = Gateway(config, store, menu=ConfigMenu, shared_mode=True)
    services = gateway.services
    keys = await services.keys.ring() if services is not None else KeyRing.empty()
    plan = AuthPlan.for_serving(config, host, keys)
    auth = Authenticator(
        plan,
        keys=lambda: gateway.keys,
        oauth=JwtVerifier(plan.oauth) if plan.oauth is not None else None,
        resource_path=MCP_PATH,
    )
    server = build_server(gateway, client_of)
    security = transport_security(config, host)
    max_bytes = config.settings.http_max_request_bytes
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=host,
        # The edge's HostGuard decides for every request, before the SDK sees it: the SDK's own
        # check matches "localhost:" by prefix, so "localhost:80@evil.com" would pass it.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=max_bytes,
    )
    health = Health(gateway)
    endpoints: dict[str, Endpoint] = {
        HEALTH_PATH: health,
        READY_PATH: health,
        METRICS_PATH: MetricsEndpoint(gateway.call_metrics, auth),
    }
    # A modern client's retry that a load balancer sent to another replica than its round's.
    address = partial(own_address, config.settings.http_replica_url, host, port, MCP_PATH)
    handover = Handover(store, gateway.relay.seal, address)
    # The edge sets X-Accel-Buffering on its own answers; everything else passes the SDK.
    fast = HttpFastLane(
        NoProxyBuffering(app),
        lane=FastLane(gateway, server.server_info_stamp, transport="http"),
        path=MCP_PATH,
        guard=HostGuard(security.allowed_hosts, security.allowed_origins),
        auth=auth,
        max_bytes=max_bytes,
        endpoints=endpoints,
        handover=handover,
    )
    # One count of failed authentications for /mcp and the dashboard: guesses at either add up.
    board = dashboard(gateway, config, host, fast.guard, throttle=auth.throttle) if ui else None
    both = McpOrDashboard(fast, board.app, MCP_PATH, endpoints) if board is not None else None
    streams = ClosableStreams(both or fast)
    web = _web_server(streams, host, port, config.settings.http_trusted_proxies)
    async with exporting_telemetry(gateway), anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        tg.start_soon(handover.publish)
        tg.start_soon(_collect_garbage_once_up, gateway)
        tg.start_soon(_on_signals, _stop_web(web, gateway, streams), tg.cancel_scope, gateway)
        tg.start_soon(_announce_when_listening, web, gateway, host, port, plan)
        if board is not None:
            tg.start_soon(_announce_dashboard, web, board, host, port)
        if services is not None:
            tg.start_soon(auth.record_key_uses, services.keys.touch)
        try:
            await web.serve()
        finally:
            await handover.aclose()
            if auth.oauth is not None:
                await auth.oauth.aclose()
        tg.cancel_scope.cancel()


async def _announce_when_listening(
    web: uvicorn.Server, gateway: Gateway, host: str, port: int, plan: AuthPlan
) -> None:
    while not web.started:
        await anyio.sleep(0.05)
    line = await _serving(gateway)
    toolset = gateway.toolset.name if gateway.toolset else "none"
    print(
        f"toolkeeper: {line} "
        f"at http://{host}:{port}{MCP_PATH} (mode: {gateway.mode_name}, toolset: {toolset}, "
        f"store: {gateway.store.label if gateway.store else 'none'}, clients: {plan.describe()})",
        file=sys.stderr,
        flush=True,
    )


# The states of a server that does not serve its tools yet, as the start-up line counts them
# (one, then several).
NOT_SERVING = (
    (State.LOADING, "still loading", "still loading"),
    (State.NEEDS_SIGN_IN, "needs a sign-in", "need a sign-in"),
    (State.STOPPED, "stopped", "stopped"),
)


def not_serving_yet(pool: Iterable[Downstream]) -> str:
    """ " (1 still loading, 2 need a sign-in: see toolkeeper servers)", or nothing when every
    server serves: a count of tools alone hides a large spec that has not arrived yet, or a
    remote server waiting for a person to sign in."""
    states = Counter(downstream.state for downstream in pool)
    parts = [
        f"{states[state]} {one if states[state] == 1 else several}"
        for state, one, several in NOT_SERVING
        if states[state]
    ]
    return f" ({', '.join(parts)}: see toolkeeper servers)" if parts else ""


def _web_server(
    app: ASGIApp, host: str, port: int, trusted_proxies: tuple[str, ...], *, lifespan: bool = True
) -> _WebServer:
    """uvicorn serving `app`. A request's address (what the throttle counts and the log names)
    is its peer's, or what `X-Forwarded-For` says only when the peer is one of
    `trusted_proxies` (`http.trustedProxies`): uvicorn's default would believe any process on
    this machine, which could then pass for anyone."""
    from toolkeeper.edge.one_write import OneWriteHttpProtocol

    web = _WebServer(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            # httptools' parser (uvicorn's fastest), each answer in one write: bench/README.md
            # compares the servers.
            http=OneWriteHttpProtocol,
            proxy_headers=bool(trusted_proxies),
            forwarded_allow_ips=list(trusted_proxies),
            log_level="warning",
            # Its lines are at info, below the level above: never written, only built per response.
            access_log=False,
            lifespan="on" if lifespan else "off",
            # A backstop only: the stop ends every stream itself.
            timeout_graceful_shutdown=CALLS_ENDED_SECONDS + 1,
        )
    )
    redact_every_handler()  # uvicorn's configuration just gave its loggers handlers of their own
    return web


@dataclass
class DashboardServer:
    """The dashboard on a port of its own, guarded as /mcp would be on that host."""

    web: _WebServer
    streams: ClosableStreams
    board: Dashboard
    host: str
    port: int
    done: anyio.Event = field(default_factory=anyio.Event)

    async def serve(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_announce_dashboard, self.web, self.board, self.host, self.port)
                await self.web.serve()
                tg.cancel_scope.cancel()
        finally:
            self.done.set()

    def stop(self) -> None:
        self.web.should_exit = True
        self.streams.close()

    async def stopped(self, timeout: float) -> None:
        """Stop it, and wait up to `timeout` for uvicorn to close its connections."""
        self.stop()
        with anyio.move_on_after(timeout):
            await self.done.wait()


def _dashboard_server(gateway: Gateway, config: Config, host: str, port: int) -> DashboardServer:
    from toolkeeper.edge.web import dashboard

    security = transport_security(config, host)
    board = dashboard(gateway, config, host, HostGuard(security.allowed_hosts, security.allowed_origins))
    streams = ClosableStreams(board.app)
    # The dashboard has nothing to start or stop with the server: no lifespan.
    web = _web_server(streams, host, port, config.settings.http_trusted_proxies, lifespan=False)
    return DashboardServer(web, streams, board, host, port)


async def _announce_dashboard(web: uvicorn.Server, board: Dashboard, host: str, port: int) -> None:
    while not web.started:
        await anyio.sleep(0.05)
    board.announce(host, port)
    await board.publish(host, port)


async def serve_ui(config: Config, store: Store, host: str, port: int) -> None:
    """The dashboard alone, over a gateway that connects the servers but serves no client."""
    gateway = Gateway(config, store, menu=ConfigMenu)
    web = _dashboard_server(gateway, config, host, port)

    async def stop(reason: str) -> None:
        _announce_stop(reason)
        web.stop()

    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        tg.start_soon(_on_signals, stop, tg.cancel_scope, gateway)
        await web.serve()
        tg.cancel_scope.cancel()
