"""A remote MCP server that wants a sign-in: streamable HTTP (both protocol eras, as the SDK serves
them) behind the SDK's own server-side OAuth (`mcp.server.auth`), with its authorization server
built in and kept in memory.

The authorization server offers what the MCP authorization spec asks of one: metadata (RFC 8414)
and protected resource metadata (RFC 9728), dynamic client registration, PKCE, refresh tokens
(rotated on every use) and revocation. `/authorize` approves at once with `--auto-approve`, or
shows a small consent page whose "Approve" button signs in as the user name typed there.

Its tools prove whose token a call carried: `whoami` answers with the token's subject, client id
and a fingerprint of the token (never the token), `echo` with its `text`.

    python tests/servers/protected_mcp.py --auto-approve --token-seconds 60
    # prints the port it listens on, then serves http://127.0.0.1:PORT/mcp

Routes under `/admin/` let a test act as the person or the operator of the server, without a
clock: `POST /admin/expire` (access tokens expire now), `POST /admin/revoke` (refresh tokens, or
with `?access=1` access tokens too, stop working), `POST /admin/subject?name=bob` (who the next
auto-approved sign-in is), `POST /admin/token-endpoint?down=1` (the token endpoint answers 503),
`GET /admin/stats` (what the server has seen, as JSON). Each takes `?subject=` to pick whose
tokens. Faults in the metadata come from `--lie`.

With `--client-metadata-documents-from BASE` the authorization server also takes client ID
metadata documents (it says `client_id_metadata_document_supported`): a client id that is an
https URL is that client's document, fetched from BASE with the URL's path (BASE stands in for the
https proxy in front of the client's host) and taken only if its `client_id` is that URL.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import secrets
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
import httpx2
import mcp_types as types
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

SCOPE = "mcp"
CODE_SECONDS = 300
LIES = ("issuer", "token-origin", "insecure-endpoint", "token-not-json")


def fingerprint(token: str) -> str:
    """Enough of a token's digest to tell two tokens apart, and nothing that could be replayed."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class LoopbackClient(OAuthClientInformationFull):
    """A pre-registered client may come back to any loopback port (RFC 8252 §7.3): a CLI's
    sign-in opens a port of its own each time."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if (
            redirect_uri is not None
            and redirect_uri.scheme == "http"
            and redirect_uri.host in ("127.0.0.1", "localhost")
        ):
            return redirect_uri
        return super().validate_redirect_uri(redirect_uri)


@dataclass
class Options:
    auto_approve: bool
    token_seconds: int
    jwt_tokens: bool
    subject_per_client: bool
    subject: str
    lie: str | None
    # Where the client ID metadata documents of https client ids are fetched (None: not taken).
    documents_from: str | None = None
    json_response: bool = False


@dataclass
class Pending:
    """An authorization request waiting for the person's approval on the consent page."""

    client_id: str
    params: AuthorizationParams


