"""Signing the gateway in to a remote server from the dashboard: the overview's Sign in button
begins it and sends the browser to the authorization server, which sends it back to
`/oauth/callback`; the overview then says how it went. Sign out forgets the account.

The callback is reached without the dashboard's cookie or token (a redirect from another site
carries no SameSite=Strict cookie): the sign-in's state, given out by this gateway and good
once, is what it checks. So is a sign-in link (downstreams/signin/links.py), which a caller
whose own account needs a sign-in is given: it begins that account's sign-in, and its callback
answers with a page of its own, since its holder may not see the dashboard.
"""

from __future__ import annotations

import html
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolkeeper.downstreams.signin.client_document import (
    CALLBACK_PATH,
    DOCUMENT_PATH,
    callback_url,
    client_document,
)
from toolkeeper.downstreams.signin.links import LINK_PATH, SignInLinks
from toolkeeper.errors import ServiceError
from toolkeeper.faces.web.face import face_of
from toolkeeper.services.signin import Refused, SignInService


def service_of(request: Request) -> SignInService:
    return face_of(request).sign_in


def callback_uri(request: Request) -> str:
    """The dashboard's own callback: at the gateway's public address where it has one (the one
    its client ID metadata document names), else at the scheme, host and port this request came
    to (the Host guard has already checked the host)."""
    public_url = face_of(request).gateway.config.settings.http_public_url
    if public_url is not None:
        return callback_url(public_url)
    return str(request.base_url).rstrip("/") + CALLBACK_PATH


async def own_client_document(request: Request) -> Response:
    """The gateway's client ID metadata document, fetched by authorization servers."""
    public_url = face_of(request).gateway.config.settings.http_public_url
    document = client_document(public_url) if public_url is not None else None
    if document is None:
        return Response("no client ID metadata document: http.publicUrl is not an https address", 404)
    return JSONResponse(document, headers={"cache-control": "public, max-age=3600"})


async def begin(request: Request) -> Response:
    """Begin a sign-in and send the browser to the authorization server's page."""
    name = request.path_params["name"]
    form = await request.form()
    account = form.get("account")
    pending = await service_of(request).begin(
        name, account if isinstance(account, str) and account else None, callback_uri(request)
    )
    return RedirectResponse(pending.url, status_code=303)


def links_of(request: Request) -> SignInLinks:
    return face_of(request).gateway.sign_in_prompts.links


async def link_page(request: Request) -> Response:
    """A sign-in link opened: which account of which server it signs in, and a button that begins
    it. Opening it uses nothing (a link preview does not spend it), and whoever was sent someone
    else's link sees whose account they would be signing in before they do."""
    link = links_of(request).peek(request.path_params["token"])
    if link is None:
        return _link_not_valid()
    server, account = html.escape(link.server), html.escape(link.account)
    body = (
        f"<p>This signs in the toolkeeper account <strong>{account}</strong> to the server "
        f"<strong>{server}</strong>: its calls to {server} will use the account you sign in to there. "
        f"Continue only if you are {account}.</p>"
        f'<form method="post"><button type="submit">Continue to sign in to {server}</button></form>'
    )
    return _standalone_page(f"Sign in to {link.server}", body, escaped=True)


async def begin_by_link(request: Request) -> Response:
    """A sign-in link's button: begin the sign-in of the one account it was made for, once."""
    links = links_of(request)
    link = links.redeem(request.path_params["token"])
    if link is None:
        return _link_not_valid()
    try:
        pending = await service_of(request).begin(link.server, link.account, callback_uri(request))
    except ServiceError as exc:
        return _standalone_page("Sign-in failed", str(exc), status=502)
    links.began(pending.state)
    return RedirectResponse(pending.url, status_code=303)


def _link_not_valid() -> Response:
    return _standalone_page(
        "Sign-in link not valid",
        "This sign-in link was used already, took too long, or was not made here. Call the "
        "tool again for a new one.",
        status=404,
    )


async def callback(request: Request) -> Response:
    """The authorization server's answer: complete the sign-in it belongs to, then back to the
    overview with its outcome (a page of its own for a sign-in begun by a link). A state that
    `toolkeeper login` expects is handed over to it through the store; any other state this
    gateway did not give out gets a page of its own."""
    params = request.query_params
    state = params.get("state", "")
    answer = {"code": params.get("code"), "iss": params.get("iss"), "error": params.get("error")}
    service = service_of(request)
    # Asked before the keeper, which refuses (and logs as foreign) any state it did not give out.
    if service.begun(state) is None and await face_of(request).services.sign_in_handoffs.hand_over(
        state, **answer
    ):
        return _standalone_page(
            "Back to your terminal",
            "toolkeeper login finishes this sign-in now: see your terminal. You can close this page.",
        )
    by_link = links_of(request).begun_here(state)
    try:
        done = await service.complete(state, **answer)
    except Refused as exc:
        return _refused_page(str(exc))
    except ServiceError as exc:
        if by_link:
            return _standalone_page("Sign-in failed", str(exc), status=400)
        return _back_to_overview(request, str(exc), ok=False)
    if by_link:
        return _standalone_page(
            "Signed in", f"{done.message} You can close this page and call the tool again."
        )
    return _back_to_overview(request, done.message, ok=True)


async def sign_out(request: Request) -> Response:
    name = request.path_params["name"]
    form = await request.form()
    account = form.get("account")
    result = await service_of(request).logout(name, account if isinstance(account, str) and account else None)
    return _back_to_overview(request, result["message"], ok=True)


def _back_to_overview(request: Request, message: str, *, ok: bool) -> Response:
    key = face_of(request).flashes.put(message, ok=ok)
    return RedirectResponse("/?" + urlencode({"flash": key}), status_code=303)


def _standalone_page(title: str, message: str, *, status: int = 200, escaped: bool = False) -> Response:
    """A page for a sign-in link's holder, who may not see the dashboard. `escaped`: `message` is
    HTML already, made of escaped parts."""
    content = message if escaped else f"<p>{html.escape(message)}</p>"
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>toolkeeper: {html.escape(title)}</title>"
        '<link rel="stylesheet" href="/static/style.css"></head>'
        f'<body class="login"><main><h1>{html.escape(title)}</h1>'
        f"{content}</main></body></html>"
    )
    return HTMLResponse(page, status_code=status)


def _refused_page(message: str) -> Response:
    """Standalone, as the login page is: whoever sent this request may not see the dashboard."""
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>toolkeeper: sign-in refused</title>"
        '<link rel="stylesheet" href="/static/style.css"></head>'
        '<body class="login"><main><h1>Sign-in refused</h1>'
        f'<p class="error">{html.escape(message)}</p>'
        "<p>This address finishes a sign-in begun on this dashboard or with <code>toolkeeper login</code>; "
        "this one was not begun here, was finished already, or took too long. Start it again from the "
        '<a href="/">overview</a>.</p></main></body></html>'
    )
    return HTMLResponse(page, status_code=400)


ROUTES: list[BaseRoute] = [
    Route("/servers/{name}/sign-in", begin, methods=["POST"], name="sign_in"),
    Route("/servers/{name}/sign-out", sign_out, methods=["POST"], name="sign_out"),
    Route(CALLBACK_PATH, callback, methods=["GET"], name="oauth_callback"),
    Route(LINK_PATH + "{token}", link_page, methods=["GET"], name="sign_in_link"),
    Route(LINK_PATH + "{token}", begin_by_link, methods=["POST"], name="sign_in_link_begin"),
    Route(DOCUMENT_PATH, own_client_document, methods=["GET"], name="client_metadata_document"),
]
