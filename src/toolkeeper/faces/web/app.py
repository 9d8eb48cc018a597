"""The dashboard and its JSON API as one Starlette app over a running gateway's services.

Every request passes `AccessGate` (token, CSRF, body size) before a route sees it. Routes come
from the page modules and `api.py`; each parses its input, calls a service and formats the
answer. A `ServiceError` becomes the HTTP status its kind names (404, 409, 422, 503), as JSON
under `/api/` and as the error page elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qs, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkeeper.display import first_line
from toolkeeper.downstreams.signin.client_document import CALLBACK_PATH, DOCUMENT_PATH
from toolkeeper.downstreams.signin.links import LINK_PATH
from toolkeeper.errors import ServiceError
from toolkeeper.faces.web.access import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    PERSON,
    TOKEN_COOKIE,
    UNSAFE_METHODS,
    Access,
    address_of,
    csrf_matches,
    new_session,
)
from toolkeeper.faces.web.face import (
    API_PREFIX,
    HERE,
    STATIC_PREFIX,
    JsonResponse,
    WebFace,
    is_api,
    render,
    service_refusal,
)
from toolkeeper.faces.web.shown import tally, visible_in_page
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.services import Services
from toolkeeper.services.costs import LABEL, figure, share
from toolkeeper.services.signin import sign_in_service


def build_web_app(gateway: Gateway, services: Services, access: Access) -> ASGIApp:
    """The dashboard's app: pages at `/`, JSON at `/api/`, static files at `/static/`."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, finalize=visible_in_page
    )
    environment.filters["first_line"] = first_line
    # Token costs: a tool's or toolset's figure, a total, a share of a whole, and their label.
    environment.filters["figure"] = figure
    environment.filters["tally"] = tally
    environment.filters["share"] = share
    environment.globals["token_label"] = LABEL
    templates = Jinja2Templates(env=environment)
    app = Starlette(
        routes=list(web_routes()),
        exception_handlers={ServiceError: _service_error, HTTPException: _http_error},
    )
    app.state.face = WebFace(gateway, services, access, templates, sign_in_service(gateway))
    return AccessGate(app, access)