@dataclass
class AuthorizationServer:
    """The in-memory authorization server: an `OAuthAuthorizationServerProvider` for the SDK."""

    issuer: str
    resource: str
    options: Options
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    pending: dict[str, Pending] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)
    token_endpoint_down: bool = False

    # --- clients

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        known = self.clients.get(client_id)
        if known is None and client_id.startswith("https://") and self.options.documents_from:
            return await self.client_from_document(client_id)
        return known

    async def client_from_document(self, url: str) -> OAuthClientInformationFull | None:
        async with httpx2.AsyncClient(timeout=10) as http:
            answer = await http.get(self.options.documents_from + urlsplit(url).path)
        if answer.status_code != 200:
            return None
        document = answer.json()
        if document.get("client_id") != url:
            return None
        self.seen["metadata_documents"] += 1
        return OAuthClientInformationFull.model_validate({**document, "scope": SCOPE})

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.seen["registrations"] += 1
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    def preregister(self, client_id: str, secret: str | None) -> None:
        self.clients[client_id] = LoopbackClient(
            client_id=client_id,
            client_secret=secret,
            redirect_uris=[AnyUrl("http://127.0.0.1/callback")],
            token_endpoint_auth_method="client_secret_post" if secret else "none",
            grant_types=["authorization_code", "refresh_token"],
            scope=SCOPE,
        )

    # --- authorization

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        self.seen["authorizations"] += 1
        assert client.client_id is not None
        if self.options.auto_approve:
            return self.approve(client.client_id, params, self.subject_for(client.client_id))
        request_id = secrets.token_urlsafe(16)
        self.pending[request_id] = Pending(client.client_id, params)
        return f"{self.issuer}/consent?{urlencode({'request': request_id})}"

    def subject_for(self, client_id: str) -> str:
        return client_id if self.options.subject_per_client else self.options.subject

    def approve(self, client_id: str, params: AuthorizationParams, subject: str) -> str:
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + CODE_SECONDS,
            client_id=client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=subject,
        )
        # RFC 9207: the issuer in the redirect lets the client tell which server answered.
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.issuer
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:
            raise TokenError("invalid_grant", "authorization code already used")
        self.seen["code_exchanges"] += 1
        return self.issue(
            authorization_code.client_id,
            authorization_code.scopes,
            authorization_code.subject,
            authorization_code.resource,
        )

    # --- tokens

    def issue(
        self, client_id: str, scopes: list[str], subject: str | None, resource: str | None
    ) -> OAuthToken:
        expires_at = int(time.time()) + self.options.token_seconds
        token = self.new_access_token(client_id, subject, expires_at, resource)
        self.access[token] = AccessToken(
            token=token,
            client_id=client_id,
            scopes=scopes,
            expires_at=expires_at,
            resource=resource,
            subject=subject,
            claims={"iss": self.issuer},
        )
        refresh = secrets.token_urlsafe(32)
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        return OAuthToken(
            access_token=token,
            token_type="Bearer",
            expires_in=self.options.token_seconds,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    def new_access_token(
        self, client_id: str, subject: str | None, expires_at: int, resource: str | None
    ) -> str:
        if not self.options.jwt_tokens:
            return secrets.token_urlsafe(32)
        # JWT-shaped so a client that peeks at `sub` can; it is looked up like an opaque one.
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": resource or self.resource,
            "client_id": client_id,
            "exp": expires_at,
            "jti": secrets.token_urlsafe(12),
        }
        return (
            ".".join(_b64(json.dumps(part).encode()) for part in ({"alg": "HS256", "typ": "JWT"}, claims))
            + "."
            + _b64(secrets.token_bytes(32))
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token revoked")
        self.seen["refreshes"] += 1
        return self.issue(
            refresh_token.client_id,
            scopes or refresh_token.scopes,
            refresh_token.subject,
            refresh_token.resource,
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.resource is not None and access.resource.rstrip("/") != self.resource):
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.seen["revocations"] += 1
        self.forget(lambda other: other.client_id == token.client_id and other.subject == token.subject, True)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "identity assertions are not accepted here")

    def forget(self, whose: Any, access_too: bool) -> int:
        """Drops the refresh tokens (and, if asked, access tokens) `whose` picks; how many went."""
        gone = [key for key, value in self.refresh.items() if whose(value)]
        if access_too:
            gone += [key for key, value in self.access.items() if whose(value)]
        for key in gone:
            self.refresh.pop(key, None)
            self.access.pop(key, None)
        return len(gone)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# --- the consent page


