"""What a sign-in may reach: metadata that points the gateway somewhere it should not go is a lie
the SDK does not catch on its own (it checks the issuer, not where the endpoints are)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import httpx2
from mcp.shared.auth import OAuthMetadata

LOOPBACK_NAMES = frozenset({"localhost"})


class UnsafeEndpoint(Exception):
    """An authorization server's metadata named an endpoint the gateway refuses to use."""


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


class EndpointGuard:
    """An httpx request hook for a sign-in's client: every request goes over https, to a loopback
    address, or to the server's own origin (which the person configured, http or not). Tokens and
    codes sent in clear to anywhere else could be read on the way."""

    def __init__(self, server_url: str) -> None:
        self._server_origin = origin(server_url)

    async def __call__(self, request: httpx2.Request) -> None:
        url = str(request.url)
        if request.url.scheme == "https" or origin(url) == self._server_origin:
            return
        if request.url.scheme == "http" and is_loopback(request.url.host):
            return
        raise UnsafeEndpoint(
            f"the authorization server's metadata points to {request.url.scheme}://{request.url.host}, "
            "which is neither https nor a loopback address"
        )


# Where the gateway sends its codes, secrets and refresh tokens: these must be the issuer's own.
SECRET_ENDPOINTS = ("token_endpoint", "registration_endpoint", "revocation_endpoint")


def check_metadata(metadata: OAuthMetadata | None, server_url: str) -> None:
    """Refuse an authorization server's metadata whose endpoints are reached in clear off the
    loopback, or that sends secrets to an origin other than the issuer's. Raises UnsafeEndpoint."""
    if metadata is None:
        return
    server_origin = origin(server_url)
    issuer_origin = origin(str(metadata.issuer))
    for name, value in metadata.model_dump(mode="json").items():
        if not name.endswith("_endpoint") or not isinstance(value, str):
            continue
        parts = urlsplit(value)
        if (
            parts.scheme != "https"
            and origin(value) != server_origin
            and not is_loopback(parts.hostname or "")
        ):
            raise UnsafeEndpoint(
                f"the authorization server's {name} ({parts.scheme}://{parts.hostname}) is neither https "
                "nor a loopback address"
            )
        if name in SECRET_ENDPOINTS and origin(value) != issuer_origin:
            raise UnsafeEndpoint(
                f"the authorization server's {name} is on another origin than its issuer "
                f"({parts.scheme}://{parts.netloc} for {metadata.issuer})"
            )