def web_routes() -> Sequence[BaseRoute]:
    """Every route of the dashboard, the API's under its mount."""
    from toolkeeper.faces.web import api, pages

    return [
        Mount(STATIC_PREFIX, app=StaticFiles(directory=HERE / "static"), name="static"),
        Mount(API_PREFIX, routes=api.routes()),
        *pages.routes(),
    ]


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return service_refusal(request, exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if is_api(request):
        body = {"error": {"kind": "http", "message": exc.detail}}
        return JsonResponse(body, status_code=exc.status_code, headers=exc.headers)
    return render(request, "error.html", {"status": exc.status_code, "message": exc.detail}, exc.status_code)


class AccessGate:
    """Token, CSRF and body size for every request (see access.py for the rules)."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Steps, in order: static files pass; a page opened with `?token=` signs in; a request
        that needs the token or an admin key (`Access.needs_credential`) and has neither is
        refused; a browser without a session gets one, and the form token of its session and
        credential is left for the pages; a state-changing request must fit the size limit and,
        carried by the cookie, echo that form token."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = request.url.path
        if (
            path.startswith(STATIC_PREFIX + "/")
            or (request.method == "GET" and path in (CALLBACK_PATH, DOCUMENT_PATH))
            or (request.method in ("GET", "POST") and path.startswith(LINK_PATH))
        ):
            # The sign-in callback comes from the authorization server's site, which sends no
            # SameSite=Strict cookie: the state it carries, given out here, is its credential. A
            # sign-in link is opened by whoever was given it, who may hold only a client key: the
            # link, good once for one account, is its own credential. The client ID metadata
            # document is public: authorization servers fetch it.
            await self.app(scope, receive, send)
            return
        is_api = path == API_PREFIX or path.startswith(API_PREFIX + "/")
        query_token = request.query_params.get("token")
        if query_token is not None and not is_api and request.method == "GET":
            await self._log_in(scope, receive, send, query_token)
            return
        presented, by_header = self.access.presented(request)
        address = address_of(request)
        holder = self.access.holder(presented, address)
        if holder is None and self.access.needs_credential(is_api=is_api, method=request.method):
            where = "in a bearer header" if by_header else "in the cookie"
            if presented and await self._throttled(scope, receive, send, presented, address, where):
                return
            acting = not is_api and not self.access.pages_need_token  # only actions are closed
            await self._refuse_unknown(scope, receive, send, is_api, presented, acting=acting)
            return
        state = scope.setdefault("state", {})
        state["holder"] = holder or PERSON
        # The pages offer a sign-in where their forms would be refused.
        state["read_only"] = holder is None and self.access.actions_need_token
        session = request.cookies.get(CSRF_COOKIE)
        fresh_session = None
        if not session:
            session = fresh_session = new_session()
        # Bound to what the cookie carries: a form is sent with the cookie, never with a header.
        state["csrf"] = self.access.form_token(session, request.cookies.get(TOKEN_COOKIE))
        if request.method in UNSAFE_METHODS:
            # A session made by this very request has had no form, so no token is right for it.
            expected = None if fresh_session else state["csrf"]
            checked = await self._checked_body(request, receive, by_header, expected)
            if isinstance(checked, tuple):
                await _plain(scope, receive, send, *checked)
                return
            receive = checked
        await self.app(scope, receive, _with_session(send, fresh_session) if fresh_session else send)

    async def _checked_body(
        self, request: Request, receive: Receive, by_header: bool, expected: str | None
    ) -> Receive | tuple[int, str]:
        """The body of a state-changing request, to be read again by the route; or the status
        and text it is refused with: over the size limit, or carried by a cookie without the
        `expected` form token (None: no token is right)."""
        body = await self._bounded_body(request, receive)
        if body is None:
            return 413, f"the request body is over {self.access.max_body_bytes} bytes"
        if not by_header and not csrf_matches(expected, await _echoed_csrf(request, body)):
            return 403, "the form's CSRF token is missing or stale: reload the page and send it again"
        return _replay(body)

    async def _log_in(self, scope: Scope, receive: Receive, send: Send, token: str) -> None:
        """A page opened with `?token=`: the cookie is set and the address loses the token."""
        request = Request(scope)
        address = address_of(request)
        if not self.access.accepts(token, address):
            if token and await self._throttled(
                scope, receive, send, token, address, "in ?token= (the sign-in form)"
            ):
                return
            await self._refuse_unknown(scope, receive, send, False, token)
            return
        rest = {k: v for k, v in parse_qs(request.url.query).items() if k != "token"}
        target = request.url.path + ("?" + urlencode(rest, doseq=True) if rest else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")
        await response(scope, receive, send)

    async def _refuse_unknown(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        is_api: bool,
        presented: str | None,
        *,
        acting: bool = False,
    ) -> None:
        why = "a wrong access token" if presented else "no access token"
        if acting:
            why += (
                ": changing anything here needs the dashboard's token or an admin client key, "
                "because /mcp asks its clients for a credential"
            )
        message = (
            f"401: {why}. Send the dashboard's token (printed when it started, or "
            "TOOLKEEPER_UI_TOKEN) or an admin client key as 'Authorization: Bearer <token>', "
            "or open a page with ?token=<token>"
        )
        response: Response
        if is_api:
            response = JsonResponse({"error": {"kind": "unauthorized", "message": message}}, status_code=401)
        else:
            # An action's address may take no GET: signing in from here opens the overview.
            back = "/" if acting else ""
            page = _LOGIN_PAGE.format(message=_escape(message), action=back)
            response = HTMLResponse(page, status_code=401)
        response.headers["www-authenticate"] = 'Bearer realm="toolkeeper dashboard"'
        await response(scope, receive, send)

    async def _throttled(
        self, scope: Scope, receive: Receive, send: Send, presented: str, address: str, where: str
    ) -> bool:
        """Count a token that opened nothing (`where` says how it came); True when the answer,
        sent here, is 429: its address or what it tried is throttled."""
        wait = self.access.refused(presented, address, where)
        if not wait:
            return False
        seconds = str(int(wait) + 1)
        message = f"429: too many wrong tokens from this address or for this token; try again in {seconds} s."
        await _plain(scope, receive, send, 429, message, kind="throttled", headers={"retry-after": seconds})
        return True

    async def _bounded_body(self, request: Request, receive: Receive) -> bytes | None:
        """The whole body, or None once it is over the limit (declared or sent)."""
        limit = self.access.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


async def _echoed_csrf(request: Request, body: bytes) -> str | None:
    header = request.headers.get(CSRF_HEADER)
    if header:
        return header
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/x-www-form-urlencoded"):
        values = parse_qs(body.decode("latin-1")).get(CSRF_FIELD)
        return values[0] if values else None
    if content_type.startswith("multipart/form-data"):  # a form that uploads a file
        async with Request(request.scope, _replay(body)).form() as form:
            value = form.get(CSRF_FIELD)
        return value if isinstance(value, str) else None
    return None


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _with_session(send: Send, session: str) -> Send:
    """`send`, whose answer also sets the browser's new session (HttpOnly: no script reads it)."""
    cookie = f"{CSRF_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict".encode("latin-1")

    async def send_with_cookie(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie)]
        await send(message)

    return send_with_cookie


async def _plain(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    text: str,
    *,
    kind: str = "http",
    headers: dict[str, str] | None = None,
) -> None:
    is_api = scope["path"].startswith(API_PREFIX)
    response: Response = (
        JsonResponse({"error": {"kind": kind, "message": text}}, status_code=status, headers=headers)
        if is_api
        else HTMLResponse(_escape(text), status_code=status, headers=headers)
    )
    await response(scope, receive, send)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


# Standalone, so that a refusal never renders the layout (which shows the gateway's state).
_LOGIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>toolkeeper: sign in</title>
<link rel="stylesheet" href="/static/style.css"></head>
<body class="login"><main><h1>toolkeeper</h1><p class="error">{message}</p>
<form method="get" action="{action}"><label>Access token
<input name="token" type="password" autocomplete="current-password" required></label>
<button type="submit">Open the dashboard</button></form></main></body></html>"""