CONSENT_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Sign in to protected-mcp</title></head>
<body><h1>Sign in to protected-mcp</h1>
<p><b>{client}</b> asks to use your account.</p>
<form method="post" action="/consent">
<input type="hidden" name="request" value="{request}">
<label>User name <input name="user" value="{user}"></label>
<button type="submit" name="answer" value="approve">Approve</button>
<button type="submit" name="answer" value="deny">Deny</button>
</form></body></html>"""


def consent_routes(server: AuthorizationServer) -> list[Route]:
    async def show(request: Request) -> Response:
        pending = server.pending.get(request.query_params.get("request", ""))
        if pending is None:
            return HTMLResponse(
                "<p>This sign-in request is unknown or already answered.</p>", status_code=400
            )
        client = server.clients[pending.client_id]
        page = CONSENT_PAGE.format(
            client=html.escape(client.client_name or pending.client_id),
            request=html.escape(request.query_params["request"]),
            user=html.escape(server.options.subject),
        )
        return HTMLResponse(page)

    async def answer(request: Request) -> Response:
        form = await request.form()
        pending = server.pending.pop(str(form.get("request", "")), None)
        if pending is None:
            return HTMLResponse(
                "<p>This sign-in request is unknown or already answered.</p>", status_code=400
            )
        if form.get("answer") != "approve":
            denied = construct_redirect_uri(
                str(pending.params.redirect_uri), error="access_denied", state=pending.params.state
            )
            return RedirectResponse(denied, status_code=302)
        subject = str(form.get("user") or server.options.subject)
        return RedirectResponse(server.approve(pending.client_id, pending.params, subject), status_code=302)

    return [Route("/consent", show, methods=["GET"]), Route("/consent", answer, methods=["POST"])]


# --- what a test may do to the server


def admin_routes(server: AuthorizationServer) -> list[Route]:
    def whose(request: Request) -> Any:
        subject = request.query_params.get("subject")
        return lambda token: subject is None or token.subject == subject

    async def expire(request: Request) -> Response:
        pick = whose(request)
        expired = 0
        for token in server.access.values():
            if pick(token):
                token.expires_at = int(time.time()) - 1
                expired += 1
        return JSONResponse({"expired": expired})

    async def revoke(request: Request) -> Response:
        revoked = server.forget(whose(request), request.query_params.get("access") == "1")
        return JSONResponse({"revoked": revoked})

    async def subject(request: Request) -> Response:
        server.options.subject = request.query_params["name"]
        return JSONResponse({"subject": server.options.subject})

    async def token_endpoint(request: Request) -> Response:
        server.token_endpoint_down = request.query_params.get("down") == "1"
        return JSONResponse({"down": server.token_endpoint_down})

    async def stats(request: Request) -> Response:
        live = {
            "clients": len(server.clients),
            "access_tokens": len(server.access),
            "refresh_tokens": len(server.refresh),
            "subjects": sorted({token.subject or "" for token in server.access.values()}),
        }
        return JSONResponse({**server.seen, **live})

    return [
        Route("/admin/expire", expire, methods=["POST"]),
        Route("/admin/revoke", revoke, methods=["POST"]),
        Route("/admin/subject", subject, methods=["POST"]),
        Route("/admin/token-endpoint", token_endpoint, methods=["POST"]),
        Route("/admin/stats", stats, methods=["GET"]),
    ]


# --- lies


def lying_metadata(server: AuthorizationServer) -> dict[str, Any]:
    """The authorization server's metadata as `--lie` has it misstate itself, and saying whether it
    takes client ID metadata documents (which the SDK's own metadata cannot say)."""
    base = server.issuer
    metadata: dict[str, Any] = {
        "issuer": base,
        "authorization_endpoint": f"{base}/authorize",
        "token_endpoint": f"{base}/token",
        "registration_endpoint": f"{base}/register",
        "revocation_endpoint": f"{base}/revoke",
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic", "none"],
        "code_challenge_methods_supported": ["S256"],
    }
    if server.options.documents_from:
        metadata["client_id_metadata_document_supported"] = True
    if server.options.lie == "issuer":
        metadata["issuer"] = "http://127.0.0.1:1/someone-else"
    elif server.options.lie == "token-origin":
        metadata["token_endpoint"] = "http://127.0.0.1:1/token"
    elif server.options.lie == "insecure-endpoint":
        metadata["token_endpoint"] = "http://tokens.example.com/token"
    return metadata


class Lies:
    """Answers the metadata (and, for `token-not-json`, the token endpoint) before the SDK does."""

    def __init__(self, app: ASGIApp, server: AuthorizationServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lie = self.server.options.lie
        path = scope.get("path", "")
        own_metadata = lie or self.server.options.documents_from
        if scope["type"] == "http" and own_metadata and path == "/.well-known/oauth-authorization-server":
            await JSONResponse(lying_metadata(self.server))(scope, receive, send)
        elif scope["type"] == "http" and lie == "token-not-json" and path == "/token":
            await Response("<html>not a token</html>", media_type="text/html")(scope, receive, send)
        else:
            await self.app(scope, receive, send)


# --- the MCP server


def tools() -> list[types.Tool]:
    return [
        types.Tool(
            name="whoami",
            description="Whose token this call carried: its subject, client id and fingerprint.",
            input_schema={"type": "object", "properties": {}},
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        ),
        types.Tool(
            name="echo",
            description="Answers with `text`.",
            input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        ),
    ]


def mcp_server(seen: Counter[str]) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools())

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        seen[f"calls.{params.name}"] += 1
        if params.name == "echo":
            return types.CallToolResult(
                content=[types.TextContent(text=str((params.arguments or {}).get("text")))]
            )
        token = get_access_token()
        assert token is not None  # the bearer middleware lets no call through without one
        who = {
            "subject": token.subject,
            "client_id": token.client_id,
            "token": fingerprint(token.token),
            "scopes": token.scopes,
        }
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(who))], structured_content=who)

    return Server("protected-mcp", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


def build_app(
    port: int, options: Options, preregistered: list[tuple[str, str | None]]
) -> tuple[ASGIApp, AuthorizationServer]:
    issuer = f"http://127.0.0.1:{port}"
    server = AuthorizationServer(issuer=issuer, resource=f"{issuer}/mcp", options=options)
    for client_id, secret in preregistered:
        server.preregister(client_id, secret)
    # Validated from strings, as the settings keep a path-less issuer without a trailing slash
    # (an `AnyHttpUrl` made first would add one, and the issuer is compared exactly).
    auth = AuthSettings.model_validate(
        {
            "issuer_url": issuer,
            "resource_server_url": server.resource,
            "required_scopes": [SCOPE],
            "client_registration_options": ClientRegistrationOptions(
                enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
            ),
            "revocation_options": RevocationOptions(enabled=True),
            # load_access_token compares the token's resource itself, so a token asked for
            # without one still works.
            "validate_token_resource": False,
        }
    )
    app: Starlette = mcp_server(server.seen).streamable_http_app(
        streamable_http_path="/mcp",
        json_response=options.json_response,
        host="127.0.0.1",
        auth=auth,
        auth_server_provider=server,
        token_verifier=TokenLookup(server),
        custom_starlette_routes=consent_routes(server) + admin_routes(server),
    )
    return TokenEndpointSwitch(Lies(app, server), server), server


class TokenLookup:
    """The bearer check of `/mcp`: the server's own table of access tokens."""

    def __init__(self, server: AuthorizationServer) -> None:
        self.server = server

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.server.load_access_token(token)


class TokenEndpointSwitch:
    """`/admin/token-endpoint?down=1` makes the token endpoint answer 503, as one that is down."""

    def __init__(self, app: ASGIApp, server: AuthorizationServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.server.token_endpoint_down and scope.get("path") == "/token":
            await Response("token endpoint unavailable", status_code=503)(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def parse_client(value: str) -> tuple[str, str | None]:
    client_id, _, secret = value.partition(":")
    return client_id, secret or None


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="the port (default: a free one, printed)")
    parser.add_argument("--auto-approve", action="store_true", help="approve every sign-in without a page")
    parser.add_argument("--token-seconds", type=int, default=3600, help="access token lifetime")
    parser.add_argument("--jwt", action="store_true", help="JWT-shaped access tokens (with `sub`)")
    parser.add_argument("--subject", default="alice", help="who an auto-approved sign-in is")
    parser.add_argument(
        "--subject-per-client", action="store_true", help="each registered client signs in as its own subject"
    )
    parser.add_argument(
        "--client", action="append", default=[], type=parse_client, help="pre-register CLIENT_ID[:SECRET]"
    )
    parser.add_argument(
        "--json-response",
        action="store_true",
        help="answer a request with one JSON body instead of an event stream (less work per call)",
    )
    parser.add_argument("--lie", choices=LIES, help="misstate the metadata or the token answer")
    parser.add_argument(
        "--client-metadata-documents-from",
        metavar="BASE",
        help="take client ID metadata documents, fetching an https client id's path from BASE",
    )
    parser.add_argument(
        "--lying-issuer", action="store_const", const="issuer", dest="lie", help="--lie issuer"
    )
    return parser.parse_args()


def main() -> None:
    args = arguments()
    options = Options(
        auto_approve=args.auto_approve,
        token_seconds=args.token_seconds,
        jwt_tokens=args.jwt,
        subject_per_client=args.subject_per_client,
        subject=args.subject,
        lie=args.lie,
        documents_from=args.client_metadata_documents_from,
        json_response=args.json_response,
    )
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    app, _ = build_app(port, options, args.client)
    anyio.run(serve, app, sock)


async def serve(app: ASGIApp, sock: socket.socket) -> None:
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve, [sock])
        while not server.started:
            await anyio.sleep(0.01)
        # The port on stdout is the fixture's sign that the server is listening.
        print(sock.getsockname()[1], flush=True)


if __name__ == "__main__":
    main()
