"""OAuth access tokens on the HTTP endpoint: JWTs from the configured authorization server.

A token is accepted when its signature verifies against a key the issuer publishes (its JWKS),
with an asymmetric algorithm that key is made for; when it names the issuer (`iss`) and this
gateway (`aud`); when it is within its lifetime (`exp`, `nbf`); and when it names its subject
(`sub`). Keys come only from the configured issuer, never from a URL or key the token carries
(`jku`, `x5u`, `jwk` headers are ignored).

Every refusal reads the same to the client (`InvalidToken`), so a forged token learns nothing
from the answer; the reason goes to the debug log, without the token. A token the issuer may
have signed but that lacks a required scope is `InsufficientScope` instead, which names the
scopes missing: that is what a client needs to ask for a better token.

The issuer's keys are fetched once and kept. A token signed with a key not among them (the
issuer rotated its keys) fetches them again, but at most once every `REFETCH_INTERVAL`, so
tokens with made-up key ids cannot make the gateway fetch on every request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt

from toolkeeper import jsonwire
from toolkeeper.config.model import OAuthSettings, is_loopback_host

logger = logging.getLogger(__name__)

# How far a token's `exp` and `nbf` may be passed, for clocks that disagree a little.
LEEWAY_SECONDS = 30
# The least time between two fetches of the issuer's keys, or two attempts to find them in its
# metadata.
REFETCH_INTERVAL = 30.0
# How long fetched keys are used before the next token fetches them again: a key the issuer
# withdrew stops being accepted by then.
KEYS_MAX_AGE = 3600.0
FETCH_TIMEOUT = 10.0
# Larger answers are not key sets or metadata; reading them would only cost memory.
MAX_DOCUMENT_BYTES = 256 * 1024
# Far more than any access token holds; a longer one is refused before it is parsed.
MAX_TOKEN_CHARS = 16 * 1024
INVALID_TOKEN_MESSAGE = "the access token is not valid: get a new one from the authorization server"


@dataclass(frozen=True)
class KeyFamily:
    """The kind of key an algorithm verifies with: its JWK `kty` and, for curves, which ones."""

    kty: str
    curves: frozenset[str] = frozenset()

    def fits(self, jwk: Mapping[str, Any]) -> bool:
        return jwk.get("kty") == self.kty and (not self.curves or jwk.get("crv") in self.curves)


_RSA = KeyFamily("RSA")
# Only asymmetric algorithms: with a symmetric one (HS256), whoever knows the published key
# could sign. `none` is not here either.
ALGORITHMS: Mapping[str, KeyFamily] = MappingProxyType(
    {
        "RS256": _RSA,
        "RS384": _RSA,
        "RS512": _RSA,
        "PS256": _RSA,
        "PS384": _RSA,
        "PS512": _RSA,
        "ES256": KeyFamily("EC", frozenset({"P-256"})),
        "ES384": KeyFamily("EC", frozenset({"P-384"})),
        "ES512": KeyFamily("EC", frozenset({"P-521"})),
        "EdDSA": KeyFamily("OKP", frozenset({"Ed25519", "Ed448"})),
    }
)


class InvalidToken(Exception):
    """The token cannot be used. One message for every reason, so the answer tells a forger
    nothing; the reason is in the debug log."""

    def __init__(self) -> None:
        super().__init__(INVALID_TOKEN_MESSAGE)


class InsufficientScope(Exception):
    """A valid token that does not grant every required scope. `missing`: those it lacks."""

    def __init__(self, missing: tuple[str, ...]) -> None:
        plural = len(missing) > 1
        super().__init__(
            f"the access token lacks the scope{'s' if plural else ''} {' '.join(missing)}: ask the "
            f"authorization server for a token that grants {'them' if plural else 'it'}"
        )
        self.missing = missing


class Refused(Exception):
    """Why a token or a fetch failed, in words for the log; never shown to the client."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OAuthIdentity:
    """Who a valid token speaks for: its subject, the OAuth client it was issued to (its
    `client_id`, else its `azp`), what it grants, and until when."""

    subject: str
    client_id: str | None
    scopes: frozenset[str]
    issuer: str
    expires_at: int
    admin: bool = False


