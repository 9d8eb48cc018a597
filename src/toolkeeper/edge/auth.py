"""Who is calling over HTTP: every request is authenticated here, after the Host check and
before the fast lane or the SDK's app sees it, so no lane can skip it.

- A client key (`tk_…`, made with `toolkeeper keys create`) is checked against the gateway's
  in-memory key ring: a hash and a dict lookup, no store read.
- Any other bearer token is taken for an OAuth access token (a JWT from the configured issuer,
  for this gateway's resource URL), when OAuth is set up.
- Without a token, a gateway that need not authenticate (on loopback, or `http.auth.mode:
  "none"`) serves the request as its local user (or as anyone); one that must answers 401
  with the link to its protected resource metadata (RFC 9728), which is served here too.

Unknown, revoked, expired, foreign and malformed tokens all get the same 401, so that an answer
says nothing about a key. Failures are counted by `FailureThrottle` (`throttle.py`) against the
remote address and the key they claimed, and logged there, never with the token: while either
is throttled a failure is answered 429, yet a valid key is always admitted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.auth.routes import build_resource_metadata_url
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials
from starlette.types import Scope, Send

from toolkeeper.config.model import OAUTH_MODES, Config, OAuthSettings, is_loopback_host
from toolkeeper.edge.cannot_serve import CannotStart
from toolkeeper.edge.oauth import InsufficientScope, InvalidToken, JwtVerifier
from toolkeeper.edge.principal_user import PrincipalUser
from toolkeeper.edge.throttle import FailureThrottle
from toolkeeper.pipeline.call import ANYONE, LOCAL_USER, Principal
from toolkeeper.services.keys import TOKEN_START, KeyRing

if TYPE_CHECKING:
    from toolkeeper.store.keys import ClientKey

logger = logging.getLogger(__name__)

METADATA_PATH = "/.well-known/oauth-protected-resource"
MAX_AUTHORIZATION_BYTES = 8 * 1024
# How often the times keys were last used are written to the store (never on the call path).
KEY_USE_FLUSH_SECONDS = 30.0

INVALID_TOKEN = (
    "the bearer token is not valid for this gateway: it is unknown, revoked, expired, "
    "malformed, or issued for another resource"
)
NO_ADMIN_TOKEN = (
    "this needs an admin credential: send 'Authorization: Bearer <token>' with an admin client key "
    "('toolkeeper keys create NAME --admin') or an OAuth access token with the admin scope"
)
NOT_ADMIN = "this needs an admin credential; the token is valid but not an admin's"
NO_TOKEN = (
    "this gateway needs a bearer token: send 'Authorization: Bearer <token>' with a client key "
    "('toolkeeper keys create NAME' prints one) or an OAuth access token"
)


def _is_loopback(host: str) -> bool:
    """Whether a bind address or an allowed Host value (`name`, `name:port`, `name:*`, `[v6]:port`)
    names this machine."""
    name = host.strip()
    if name.startswith("[") and "]" in name:
        name = name[1 : name.index("]")]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return is_loopback_host(name)


def reachable_beyond_loopback(config: Config, host: str) -> str | None:
    """Why `/mcp` can be reached from beyond this machine (a bind address, or a name clients
    use that is not local, as behind a reverse proxy); None when only this machine reaches it."""
    if not _is_loopback(host):
        return f"it listens on {host or 'every interface'}"
    foreign = [name for name in config.settings.http_allowed_hosts if not _is_loopback(name)]
    if foreign:
        return f"http.allowedHosts names {', '.join(foreign)}"
    return None


def credential_required(config: Config, host: str) -> bool:
    """Whether `/mcp` on `host` refuses a request without a credential: what
    `AuthPlan.for_serving(...).required` says, without its warnings or its refusal to start."""
    mode = config.settings.http_auth_mode
    if mode == "auto":
        return reachable_beyond_loopback(config, host) is not None
    return mode != "none"


@dataclass(frozen=True, slots=True)
class AuthPlan:
    """How the HTTP edge authenticates, decided once at start-up from the settings."""

    required: bool  # a request without a valid token is refused
    keys: bool  # client keys are accepted
    oauth: OAuthSettings | None  # OAuth access tokens are accepted, from this issuer

    @staticmethod
    def for_serving(config: Config, host: str, keys: KeyRing) -> AuthPlan:
        """The plan for serving on `host`, or CannotStart when it would serve beyond this
        machine with no way to authenticate. Steps, in the order they win:
        a. `none`: nobody is asked (a warning at every start);
        b. `keys`, `oauth`, `keys+oauth`: those ways, required wherever the gateway listens;
        c. `auto`, reachable only from this machine: no token needed, a token sent is checked;
        d. `auto`, reachable beyond it: keys and OAuth (whichever are set up), required, and at
           least one of them must be set up."""
        settings = config.settings
        mode = settings.http_auth_mode
        oauth = settings.http_auth_oauth
        reach = reachable_beyond_loopback(config, host)
        if mode == "none":
            logger.warning(
                'http.auth.mode is "none": every client that reaches %s gets every tool, the '
                "configuration tools included, without saying who it is",
                "this gateway" if reach is None else f"this gateway ({reach})",
            )
            return AuthPlan(required=False, keys=False, oauth=None)
        if mode != "auto":
            takes_keys = mode in ("keys", "keys+oauth")
            if mode == "keys" and not len(keys):
                logger.warning(
                    'http.auth.mode is "keys" and there is no client key yet: every request is refused '
                    "until one is made with 'toolkeeper keys create NAME'"
                )
            return AuthPlan(required=True, keys=takes_keys, oauth=oauth if mode in OAUTH_MODES else None)
        if reach is None:
            return AuthPlan(required=False, keys=True, oauth=oauth)
        if not len(keys) and oauth is None:
            raise CannotStart(
                f"refusing to serve: /mcp can be reached beyond this machine ({reach}), and no client "
                "can authenticate: there are no client keys and OAuth is not set up. Create a key "
                "with 'toolkeeper keys create NAME' (give it to your client as 'Authorization: Bearer "
                "<token>'), set toolkeeper.http.auth.oauth, or set toolkeeper.http.auth.mode to "
                '"none" to serve everyone without asking'
            )
        return AuthPlan(required=True, keys=True, oauth=oauth)

    def describe(self) -> str:
        """How clients are told apart, as the start-up line says it."""
        ways = " or ".join(way for way, on in (("a client key", self.keys), ("OAuth", self.oauth)) if on)
        if self.required:
            return f"must authenticate with {ways}"
        if ways:
            return f"local, no token needed ({ways} honoured)"
        return "anyone, unauthenticated"


@lru_cache(maxsize=256)
def _credentials(principal: Principal, scopes: frozenset[str]) -> tuple[PrincipalUser, AuthCredentials]:
    """What a request of `principal` leaves in its scope for Starlette and the SDK, which only
    read it: made once per principal and scopes rather than per request (a pydantic model each
    time, on every call's path)."""
    return PrincipalUser(principal, scopes), AuthCredentials(sorted(scopes))


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    error: str | None  # RFC 6750's error code; None when no credential was sent
    description: str
    scope: str | None = None  # the scopes a 403 says are needed
    retry_after: int | None = None


class KeyPrincipals:
    """The principal of each client key, made once per key ring rather than per request: the
    same principal for every request of a key is what lets the lanes after the edge recognise
    a client they identified before. Only what a verified key maps to is kept, never a token;
    the token is still checked on every request. A reload that revokes or changes a key brings
    a new ring, and with it every principal is made anew."""

    __slots__ = ("_by_prefix", "_ring")

    def __init__(self) -> None:
        self._ring: KeyRing | None = None
        self._by_prefix: dict[str, Principal] = {}

    def of(self, key: ClientKey, ring: KeyRing) -> Principal:
        """The principal of `key`, which `ring` verified."""
        if ring is not self._ring:
            self._ring, self._by_prefix = ring, {}
        principal = self._by_prefix.get(key.prefix)
        if principal is None:
            principal = self._by_prefix[key.prefix] = Principal(
                key.name, "key", admin=key.admin, toolsets=key.toolsets, servers=frozenset(key.servers)
            )
        return principal


class Authenticator:
    """Decides, for each HTTP request, who is calling, or answers it with 401, 403, 429 or 431."""

    def __init__(
        self,
        plan: AuthPlan,
        *,
        keys: Callable[[], KeyRing],
        oauth: JwtVerifier | None = None,
        resource_path: str,
    ) -> None:
        self.plan = plan
        self.keys = keys
        self.oauth = oauth
        self.resource_path = resource_path
        self.throttle = FailureThrottle()
        self.key_uses: dict[str, datetime] = {}  # key name → last use, not yet written
        self.key_principals = KeyPrincipals()

    @property
    def anonymous(self) -> Principal:
        """Who a request without a token is, where none is needed."""
        return LOCAL_USER if self.plan.keys or self.plan.oauth else ANYONE

    def serves_metadata(self, path: str) -> bool:
        return path in (METADATA_PATH, METADATA_PATH + self.resource_path)

    async def admit(self, scope: Scope, headers: Mapping[str, str], send: Send) -> Principal | None:
        """The request's principal (also left in `scope["user"]` for the SDK); None when the
        request was answered here (refused, or the metadata document)."""
        if self.serves_metadata(scope["path"]):
            await self._send_metadata(scope, headers, send)
            return None
        outcome = await self._authenticate(scope, headers)
        if isinstance(outcome, Refusal):
            await self.refuse(scope, headers, send, outcome)
            return None
        principal, scopes = outcome
        scope["user"], scope["auth"] = _credentials(principal, scopes)
        return principal

    async def _authenticate(
        self, scope: Scope, headers: Mapping[str, str]
    ) -> tuple[Principal, frozenset[str]] | Refusal:
        """Who sent the request, with the scopes its token grants; or the refusal. In the order
        they win:
        a. `http.auth.mode: "none"`: anyone, whatever the request carries;
        b. no Authorization header: the local user where no token is needed, else 401;
        c. a header over 8 KiB: 431; one that is not `Bearer <token>`: 401;
        d. a client key (`tk_…`): its key's principal, if the ring holds it unexpired, else 401;
        e. anything else: an OAuth access token's subject, if it validates (403 when it lacks a
           required scope), else 401.
        A key or an OAuth token is checked even while its address is throttled, so that nobody
        else's failures lock it out; a failure in c to e is answered 429 instead while its
        address or the key it claimed is throttled (see `throttle.py`)."""
        if not self.plan.required and not self.plan.keys and self.plan.oauth is None:
            return self.anonymous, frozenset()  # mode "none": nobody is asked, whatever they send
        address = (scope.get("client") or ("unknown", 0))[0]
        header = headers.get("authorization")
        if header is None:
            if not self.plan.required:
                return self.anonymous, frozenset()
            return Refusal(401, None, NO_TOKEN)
        token = self._bearer(address, header)
        if isinstance(token, Refusal):
            return token
        if token.startswith(TOKEN_START):
            return self._by_key(address, token)
        return await self._by_oauth(address, token)

    def _bearer(self, address: str, header: str) -> str | Refusal:
        """The token of an Authorization header, or the refusal of a header that is over 8 KiB or
        not `Bearer <token>` (counted as a failed authentication from `address`)."""
        if len(header) > MAX_AUTHORIZATION_BYTES:
            refusal = Refusal(431, "invalid_request", "the Authorization header is over 8 KiB")
            return self._failed(address, "an Authorization header over 8 KiB", refusal)
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            what = "an Authorization header that is not 'Bearer <token>'"
            return self._failed(address, what, Refusal(401, "invalid_token", INVALID_TOKEN))
        return token

    def _by_key(
        self, address: str, token: str, *, whatever_the_mode: bool = False
    ) -> tuple[Principal, frozenset[str]] | Refusal:
        now = datetime.now(UTC)
        keys = self.keys()
        key = keys.verify(token, now) if self.plan.keys or whatever_the_mode else None
        if key is None:
            what = "a client key that is unknown, revoked or expired"
            refusal = Refusal(401, "invalid_token", INVALID_TOKEN)
            return self._failed(address, what, refusal, keys.claimed_by(token))
        self.key_uses[key.name] = now
        return self.key_principals.of(key, keys), frozenset()

    async def _by_oauth(self, address: str, token: str) -> tuple[Principal, frozenset[str]] | Refusal:
        invalid = Refusal(401, "invalid_token", INVALID_TOKEN)
        if self.oauth is None:
            return self._failed(
                address, "a bearer token that is no client key, with OAuth not set up", invalid
            )
        try:
            identity = await self.oauth.verify(token)
        except InsufficientScope as exc:
            needed = " ".join(exc.missing)
            logger.warning("authentication: a token from %s lacks the scope %s", address, needed)
            return Refusal(403, "insufficient_scope", f"the token lacks the scope {needed}", scope=needed)
        except InvalidToken:
            return self._failed(address, "an OAuth token that did not validate", invalid)
        principal = Principal(
            f"oauth:{identity.subject}", "oauth", admin=identity.admin, client_id=identity.client_id
        )
        return principal, identity.scopes

    async def admin(self, scope: Scope, headers: Mapping[str, str]) -> Principal | Refusal:
        """The admin a request's credential names, for what only an admin may read, whatever the
        auth mode and wherever the gateway listens (`/metrics`): an admin client key (as the
        dashboard takes one), or an OAuth access token with the admin scope. In the order they
        win: no Authorization header is 401; a header that is over 8 KiB, not `Bearer <token>`,
        or a token that opens nothing is counted as `_authenticate` counts it (401, or 429 while
        throttled); a valid credential that is not an admin's is 403."""
        header = headers.get("authorization")
        if header is None:
            return Refusal(401, None, NO_ADMIN_TOKEN)
        address = (scope.get("client") or ("unknown", 0))[0]
        token = self._bearer(address, header)
        if isinstance(token, Refusal):
            return token
        if token.startswith(TOKEN_START):
            outcome = self._by_key(address, token, whatever_the_mode=True)
        else:
            outcome = await self._by_oauth(address, token)
        if isinstance(outcome, Refusal):
            return outcome
        principal = outcome[0]
        if not principal.admin:
            oauth = self.plan.oauth
            needed = oauth.admin_scope if oauth is not None and principal.kind == "oauth" else None
            return Refusal(403, "insufficient_scope", NOT_ADMIN, scope=needed)
        return principal

    def _failed(self, address: str, what: str, refusal: Refusal, credential: str | None = None) -> Refusal:
        """Count the failure; `refusal`, or 429 while the address or the credential is throttled."""
        wait = self.throttle.failed(address, what, credential)
        if not wait:
            return refusal
        return Refusal(
            429,
            None,
            "too many failed authentications from this address or for this key; try again later",
            retry_after=int(wait) + 1,
        )

    # -- answers -----------------------------------------------------------------------------

    def resource_url(self, scope: Scope, headers: Mapping[str, str]) -> str:
        """This gateway's resource URL: OAuth's audience when set up (tokens name it), else the
        address the client used (its Host header passed the edge's check)."""
        if self.plan.oauth is not None:
            return self.plan.oauth.audience
        return f"{scope.get('scheme', 'http')}://{headers.get('host', 'localhost')}{self.resource_path}"

    def metadata_url(self, scope: Scope, headers: Mapping[str, str]) -> str:
        return str(build_resource_metadata_url(AnyHttpUrl(self.resource_url(scope, headers))))

    def metadata(self, scope: Scope, headers: Mapping[str, str]) -> dict[str, Any]:
        """The protected resource metadata (RFC 9728) of `/mcp`."""
        document: dict[str, Any] = {
            "resource": self.resource_url(scope, headers),
            "bearer_methods_supported": ["header"],
            "resource_name": "toolkeeper MCP gateway",
        }
        oauth = self.plan.oauth
        if oauth is not None:
            document["authorization_servers"] = [oauth.issuer]
            scopes = [*oauth.required_scopes, *([oauth.admin_scope] if oauth.admin_scope else [])]
            if scopes:
                document["scopes_supported"] = scopes
        return document

    async def _send_metadata(self, scope: Scope, headers: Mapping[str, str], send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await _send(send, 405, b'{"error": "method not allowed"}', [(b"allow", b"GET, HEAD")])
            return
        body = json.dumps(self.metadata(scope, headers)).encode()
        await _send(send, 200, body, [(b"cache-control", b"max-age=300")])

    async def refuse(self, scope: Scope, headers: Mapping[str, str], send: Send, refusal: Refusal) -> None:
        extra: list[tuple[bytes, bytes]] = []
        if refusal.retry_after is not None:
            extra.append((b"retry-after", str(refusal.retry_after).encode()))
        if refusal.status in (401, 403):
            parts = [f'resource_metadata="{self.metadata_url(scope, headers)}"']
            if refusal.error:
                parts += [f'error="{refusal.error}"', f'error_description="{refusal.description}"']
            if refusal.scope:
                parts.append(f'scope="{refusal.scope}"')
            extra.append((b"www-authenticate", ("Bearer " + ", ".join(parts)).encode()))
        body = json.dumps(
            {"error": refusal.error or "unauthorized", "error_description": refusal.description}
        )
        await _send(send, refusal.status, body.encode(), extra)

    # -- last use ----------------------------------------------------------------------------

    def take_key_uses(self) -> dict[str, datetime]:
        uses, self.key_uses = self.key_uses, {}
        return uses

    async def record_key_uses(self, touch: Callable[[Mapping[str, datetime]], Awaitable[None]]) -> None:
        """Write when each key was last used, every KEY_USE_FLUSH_SECONDS and once more when the
        gateway stops, off the call path."""
        try:
            while True:
                await anyio.sleep(KEY_USE_FLUSH_SECONDS)
                await self._write_key_uses(touch)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(KEY_USE_FLUSH_SECONDS / 10):
                await self._write_key_uses(touch)

    async def _write_key_uses(self, touch: Callable[[Mapping[str, datetime]], Awaitable[None]]) -> None:
        uses = self.take_key_uses()
        if not uses:
            return
        try:
            await touch(uses)
        except Exception as exc:  # a last-used time is worth a retry, never a crash
            logger.warning("cannot record when client keys were last used: %s", exc)
            for name, when in uses.items():
                self.key_uses.setdefault(name, when)


async def _send(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
    """A whole JSON answer of the edge's own; not cached unless `extra` says otherwise."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-accel-buffering", b"no"),
        *extra,
    ]
    if not any(name == b"cache-control" for name, _ in extra):
        headers.append((b"cache-control", b"no-store"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
