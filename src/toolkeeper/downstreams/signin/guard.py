"""What a sign-in may reach: metadata that points the gateway somewhere it should not go is a lie
the SDK does not catch on its own (it checks the issuer, not where the endpoints are)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import httpx2

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
