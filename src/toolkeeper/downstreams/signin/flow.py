"""Signing one account in to one server, as an OAuth client of its authorization server.

The SDK's `OAuthClientProvider` does the protocol (protected resource metadata, authorization
server metadata, registration, PKCE, `resource`, the scope the server asks for): it is driven as
an `httpx2.Auth` on a probe request to the server (an MCP `initialize` POST), whose 401 starts it.
Where it would open a browser, `redirect_handler` hands the address to whoever began the sign-in,
and `callback_handler` waits for the code that the callback delivers. What it obtains is captured
in memory (`CapturedTokens`); the keeper decides what is kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.client.auth.utils import (
    create_client_info_from_metadata_url,
    is_valid_client_metadata_url,
    should_use_client_metadata_url,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, ValidationError

from toolkeeper import jsonwire
from toolkeeper.config.model import ServerConfig, SignInSettings
from toolkeeper.downstreams.signin.client_secret import authenticate_as_metadata_allows
from toolkeeper.downstreams.signin.guard import EndpointGuard, UnsafeEndpoint, check_metadata
from toolkeeper.downstreams.signin.subject import account_subject
from toolkeeper.downstreams.signin.tokens import Registration, SignedIn

logger = logging.getLogger(__name__)

# A sign-in nobody completes (the browser tab was closed) ends, rather than waiting forever.
SIGN_IN_TIMEOUT_SECONDS = 600.0
HTTP_TIMEOUT_SECONDS = 30.0
CLIENT_NAME = "toolkeeper"
PROBE_PROTOCOL_VERSION = "2025-11-25"
PROBE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROBE_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": CLIENT_NAME, "version": "sign-in"},
    },
}
REFUSED_STATUSES = (401, 403)


class SignInFailed(Exception):
    """A sign-in did not end with a usable token; the message names the server and what to do."""


def failed(server: str, reason: str) -> SignInFailed:
    return SignInFailed(
        f"signing in to server '{server}' failed: {reason}. "
        f"Run `toolkeeper login {server}` to try again, or press Sign in on the dashboard's overview"
    )


def explain(exc: BaseException) -> str:
    """Why a sign-in failed, for a person: never a code or a token (the SDK's messages name
    neither; a token endpoint's error body names the error only)."""
    if isinstance(exc, BaseExceptionGroup):
        return explain(exc.exceptions[0])
    if isinstance(exc, UnsafeEndpoint | OAuthFlowError | OAuthRegistrationError | OAuthTokenError):
        return str(exc)
    if isinstance(exc, httpx2.TimeoutException):
        return "the authorization server did not answer in time"
    if isinstance(exc, httpx2.TransportError):
        return f"the server or its authorization server cannot be reached ({type(exc).__name__}: {exc})"
    if isinstance(exc, ValidationError):
        return "the authorization server sent something that is not what OAuth says it sends"
    return f"{type(exc).__name__}: {exc}"


class CapturedTokens:
    """The SDK provider's `TokenStorage`, in memory only: what it obtained is read from here."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class IdTokenWatcher:
    """An httpx response hook that keeps the `id_token` of a token response (the SDK's token
    model drops it), the one place an opaque access token's account may be named."""

    def __init__(self) -> None:
        self.id_token: str | None = None

    async def __call__(self, response: httpx2.Response) -> None:
        if response.request.method != "POST" or response.status_code != 200:
            return
        if not response.headers.get("content-type", "").startswith("application/json"):
            return
        try:
            body = jsonwire.loads(await response.aread())
        except ValueError:
            return
        if isinstance(body, dict) and "access_token" in body and isinstance(body.get("id_token"), str):
            self.id_token = body["id_token"]


class GatewayProvider(OAuthClientProvider):
    """The SDK's provider, registering in the spec's order: a client ID metadata document where
    the authorization server takes one, else the entry's pre-registered client (handed over as
    stored client information, which skips registration), else dynamic registration."""

    def __init__(
        self, *args: Any, metadata_document: str | None, preregistered_id: str | None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._metadata_document = metadata_document
        self._preregistered_id = preregistered_id

    async def _perform_authorization(self) -> httpx2.Request:
        check_metadata(self.context.oauth_metadata, self.context.server_url)
        document = self._metadata_document
        if document and should_use_client_metadata_url(self.context.oauth_metadata, document):
            self.context.client_info = create_client_info_from_metadata_url(
                document, redirect_uris=self.context.client_metadata.redirect_uris
            )
        info = self.context.client_info
        if info is not None and info.client_id == self._preregistered_id:
            authenticate_as_metadata_allows(self.context)
        return await super()._perform_authorization()


@dataclass(eq=False)
class PendingSignIn:
    """A sign-in waiting for its person: open `url` in a browser; `done` is set when it ended,
    however it ended."""

    url: str
    state: str
    server: str
    account: str
    done: anyio.Event = field(default_factory=anyio.Event)
    started_at: float = field(default_factory=time.time)


class AuthorizationCodeFlow:
    """One person's sign-in to one server: started by `start`, which returns the address to
    open, and finished by `finish` with what the callback received."""

    def __init__(
        self,
        config: ServerConfig,
        account: str,
        redirect_uri: str,
        *,
        metadata_document: str | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.account = account
        self._now = now
        settings = config.sign_in or SignInSettings()
        self._preregistered = _preregistered(settings, redirect_uri)
        self._storage = CapturedTokens(self._preregistered)
        self._metadata_document = _usable_document(metadata_document) or _usable_document(
            settings.client_metadata_url
        )
        self._redirect_uri = redirect_uri
        self._settings = settings
        self._ids = IdTokenWatcher()
        self._loop = asyncio.get_running_loop()
        self._address: asyncio.Future[str] = self._loop.create_future()
        self._code: asyncio.Future[AuthorizationCodeResult] = self._loop.create_future()
        self._task: asyncio.Task[SignedIn] | None = None
        self._provider: GatewayProvider | None = None

    async def start(self) -> str:
        """Run the flow up to the authorization address, which is returned. Raises SignInFailed
        when it cannot get there (discovery, registration, an authorization server that is down)."""
        self._task = self._loop.create_task(self._run(), name=f"sign-in:{self.config.name}")
        await asyncio.wait((self._address, self._task), return_when=asyncio.FIRST_COMPLETED)
        if self._address.done():
            return self._address.result()
        self._task.result()  # raises its SignInFailed
        raise failed(self.config.name, "the server accepted a request without a sign-in: it needs none")

    async def finish(self, result: AuthorizationCodeResult | None, error: str | None = None) -> SignedIn:
        """Hand the callback's code on and wait for the token exchange."""
        assert self._task is not None, "finish follows start"
        if error is not None or result is None:
            self._task.cancel()
            raise failed(self.config.name, f"the authorization server answered '{error or 'no code'}'")
        if not self._code.done():
            self._code.set_result(result)
        return await self._task

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """`callback` once the flow ended, however it ended (a failure nobody waited for, such as
        a sign-in nobody completed, was logged by the flow itself)."""
        assert self._task is not None

        def ended(task: asyncio.Task[SignedIn]) -> None:
            if not task.cancelled():
                task.exception()  # retrieved: a sign-in's failure is no unhandled error
            callback()

        self._task.add_done_callback(ended)

    async def _on_address(self, url: str) -> None:
        if not self._address.done():
            self._address.set_result(url)

    async def _on_callback(self) -> AuthorizationCodeResult:
        try:
            return await asyncio.wait_for(asyncio.shield(self._code), SIGN_IN_TIMEOUT_SECONDS)
        except TimeoutError:
            raise failed(
                self.config.name, f"nobody completed it within {SIGN_IN_TIMEOUT_SECONDS / 60:g} minutes"
            ) from None

    async def _run(self) -> SignedIn:
        metadata = OAuthClientMetadata(
            redirect_uris=[AnyUrl(self._redirect_uri)],
            client_name=CLIENT_NAME,
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            # Registered dynamically, the gateway is a confidential client: it keeps the secret
            # as it keeps tokens, and some servers revoke only for a client that authenticates.
            token_endpoint_auth_method="client_secret_post",
            scope=self._settings.scope,
        )
        provider = self._provider = GatewayProvider(
            self.config.url or "",
            metadata,
            self._storage,
            redirect_handler=self._on_address,
            callback_handler=self._on_callback,
            client_metadata_url=self._metadata_document,
            metadata_document=self._metadata_document,
            preregistered_id=self._preregistered.client_id if self._preregistered else None,
        )
        await probe(self.config, provider, self._ids)
        return self._signed_in(self._registration())

    def _registration(self) -> Registration:
        info = self._storage.client_info
        if info is not None and self._metadata_document and info.client_id == self._metadata_document:
            return "client_metadata_document"
        if info is not None and self._preregistered and info.client_id == self._preregistered.client_id:
            return "preregistered"
        return "dynamic"

    def _signed_in(self, registration: Registration) -> SignedIn:
        assert self._provider is not None
        return signed_in_from(
            self.config.name,
            self._storage,
            self._provider,
            self._ids.id_token,
            registration,
            self._now(),
        )


async def sign_in_machine(config: ServerConfig, *, now: Callable[[], float] = time.time) -> SignedIn:
    """A token for the gateway itself (`client_credentials`: the entry's client id and secret,
    no person). Raises SignInFailed."""
    settings = config.sign_in or SignInSettings()
    if not settings.client_id or not settings.client_secret:
        raise failed(
            config.name, "the client_credentials grant needs the entry's oauth clientId and clientSecret"
        )
    # Imported here: the SDK's client_credentials provider loads PyJWT and cryptography's X.509
    # (some 20 ms), which only a gateway that signs a machine in needs.
    from toolkeeper.downstreams.signin.machine import MachineProvider

    storage = CapturedTokens()
    with warnings.catch_warnings():
        # Without an issuer the SDK uses the one discovery yields (and warns); the entry names none.
        warnings.simplefilter("ignore")
        provider = MachineProvider(
            config.url or "",
            storage,
            settings.client_id,
            settings.client_secret,
            token_endpoint_auth_method="client_secret_post",
            scope=settings.scope,
        )
    ids = IdTokenWatcher()
    await probe(config, provider, ids)
    return signed_in_from(config.name, storage, provider, ids.id_token, "client_credentials", now())


async def probe(config: ServerConfig, provider: OAuthClientProvider, ids: IdTokenWatcher) -> None:
    """Send the server a request it must refuse without a token, with `provider` as its auth: the
    refusal starts the provider's flow, whose token is then sent with the same request again.
    Raises SignInFailed (naming the server) however it fails."""
    name = config.name
    guard = EndpointGuard(config.url or "")
    timeout = httpx2.Timeout(HTTP_TIMEOUT_SECONDS)
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    try:
        async with httpx2.AsyncClient(
            timeout=timeout, event_hooks={"request": [guard], "response": [ids]}
        ) as http:
            response = await http.post(
                config.url or "", content=jsonwire.encode(PROBE), headers=headers, auth=provider
            )
            if response.status_code == 200 and provider.context.current_tokens is None:
                response = await _probe_in_session(http, config.url or "", response, provider, headers)
            await _end_session(http, config.url or "", response, provider)
    except SignInFailed:
        raise
    except Exception as exc:
        logger.warning("server %r: sign-in failed: %s", name, config.redact(explain(exc)))
        raise failed(name, config.redact(explain(exc))) from None
    if response.status_code in REFUSED_STATUSES:
        raise failed(name, f"the server refused the new token (HTTP {response.status_code})")


async def _probe_in_session(
    http: httpx2.AsyncClient,
    url: str,
    opened: httpx2.Response,
    provider: OAuthClientProvider,
    headers: dict[str, str],
) -> httpx2.Response:
    """The server let `initialize` through without a token: some ask for one only from the
    session's first real request. Ask for its tools in that session, which starts the sign-in
    where the server wants one."""
    session = opened.headers.get("mcp-session-id")
    asked = {**headers, "mcp-protocol-version": PROBE_PROTOCOL_VERSION}
    if session:
        asked["mcp-session-id"] = session
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, content=jsonwire.encode(initialized), headers=asked, auth=provider)
    if provider.context.current_tokens is not None:
        return opened
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return await http.post(url, content=jsonwire.encode(listing), headers=asked, auth=provider)


async def _end_session(
    http: httpx2.AsyncClient, url: str, response: httpx2.Response, provider: OAuthClientProvider
) -> None:
    """The probe's `initialize` opened a session on a handshake-era server: close it, as a client
    that is done does (the gateway's connection opens its own)."""
    session = response.headers.get("mcp-session-id")
    tokens = provider.context.current_tokens
    if response.status_code != 200 or not session or tokens is None:
        return
    # The token by hand, not the provider: a refusal must not start another sign-in.
    headers = {"mcp-session-id": session, "authorization": f"Bearer {tokens.access_token}"}
    try:
        await http.delete(url, headers=headers)
    except httpx2.HTTPError as exc:
        logger.debug("the sign-in's session was not closed: %s", type(exc).__name__)


def signed_in_from(
    server: str,
    storage: CapturedTokens,
    provider: OAuthClientProvider,
    id_token: str | None,
    registration: Registration,
    now: float,
) -> SignedIn:
    tokens = storage.tokens
    if tokens is None and provider.context.oauth_metadata is None:
        raise failed(server, "the server answered without asking for a sign-in: it needs none")
    if tokens is None or not tokens.access_token.strip():
        raise failed(server, "the authorization server's answer held no access token")
    metadata = provider.context.oauth_metadata
    client = storage.client_info or provider.context.client_info
    return SignedIn(
        access_token=tokens.access_token,
        token_type=tokens.token_type,
        refresh_token=tokens.refresh_token,
        expires_at=None if tokens.expires_in is None else now + tokens.expires_in,
        scope=tokens.scope,
        subject=account_subject(tokens.access_token, id_token),
        issuer=str(metadata.issuer) if metadata is not None else None,
        client_info=client.model_dump(mode="json", exclude_none=True) if client is not None else None,
        registration=registration,
        signed_in_at=now,
    )


def state_of(url: str) -> str:
    """The `state` an authorization address carries (the SDK makes it; the callback echoes it)."""
    values = parse_qs(urlsplit(url).query).get("state")
    if not values:
        raise ValueError("the authorization address carries no state")
    return values[0]


def _preregistered(settings: SignInSettings, redirect_uri: str) -> OAuthClientInformationFull | None:
    if not settings.client_id:
        return None
    return OAuthClientInformationFull(
        client_id=settings.client_id,
        client_secret=settings.client_secret,
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        token_endpoint_auth_method="client_secret_post" if settings.client_secret else "none",
    )


def _usable_document(url: str | None) -> str | None:
    """A client ID metadata document's URL the SDK accepts (https, with a path), else None."""
    return url if is_valid_client_metadata_url(url) else None
