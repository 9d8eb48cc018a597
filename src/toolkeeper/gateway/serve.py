"""Run the gateway over stdio or streamable HTTP until the client leaves or a signal arrives.

Whichever way it ends (stdin closed, SIGTERM, SIGINT), the task group is cancelled and every
downstream child is stopped and reaped by its transport before the process exits.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkeeper.config.model import Config
from toolkeeper.gateway.core import Gateway
from toolkeeper.gateway.fastlane import FastLane
from toolkeeper.gateway.http_fastlane import HostGuard, HttpFastLane
from toolkeeper.gateway.server import build_server
from toolkeeper.gateway.stdio import stdio_streams
from toolkeeper.store import Store

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            logger.info("received %s; stopping downstream servers", signal.Signals(signum).name)
            scope.cancel()
            return


async def _collect_garbage_once_up(gateway: Gateway) -> None:
    """Everything start-up made lives as long as the gateway: freeze it, so that collections on
    the call path walk only what calls allocate, and turn the collector on again."""
    await gateway.started.wait()
    gc.freeze()
    gc.enable()


async def serve_stdio(config: Config, store: Store) -> None:
    gateway = Gateway(config, store)
    server = build_server(gateway)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_on_signal, tg.cancel_scope)
        await tg.start(gateway.run)
        tg.start_soon(_collect_garbage_once_up, gateway)
        async with stdio_streams(
            FastLane(gateway, server.server_info_stamp), config.settings.stdio_max_message_bytes
        ) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        logger.info("client disconnected; stopping downstream servers")
        tg.cancel_scope.cancel()


class _WebServer(uvicorn.Server):
    """uvicorn without its own signal handling: after a graceful shutdown uvicorn re-raises the
    signal, which would kill the process before the downstream children are stopped."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signal(web: uvicorn.Server) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            logger.info("received %s; stopping", signal.Signals(signum).name)
            web.should_exit = True
            return


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


async def serve_http(config: Config, store: Store, host: str, port: int) -> None:
    gateway = Gateway(config, store)
    server = build_server(gateway)
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
    # The edge sets X-Accel-Buffering on its own answers; everything else passes the SDK.
    fast = HttpFastLane(
        NoProxyBuffering(app),
        FastLane(gateway, server.server_info_stamp, http=True),
        MCP_PATH,
        HostGuard(security.allowed_hosts, security.allowed_origins),
        max_bytes,
    )
    web = _WebServer(uvicorn.Config(fast, host=host, port=port, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        tg.start_soon(_collect_garbage_once_up, gateway)
        tg.start_soon(_stop_on_signal, web)
        tg.start_soon(_announce_when_listening, web, gateway, host, port)
        await web.serve()
        logger.info("HTTP server stopped; stopping downstream servers")
        tg.cancel_scope.cancel()


async def _announce_when_listening(web: uvicorn.Server, gateway: Gateway, host: str, port: int) -> None:
    while not web.started:
        await anyio.sleep(0.05)
    await gateway.started.wait()
    toolset = gateway.toolset.name if gateway.toolset else "none"
    print(
        f"toolkeeper: serving {len(gateway.catalog.tools)} tools from {len(gateway.config.servers)} servers "
        f"at http://{host}:{port}{MCP_PATH} (mode: {gateway.mode_name}, toolset: {toolset}, "
        f"store: {gateway.store.label if gateway.store else 'none'})",
        file=sys.stderr,
        flush=True,
    )
