"""A local OAuth authorization server for tests: real HTTP on 127.0.0.1, keys made in the test.

It publishes its metadata (RFC 8414, and OpenID's document unless told not to), its key set
(JWKS) and a token endpoint for the client-credentials grant, which is what the SDK's
`ClientCredentialsOAuthProvider` needs to get a token without a person. A test mints tokens of
any shape with `mint`, builds the forgeries a verifier must refuse (`unsigned`,
`hmac_signed_with_public_key`), rotates keys with `publish` and `withdraw`, and reads how often
the key set was fetched (`jwks_fetches`).

    with running_issuer() as issuer:
        token = issuer.mint(scope="mcp:tools")
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

DEFAULT_AUDIENCE = "http://127.0.0.1:8765/mcp"
TOKEN_LIFETIME = 300
OMIT: Any = object()  # a claim given this value is left out of the token


@contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """`app` served by uvicorn in a thread on a free port of 127.0.0.1: its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", loop="asyncio", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test HTTP server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@dataclass(frozen=True)
class SigningKey:
    """A key pair of the issuer: `kid` and `alg` are what its tokens' headers say.
    `names_alg`: whether its published JWK says `alg` (without, any algorithm of its kind)."""

    kid: str
    alg: str
    private: Any
    names_alg: bool = True

    @property
    def public(self) -> Any:
        return self.private.public_key()

    def public_pem(self) -> bytes:
        return self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        jwk: dict[str, Any] = algorithm.to_jwk(self.public, as_dict=True)
        named = {"alg": self.alg} if self.names_alg else {}
        return {**jwk, "kid": self.kid, "use": "sig", **named}


def rsa_key(kid: str = "rsa-1", alg: str = "RS256") -> SigningKey:
    return SigningKey(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_key(kid: str = "ec-1", alg: str = "ES256") -> SigningKey:
    curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}[alg]
    return SigningKey(kid, alg, ec.generate_private_key(curve))


