"""Where the dashboard enters: behind the same Host/Origin guard as `/mcp`, on the gateway's own
port (`serve --ui --transport http`) or on a port of its own (`serve --ui` over stdio, and
`toolkeeper ui`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from toolkeeper.config.model import Config
from toolkeeper.edge.auth import reachable_beyond_loopback
from toolkeeper.edge.guard import HostGuard
from toolkeeper.edge.http_fastlane import respond
from toolkeeper.edge.throttle import FailureThrottle
from toolkeeper.faces.web.access import TOKEN_ENV, Access, ui_token
from toolkeeper.faces.web.app import build_web_app
from toolkeeper.runtime.gateway import Gateway

WELL_KNOWN = "/.well-known/"


class CannotServeDashboard(Exception):
    """The dashboard has nothing to show: there is no store."""


@dataclass(frozen=True)
class Dashboard:
    app: ASGIApp  # already behind the guard
    token: str
    token_made_here: bool

    def announce(self, host: str, port: int) -> None:
        """Where the dashboard is, on stderr (stdout may be a client's stdio stream)."""
        address = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
        if self.token_made_here:
            where = f"{address}?token={self.token} (a new token at each start; set {TOKEN_ENV} to keep one)"
        else:
            where = f"{address} (token from {TOKEN_ENV})"
        print(f"toolkeeper: dashboard at {where}", file=sys.stderr, flush=True)


def dashboard(
    gateway: Gateway, config: Config, host: str, guard: HostGuard, *, throttle: FailureThrottle | None = None
) -> Dashboard:
    """The dashboard over `gateway`'s services, guarded as `/mcp` is; its failed sign-ins are
    counted by `throttle` (`/mcp`'s, when they share a port), else by a throttle of its own."""
    if gateway.services is None:
        raise CannotServeDashboard(
            "the dashboard needs the store, and this gateway runs without one; set toolkeeper.home "
            "or toolkeeper.databaseUrl (or leave them unset for the default store)"
        )
    token, made = ui_token()
    access = Access(
        token=token,
        keys=lambda: gateway.keys,
        throttle=throttle or FailureThrottle(),
        pages_need_token=reachable_beyond_loopback(config, host) is not None,
        max_body_bytes=config.settings.http_max_request_bytes,
    )
    return Dashboard(Guarded(build_web_app(gateway, gateway.services, access), guard), token, made)


class Guarded:
    """The HostGuard's answer before the app sees a request: 421 for a foreign Host, 403 for a
    foreign Origin (a page of another site posting to the dashboard)."""

    def __init__(self, app: ASGIApp, guard: HostGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            problem = self.guard.problem(headers.get("host"), headers.get("origin"))
            if problem is not None:
                await respond(send, problem[0], problem[1].encode(), b"text/plain; charset=utf-8")
                return
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)


class McpOrDashboard:
    """One port for both: `/mcp` and the OAuth metadata to the MCP edge, the rest to the dashboard."""

    def __init__(self, mcp: ASGIApp, web: ASGIApp, mcp_path: str) -> None:
        self.mcp = mcp
        self.web = web
        self.mcp_path = mcp_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "lifespan" or path == self.mcp_path or path.startswith(WELL_KNOWN):
            await self.mcp(scope, receive, send)
        else:
            await self.web(scope, receive, send)
