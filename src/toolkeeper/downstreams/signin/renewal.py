"""Renewing and revoking an account's tokens at its authorization server (RFC 6749 §6, RFC 7009).

The sign-in's own provider is gone by then (a token lives across restarts), so the authorization
server's metadata is found again from the issuer the sign-in recorded, once per process.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from urllib.parse import urljoin, urlparse

import httpx2
from mcp.client.auth.oauth2 import OAuthContext
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    issuers_match,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, OAuthToken
from mcp.shared.auth_utils import resource_url_from_server_url
from pydantic import ValidationError

from toolkeeper.downstreams.signin.flow import CapturedTokens
from toolkeeper.downstreams.signin.guard import EndpointGuard
from toolkeeper.downstreams.signin.subject import account_subject
from toolkeeper.downstreams.signin.tokens import SignedIn

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_SECONDS = 15.0
FORM = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}


class RefreshRefused(Exception):
    """The authorization server will not renew this account's tokens (a revoked or expired
    refresh token, an unknown client): only a new sign-in helps."""


class AuthServerUnreachable(Exception):
    """The authorization server did not answer usefully (down, 5xx, not OAuth): worth retrying."""


class Renewal:
    """Refreshes and revokes tokens; keeps each issuer's metadata for the process's life."""

    def __init__(self) -> None:
        self._metadata: dict[tuple[str | None, str], OAuthMetadata | None] = {}

    async def refresh(self, server_url: str, signed_in: SignedIn, now: float | None = None) -> SignedIn:
        """New tokens for `signed_in`. Raises RefreshRefused or AuthServerUnreachable."""
        if not signed_in.refresh_token:
            raise RefreshRefused("no refresh token was issued")
        client = _client_info(signed_in)
        if client is None:
            raise RefreshRefused("the registered client is not known")
        async with _http(server_url) as http:
            metadata = await self._discover(http, server_url, signed_in.issuer)
            endpoint = _token_endpoint(metadata, server_url)
            data = {
                "grant_type": "refresh_token",
                "refresh_token": signed_in.refresh_token,
                "client_id": client.client_id,
                "resource": resource_url_from_server_url(server_url),
            }
            data, headers = _client_auth(server_url, client, data)
            try:
                response = await http.post(endpoint, data=data, headers=headers)
            except httpx2.TransportError as exc:
                raise AuthServerUnreachable(f"{type(exc).__name__}: {exc}") from None
        return _renewed(signed_in, response, time.time() if now is None else now)

    async def revoke(self, server_url: str, signed_in: SignedIn) -> bool:
        """Revoke the refresh token (and with it, at most servers, the access token), where the
        authorization server offers revocation. True if it said it did."""
        client = _client_info(signed_in)
        try:
            async with _http(server_url) as http:
                metadata = await self._discover(http, server_url, signed_in.issuer)
                endpoint = metadata.revocation_endpoint if metadata is not None else None
                if endpoint is None or client is None:
                    return False
                revoked = False
                for token, hint in (
                    (signed_in.refresh_token, "refresh_token"),
                    (signed_in.access_token, "access_token"),
                ):
                    if not token:
                        continue
                    data, headers = _client_auth(
                        server_url,
                        client,
                        {"token": token, "token_type_hint": hint, "client_id": client.client_id},
                    )
                    response = await http.post(str(endpoint), data=data, headers=headers)
                    revoked = revoked or response.status_code == 200
                return revoked
        except (httpx2.TransportError, AuthServerUnreachable) as exc:
            logger.warning("revoking tokens at the authorization server failed: %s", type(exc).__name__)
            return False

    async def _discover(
        self, http: httpx2.AsyncClient, server_url: str, issuer: str | None
    ) -> OAuthMetadata | None:
        key = (issuer, server_url if issuer is None else "")
        if key in self._metadata:
            return self._metadata[key]
        found: OAuthMetadata | None = None
        for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, server_url):
            try:
                response = await http.get(url)
            except httpx2.TransportError as exc:
                raise AuthServerUnreachable(f"{type(exc).__name__}: {exc}") from None
            if response.status_code >= 500:
                raise AuthServerUnreachable(f"its metadata answered HTTP {response.status_code}")
            if response.status_code != 200:
                continue
            try:
                metadata = OAuthMetadata.model_validate_json(response.content)
            except ValidationError:
                continue
            if issuer is not None and not issuers_match(str(metadata.issuer), issuer):
                raise RefreshRefused(
                    f"the authorization server's metadata names another issuer ({metadata.issuer})"
                )
            found = metadata
            break
        self._metadata[key] = found
        return found


def _http(server_url: str) -> httpx2.AsyncClient:
    guard = EndpointGuard(server_url)
    return httpx2.AsyncClient(timeout=httpx2.Timeout(HTTP_TIMEOUT_SECONDS), event_hooks={"request": [guard]})


def _client_info(signed_in: SignedIn) -> OAuthClientInformationFull | None:
    if not signed_in.client_info:
        return None
    try:
        return OAuthClientInformationFull.model_validate(signed_in.client_info)
    except ValidationError:
        return None


def _token_endpoint(metadata: OAuthMetadata | None, server_url: str) -> str:
    if metadata is not None:
        return str(metadata.token_endpoint)
    parsed = urlparse(server_url)
    return urljoin(f"{parsed.scheme}://{parsed.netloc}", "/token")


def _client_auth(
    server_url: str, client: OAuthClientInformationFull, data: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The client's authentication on a token or revocation request, as the SDK does it."""
    context = OAuthContext(
        server_url=server_url,
        client_metadata=OAuthClientMetadata(redirect_uris=None),
        storage=CapturedTokens(client),
        redirect_handler=None,
        callback_handler=None,
        client_info=client,
    )
    return context.prepare_token_auth(data, dict(FORM))


def _renewed(signed_in: SignedIn, response: httpx2.Response, now: float) -> SignedIn:
    if response.status_code >= 500:
        raise AuthServerUnreachable(f"its token endpoint answered HTTP {response.status_code}")
    if response.status_code != 200:
        raise RefreshRefused(
            f"its token endpoint answered HTTP {response.status_code}{_oauth_error(response)}"
        )
    try:
        tokens = OAuthToken.model_validate_json(response.content)
    except ValidationError:
        raise AuthServerUnreachable("its token endpoint's answer is not a token") from None
    if not tokens.access_token.strip():
        raise AuthServerUnreachable("its token endpoint's answer holds no access token")
    return dataclasses.replace(
        signed_in,
        access_token=tokens.access_token,
        token_type=tokens.token_type,
        refresh_token=tokens.refresh_token or signed_in.refresh_token,
        expires_at=None if tokens.expires_in is None else now + tokens.expires_in,
        scope=tokens.scope or signed_in.scope,
        subject=account_subject(tokens.access_token, None) or signed_in.subject,
        signed_in_at=now,
    )


def _oauth_error(response: httpx2.Response) -> str:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return ""
    return f" ({error})" if isinstance(error, str) and error.isprintable() and len(error) < 80 else ""