def ed25519_key(kid: str = "ed-1") -> SigningKey:
    return SigningKey(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segment(value: dict[str, Any]) -> str:
    return _b64(json.dumps(value, separators=(",", ":")).encode())


@dataclass
class Client:
    """A client registered for the client-credentials grant, and the scopes it may be given."""

    secret: str
    scopes: tuple[str, ...] = ()


@dataclass
class TestIssuer:
    """The authorization server's state; `url` is its issuer identifier once it is served.
    `path` puts the issuer below the host (`http://127.0.0.1:port/tenant`), as some servers do.
    `metadata` says which discovery documents it serves: "both", "oauth" (RFC 8414) or
    "openid"; `metadata_issuer`, the issuer they name if not its own."""

    __test__ = False  # not a test class, whatever its name

    path: str = ""
    metadata: str = "both"
    audience: str = DEFAULT_AUDIENCE
    url: str = ""
    keys: list[SigningKey] = field(default_factory=list)
    clients: dict[str, Client] = field(default_factory=dict)
    jwks_fetches: int = 0
    metadata_fetches: int = 0
    token_requests: list[dict[str, str]] = field(default_factory=list)
    jwks_available: bool = True
    metadata_issuer: str | None = None

    @property
    def signing_key(self) -> SigningKey:
        return self.keys[0]

    @property
    def jwks_uri(self) -> str:
        return f"{self.url}/jwks"

    @property
    def token_endpoint(self) -> str:
        return f"{self.url}/token"

    def publish(self, key: SigningKey) -> SigningKey:
        """Add `key` to the key set (a rotation's first half); tokens may be signed with it."""
        self.keys.append(key)
        return key

    def withdraw(self, key: SigningKey) -> None:
        self.keys.remove(key)

    def register_client(self, client_id: str, *scopes: str) -> str:
        """A client for the client-credentials grant: its secret."""
        secret = secrets.token_urlsafe(16)
        self.clients[client_id] = Client(secret, scopes)
        return secret

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """A valid token's claims for `audience`, with `overrides` (OMIT leaves a claim out)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.url,
            "aud": self.audience,
            "sub": "user-1",
            "iat": now,
            "exp": now + TOKEN_LIFETIME,
            "client_id": "test-client",
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not OMIT}

    def mint(
        self,
        *,
        key: SigningKey | None = None,
        alg: str | None = None,
        kid: str | None = OMIT,
        **claims: Any,
    ) -> str:
        """A token signed with `key` (the first published key by default), its header naming
        `alg` and `kid` (the key's own unless given; `kid=None` names none)."""
        key = key or self.signing_key
        headers: dict[str, Any] = {"typ": "at+jwt"}
        kid = key.kid if kid is OMIT else kid
        if kid is not None:
            headers["kid"] = kid
        return jwt.encode(self.claims(**claims), key.private, algorithm=alg or key.alg, headers=headers)

    def unsigned(self, **claims: Any) -> str:
        """A token with `alg: none` and no signature: valid in every other way."""
        header = {"alg": "none", "typ": "JWT", "kid": self.signing_key.kid}
        return f"{_segment(header)}.{_segment(self.claims(**claims))}."

    def hmac_signed_with_public_key(self, key: SigningKey | None = None, **claims: Any) -> str:
        """The classic forgery: HS256 with the issuer's public key (its PEM) as the secret, in
        the hope the verifier takes the key for an HMAC secret. PyJWT refuses to make it."""
        key = key or self.signing_key
        header = {"alg": "HS256", "typ": "JWT", "kid": key.kid}
        signing_input = f"{_segment(header)}.{_segment(self.claims(**claims))}"
        signature = hmac.new(key.public_pem(), signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(signature)}"

    # --- what it serves -----------------------------------------------------------------------

    def metadata_document(self) -> dict[str, Any]:
        return {
            "issuer": self.metadata_issuer or self.url,
            # Required by RFC 8414 and the SDK's model; answered with an error (no person here).
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": self.token_endpoint,
            "jwks_uri": self.jwks_uri,
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "response_types_supported": ["code"],
        }

    def app(self) -> Starlette:
        routes = [
            Route(f"{self.path}/jwks", self._jwks),
            Route(f"{self.path}/token", self._token, methods=["POST"]),
            Route(f"{self.path}/authorize", self._authorize),
        ]
        if self.metadata in ("both", "oauth"):
            routes.append(Route(f"/.well-known/oauth-authorization-server{self.path}", self._metadata))
        if self.metadata in ("both", "openid"):
            routes.append(Route(f"{self.path}/.well-known/openid-configuration", self._metadata))
        return Starlette(routes=routes)

    async def _metadata(self, request: Request) -> Response:
        self.metadata_fetches += 1
        return JSONResponse(self.metadata_document())

    async def _jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        if not self.jwks_available:
            return JSONResponse({"error": "temporarily_unavailable"}, status_code=503)
        return JSONResponse({"keys": [key.public_jwk() for key in self.keys]})

    async def _authorize(self, request: Request) -> Response:
        return JSONResponse({"error": "unsupported_response_type"}, status_code=400)

    async def _token(self, request: Request) -> Response:
        """The client-credentials grant (RFC 6749 §4.4): the client authenticates with its secret
        (HTTP Basic or in the form); the token is for the requested `resource` (RFC 8707), else
        for `audience`, with the requested scopes the client may have (all of them if it asks
        for none)."""
        form = {name: str(value) for name, value in (await request.form()).items()}
        self.token_requests.append(form)
        client_id, secret = self._client_credentials(request, form)
        client = self.clients.get(client_id or "")
        if client is None or not hmac.compare_digest(client.secret, secret or ""):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "client_credentials":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        asked = form.get("scope", "").split()
        if any(scope not in client.scopes for scope in asked):
            return JSONResponse({"error": "invalid_scope"}, status_code=400)
        granted = " ".join(asked or client.scopes)
        token = self.mint(
            sub=client_id, client_id=client_id, scope=granted, aud=form.get("resource", self.audience)
        )
        return JSONResponse(
            {"access_token": token, "token_type": "Bearer", "expires_in": TOKEN_LIFETIME, "scope": granted}
        )

    @staticmethod
    def _client_credentials(request: Request, form: dict[str, str]) -> tuple[str | None, str | None]:
        basic = request.headers.get("authorization", "")
        if basic.lower().startswith("basic "):
            decoded = base64.b64decode(basic[6:]).decode()
            client_id, _, secret = decoded.partition(":")
            return unquote(client_id), unquote(secret)
        return form.get("client_id"), form.get("client_secret")


@contextmanager
def running_issuer(
    *, path: str = "", metadata: str = "both", audience: str = DEFAULT_AUDIENCE
) -> Iterator[TestIssuer]:
    """A TestIssuer with one RSA key, served until the block ends."""
    issuer = TestIssuer(path=path, metadata=metadata, audience=audience)
    issuer.publish(rsa_key())
    with serving(issuer.app()) as base:
        issuer.url = f"{base}{path}"
        yield issuer
