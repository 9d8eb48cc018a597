"""Signing in to remote servers under `/api/`: each account's state, beginning a sign-in (its
address to open; the browser comes back to the dashboard's `/oauth/callback`), signing out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.errors import ServiceError
from toolkeeper.faces.web.face import JsonResponse, face_of, json_object
from toolkeeper.faces.web.pages.signin import callback_uri


async def states(request: Request) -> Response:
    """Each remote server that signs in, with its account's state.
    ---
    summary: List the sign-ins
    description: For each remote server that signs in when asked, the account this dashboard
      uses (the gateway's own, or with `account` one principal's where each signs in as
      themselves) and its state, "signed in" (with the remote subject, since and expires, in
      seconds since the epoch), "needs sign-in" or "not needed yet" (the server has not asked).
      Never a token.
    parameters:
      - {name: account, in: query, required: false, schema: {type: string}, description: "KIND:NAME"}
    responses:
      200: {description: "{signIns: [...]}"}
    """
    account = request.query_params.get("account") or None
    service = face_of(request).sign_in
    return JsonResponse({"signIns": [state.as_json() for state in service.states(account)]})


async def begin(request: Request) -> Response:
    """Begin a sign-in.
    ---
    summary: Begin a sign-in to a server
    description: Starts a person's sign-in and answers the authorization server's address to open
      in a browser; the browser comes back to this dashboard's `/oauth/callback`, which completes
      it. The body may name the `account` (KIND:NAME) for a server whose accounts are each
      principal's own.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
    responses:
      201: {description: "{server, account, url}"}
      404: {description: No server of that name}
      422: {description: "The server does not sign in a person, or the account is malformed"}
      503: {description: The server or its authorization server cannot be reached}
    """
    name = request.path_params["name"]
    body = await json_object(request, required=False)
    account = body.get("account")
    if account is not None and not isinstance(account, str):
        raise ServiceError("'account' must be a string: KIND:NAME.")
    pending = await face_of(request).sign_in.begin(name, account, callback_uri(request))
    return JsonResponse(
        {"server": pending.server, "account": pending.account, "url": pending.url}, status_code=201
    )


async def sign_out(request: Request) -> Response:
    """Sign out of a server.
    ---
    summary: Sign out of a server
    description: Revokes the account's tokens where the authorization server supports revocation,
      and forgets them. `revoked` says whether the server revoked them.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
    responses:
      200: {description: "{server, account, wasSignedIn, revoked, message}"}
      404: {description: No server of that name}
    """
    name = request.path_params["name"]
    body = await json_object(request, required=False)
    account = body.get("account")
    if account is not None and not isinstance(account, str):
        raise ServiceError("'account' must be a string: KIND:NAME.")
    return JsonResponse(await face_of(request).sign_in.logout(name, account))


ROUTES: list[BaseRoute] = [
    Route("/sign-ins", states, methods=["GET"]),
    Route("/servers/{name}/sign-in", begin, methods=["POST"]),
    Route("/servers/{name}/sign-out", sign_out, methods=["POST"]),
]