class DocumentFetcher:
    """JSON objects from the authorization server, with a deadline and a size limit. Uses the
    client it is given, else one of its own (closed by `aclose`)."""

    def __init__(self, http: httpx2.AsyncClient | None) -> None:
        self._given = http
        self._own: httpx2.AsyncClient | None = None

    async def json_object(self, url: str) -> dict[str, Any]:
        """The object at `url`; raises Refused saying what went wrong."""
        try:
            with anyio.fail_after(FETCH_TIMEOUT):
                body = await self._body(url)
        except TimeoutError:
            raise Refused(f"no answer within {FETCH_TIMEOUT:g}s") from None
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise Refused(f"{type(exc).__name__}: {exc}") from None
        try:
            value = jsonwire.loads(body)
        except ValueError:
            raise Refused("the answer is not JSON") from None
        if not isinstance(value, dict):
            raise Refused("the answer is not a JSON object")
        return value

    async def _body(self, url: str) -> bytes:
        async with self._client().stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise Refused(f"HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise Refused(f"the answer is larger than {MAX_DOCUMENT_BYTES} bytes")
            return bytes(body)

    def _client(self) -> httpx2.AsyncClient:
        if self._given is not None:
            return self._given
        if self._own is None:
            self._own = httpx2.AsyncClient(timeout=FETCH_TIMEOUT)
        return self._own

    async def aclose(self) -> None:
        if self._own is not None:
            await self._own.aclose()
            self._own = None


def metadata_urls(issuer: str) -> tuple[str, ...]:
    """Where an issuer's metadata may be, in the order tried: RFC 8414's well-known URL (its
    path inserted after the host), then OpenID Connect's (appended to the issuer), and for an
    issuer with a path also OpenID's inserted form, which some servers use."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    urls = [f"{origin}/.well-known/oauth-authorization-server{path}"]
    urls.append(f"{origin}{path}/.well-known/openid-configuration")
    if path:
        urls.append(f"{origin}/.well-known/openid-configuration{path}")
    return tuple(urls)


def fetchable(url: object) -> bool:
    """Whether a URL an issuer's metadata names may be fetched: https, or http on this machine."""
    if not isinstance(url, str):
        return False
    parts = urlsplit(url)
    host = parts.hostname or ""
    return bool(host) and (parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(host)))


@dataclass(kw_only=True)
class JwksLocation:
    """Where the issuer's keys are: the configured `jwksUri`, else the `jwks_uri` of the
    issuer's metadata, found once and kept. Searched only when the keys are fetched, so a failed
    search is not repeated sooner than a fetch."""

    issuer: str
    fetcher: DocumentFetcher
    uri: str | None = None

    async def find(self) -> str:
        if self.uri is not None:
            return self.uri
        problems: list[str] = []
        for url in metadata_urls(self.issuer):
            try:
                self.uri = self._jwks_uri(await self.fetcher.json_object(url))
                return self.uri
            except Refused as exc:
                problems.append(f"{url}: {exc}")
        logger.warning("cannot find the OAuth issuer's keys: %s", "; ".join(problems))
        raise Refused("no metadata of the issuer names its keys")

    def _jwks_uri(self, metadata: Mapping[str, Any]) -> str:
        # RFC 8414 §3.3: metadata for another issuer must not be used.
        if metadata.get("issuer") != self.issuer:
            raise Refused(f"the metadata is for the issuer {metadata.get('issuer')!r}")
        uri = metadata.get("jwks_uri")
        if not fetchable(uri):
            raise Refused(f"its jwks_uri {uri!r} is not an https URL")
        return str(uri)


