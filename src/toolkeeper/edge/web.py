"""Where the dashboard enters: behind the same Host guard as `/mcp` and an exact Origin check, on
the gateway's own port (`serve --ui --transport http`) or on a port of its own (`serve --ui`
over stdio, and `toolkeeper ui`). Every answer it gives says that no other site may frame it,
sniff its types or be told its addresses."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkeeper.config.model import Config
from toolkeeper.downstreams.signin.links import SignInLinks
from toolkeeper.edge.auth import credential_required, reachable_beyond_loopback
from toolkeeper.edge.cannot_serve import CannotServeDashboard
from toolkeeper.edge.guard import HostGuard, same_origin
from toolkeeper.edge.http_fastlane import respond
from toolkeeper.edge.throttle import FailureThrottle
from toolkeeper.faces.web.access import TOKEN_ENV, Access, ui_token
from toolkeeper.faces.web.app import build_web_app
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.store import Store
from toolkeeper.store.dashboard_address import publish_dashboard
from toolkeeper.store.db import StoreError

WELL_KNOWN = "/.well-known/"
# Listening on every address names none a caller could open: sign-in links then need
# `http.publicUrl`.
logger = logging.getLogger(__name__)

UNSPECIFIED_HOSTS = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True)
class Dashboard:
    app: ASGIApp  # already behind the guard
    token: str
    token_made_here: bool
    actions_need_token: bool = False
    # The sign-in links callers are given, which begin at the dashboard's address.
    links: SignInLinks | None = None
    # Where `toolkeeper login` learns the dashboard's address (None: nowhere, no store).
    store: Store | None = None

    async def publish(self, host: str, port: int) -> None:
        """Tell `toolkeeper login` where this dashboard is, so its sign-ins come back to this
        gateway's `/oauth/callback` as the Sign in button's do (the store keeps the last one)."""
        if self.store is None or host in UNSPECIFIED_HOSTS:
            return
        address = self.links.base_url if self.links is not None and self.links.base_url else None
        try:
            async with self.store.write() as conn:
                await publish_dashboard(conn, address or _address(host, port))
        except StoreError as exc:
            logger.warning("the dashboard's address was not kept for toolkeeper login: %s", exc)

    def announce(self, host: str, port: int) -> None:
        """Where the dashboard is and how to sign in, on stderr (stdout may be a client's stdio
        stream). From now on, sign-in links can be made: they begin at this address."""
        address = _address(host, port)
        if self.links is not None and self.links.base_url is None and host not in UNSPECIFIED_HOSTS:
            self.links.base_url = address
        if self.token_made_here:
            where = f"{address}?token={self.token} (a new token at each start; set {TOKEN_ENV} to keep one)"
        else:
            where = f"{address} (sign in with ?token=<the token in {TOKEN_ENV}>)"
        if self.actions_need_token:
            where += "; changes need that token or an admin client key, since /mcp asks for a credential"
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
        actions_need_token=credential_required(config, host),
        max_body_bytes=config.settings.http_max_request_bytes,
    )
    app = build_web_app(gateway, gateway.services, access)
    links = gateway.sign_in_prompts.links
    if config.settings.http_public_url is not None:
        # Callers reach the dashboard there, not at the address it listens on.
        links.base_url = config.settings.http_public_url + "/"
    guarded = Guarded(app, guard, HostGuard((), config.settings.http_allowed_origins))
    return Dashboard(guarded, token, made, access.actions_need_token, links, gateway.store)


def _address(host: str, port: int) -> str:
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


# Sent with every answer of the dashboard: no page of another site may frame it (and trick a
# click), a browser takes each answer for the type it says, and no address (which may hold
# `?token=`) leaves for another site in a Referer. Not "no-referrer": with it, browsers send
# `Origin: null` on the dashboard's own forms, and the Origin check would refuse them.
SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
FRAME_ANCESTORS = b"frame-ancestors 'none'"
FOREIGN_ORIGIN = "Invalid Origin header: the dashboard takes requests only from its own pages"


class Guarded:
    """The HostGuard's answer before the app sees a request: 421 for a foreign Host, 403 for an
    Origin that is not the dashboard's own (a page of another site, or of another port of this
    machine, posting to it) nor one the configuration allows (`configured`); and the security
    headers on every answer."""

    def __init__(self, app: ASGIApp, guard: HostGuard, configured: HostGuard) -> None:
        self.app = app
        self.guard = guard
        self.configured = configured

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = with_security_headers(send)
        if scope["type"] == "http":
            problem = self.problem(scope)
            if problem is not None:
                await respond(send, problem[0], problem[1].encode(), b"text/plain; charset=utf-8")
                return
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)

    def problem(self, scope: Scope) -> tuple[int, str] | None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host, origin = headers.get("host"), headers.get("origin")
        problem = self.guard.problem(host, origin)
        if problem is not None or not origin or host is None:
            return problem
        if same_origin(origin, scope.get("scheme", "http"), host) or self.configured.origin_allowed(origin):
            return None
        return 403, FOREIGN_ORIGIN


def with_security_headers(send: Send) -> Send:
    """`send`, whose answer carries SECURITY_HEADERS and a Content-Security-Policy that forbids
    framing (added to one the answer already has)."""

    async def send_secured(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _REPLACED]
            policies = [v for k, v in message.get("headers", []) if k.lower() == b"content-security-policy"]
            if not any(b"frame-ancestors" in policy for policy in policies):
                policies.append(FRAME_ANCESTORS)
            csp = [(b"content-security-policy", b"; ".join(policies))]
            message["headers"] = [*headers, *SECURITY_HEADERS, *csp]
        await send(message)

    return send_secured


_REPLACED = {b"content-security-policy", *(name for name, _ in SECURITY_HEADERS)}


class McpOrDashboard:
    """One port for both: `/mcp`, the OAuth metadata and the edge's own paths (`edge_paths`: the
    probes, /metrics) to the MCP edge, the rest to the dashboard."""

    def __init__(self, mcp: ASGIApp, web: ASGIApp, mcp_path: str, edge_paths: Iterable[str] = ()) -> None:
        self.mcp = mcp
        self.web = web
        self.mcp_path = mcp_path
        self.edge_paths = frozenset(edge_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] == "lifespan"
            or path == self.mcp_path
            or path.startswith(WELL_KNOWN)
            or path in self.edge_paths
        ):
            await self.mcp(scope, receive, send)
        else:
            await self.web(scope, receive, send)