@dataclass
class PublishedKey:
    """One public key of the issuer's key set (a JWK), and what PyJWT made of it for each
    algorithm a token used it with, so each is read once."""

    jwk: Mapping[str, Any]
    _verifiers: dict[str, jwt.PyJWK] = field(default_factory=dict)

    def fits(self, *, kid: str | None, algorithm: str) -> bool:
        """Whether a token signed with `algorithm` may be checked with this key: the key is of
        the algorithm's kind (no RSA key taken for an HMAC secret), its `alg`, if it names one,
        is that algorithm, and its `kid` is the token's (any, for a token that names none)."""
        return (
            ALGORITHMS[algorithm].fits(self.jwk)
            and self.jwk.get("alg", algorithm) == algorithm
            and (kid is None or self.jwk.get("kid") == kid)
        )

    def verifier(self, algorithm: str) -> jwt.PyJWK:
        parsed = self._verifiers.get(algorithm)
        if parsed is None:
            try:
                parsed = jwt.PyJWK(dict(self.jwk), algorithm)
            except jwt.PyJWTError as exc:
                raise Refused(f"the issuer's key {self.jwk.get('kid')!r} cannot be read: {exc}") from None
            self._verifiers[algorithm] = parsed
        return parsed


def published_keys(document: Mapping[str, Any]) -> tuple[PublishedKey, ...] | None:
    """The signing keys of a JWKS; None if it is not one. A key marked for encryption only, or
    holding a private part (a JWKS is public), verifies nothing."""
    keys = document.get("keys")
    if not isinstance(keys, list):
        return None
    return tuple(
        PublishedKey(MappingProxyType(dict(jwk)))
        for jwk in keys
        if isinstance(jwk, dict) and jwk.get("use", "sig") == "sig" and "d" not in jwk
    )


class KeySet:
    """The issuer's signing keys as last fetched, looked up by a token's `kid` and algorithm.

    Keys are fetched when none are known, when a token names a key not among them, and when
    they are older than `KEYS_MAX_AGE`; never twice within `REFETCH_INTERVAL`. If a fetch
    fails, the keys fetched before stay in use."""

    def __init__(
        self, *, location: JwksLocation, fetcher: DocumentFetcher, timer: Callable[[], float]
    ) -> None:
        self._location = location
        self._fetcher = fetcher
        self._timer = timer
        self._keys: tuple[PublishedKey, ...] = ()
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._lock = anyio.Lock()

    async def key_for(self, *, kid: str | None, algorithm: str) -> jwt.PyJWK:
        """The key a token with this `kid` and algorithm is checked with, as PyJWT verifies with
        it; raises Refused if the issuer publishes none."""
        key = self._pick(kid, algorithm)
        if key is None or self._stale():
            async with self._lock:
                # Another token may have fetched them while this one waited.
                key = self._pick(kid, algorithm)
                if (key is None or self._stale()) and self._may_fetch():
                    await self._fetch()
                    key = self._pick(kid, algorithm)
        if key is None:
            raise Refused(f"the issuer publishes no {algorithm} key with kid {kid!r}")
        return key.verifier(algorithm)

    def _pick(self, kid: str | None, algorithm: str) -> PublishedKey | None:
        """A token without a `kid` can only mean the one key of its kind."""
        fitting = [key for key in self._keys if key.fits(kid=kid, algorithm=algorithm)]
        if kid is None and len(fitting) != 1:
            return None
        return fitting[0] if fitting else None

    def _stale(self) -> bool:
        return self._fetched_at is None or self._timer() - self._fetched_at >= KEYS_MAX_AGE

    def _may_fetch(self) -> bool:
        return self._tried_at is None or self._timer() - self._tried_at >= REFETCH_INTERVAL

    async def _fetch(self) -> None:
        self._tried_at = self._timer()
        try:
            url = await self._location.find()
        except Refused:
            return  # the search for the keys logged why
        try:
            document = await self._fetcher.json_object(url)
        except Refused as exc:
            logger.warning("cannot fetch the OAuth issuer's keys from %s: %s", url, exc)
            return
        keys = published_keys(document)
        if keys is None:
            logger.warning("the OAuth issuer's keys at %s are not a JWKS (no 'keys' list)", url)
            return
        self._keys = keys
        self._fetched_at = self._timer()


class JwtVerifier:
    """Checks access tokens from the issuer in `settings`. `http`: the client that fetches the
    issuer's keys and metadata (one of its own if None, closed by `aclose`); `clock` tells the
    time tokens' lifetimes are checked against, `timer` the time between fetches (a monotonic
    clock); tests pass their own."""

    def __init__(
        self,
        settings: OAuthSettings,
        *,
        http: httpx2.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._fetcher = DocumentFetcher(http)
        location = JwksLocation(issuer=settings.issuer, fetcher=self._fetcher, uri=settings.jwks_uri)
        self.keys = KeySet(location=location, fetcher=self._fetcher, timer=timer)
        # The audience as configured, and with or without a trailing slash.
        audience = settings.audience
        self._audiences = (audience, audience[:-1] if audience.endswith("/") else f"{audience}/")

    async def verify(self, token: str) -> OAuthIdentity:
        """Who `token` speaks for. Raises InvalidToken, or InsufficientScope for a valid token
        that lacks a required scope."""
        try:
            algorithm, kid = self._header(token)
            key = await self.keys.key_for(kid=kid, algorithm=algorithm)
            claims = self._claims(token, key, algorithm)
            self._check_lifetime(claims)
            identity = self._identity(claims)
        except Refused as exc:
            logger.debug("access token refused: %s", exc)
            raise InvalidToken() from None
        missing = tuple(scope for scope in self.settings.required_scopes if scope not in identity.scopes)
        if missing:
            logger.debug("access token of %s refused: it lacks %s", identity.subject, " ".join(missing))
            raise InsufficientScope(missing)
        return identity

    async def aclose(self) -> None:
        await self._fetcher.aclose()

    def _header(self, token: str) -> tuple[str, str | None]:
        """The token's algorithm and key id, read before its signature is checked: they only
        choose the key, which must then fit them."""
        if len(token) > MAX_TOKEN_CHARS:
            raise Refused(f"longer than {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Refused(f"not a JWT: {exc}") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
            raise Refused(f"the algorithm {str(algorithm)[:20]!r} is not an asymmetric one")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise Refused("its kid is not text")
        return algorithm, kid

    def _claims(self, token: str, key: jwt.PyJWK, algorithm: str) -> dict[str, Any]:
        """The token's claims, once its signature, issuer and audience are right. Its lifetime
        is checked against this verifier's clock, not PyJWT's."""
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                issuer=self.settings.issuer,
                audience=self._audiences,
                options={
                    "require": ["iss", "aud", "exp", "sub"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise Refused(f"{type(exc).__name__}: {exc}") from None

    def _check_lifetime(self, claims: Mapping[str, Any]) -> None:
        now = self._clock()
        expires = claims["exp"]
        if not _is_number(expires):
            raise Refused("its exp is not a number")
        if expires + LEEWAY_SECONDS <= now:
            raise Refused(f"it expired at {expires}")
        not_before = claims.get("nbf")
        if not_before is not None and not _is_number(not_before):
            raise Refused("its nbf is not a number")
        if not_before is not None and not_before - LEEWAY_SECONDS > now:
            raise Refused(f"it is not valid before {not_before}")

    def _identity(self, claims: Mapping[str, Any]) -> OAuthIdentity:
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise Refused("its sub is empty")
        scopes = _scopes(claims)
        named = (claims.get("client_id"), claims.get("azp"))
        client_id = next((value for value in named if isinstance(value, str) and value), None)
        admin_scope = self.settings.admin_scope
        return OAuthIdentity(
            subject=subject,
            client_id=client_id,
            scopes=scopes,
            issuer=claims["iss"],
            expires_at=int(claims["exp"]),
            admin=admin_scope is not None and admin_scope in scopes,
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """What the token grants: `scope` (RFC 9068: space-separated), else `scp` (a list, or text
    like `scope`, as some issuers write it)."""
    granted = claims.get("scope", claims.get("scp"))
    if granted is None:
        return frozenset()
    if isinstance(granted, str):
        return frozenset(granted.split())
    if isinstance(granted, list) and all(isinstance(scope, str) for scope in granted):
        return frozenset(granted)
    raise Refused("its scope is neither text nor a list of text")
