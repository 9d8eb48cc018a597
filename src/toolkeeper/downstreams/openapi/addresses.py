"""Which hosts a spec from the network may make toolkeeper reach.

A spec fetched from a URL is written by whoever serves it. Its `$ref`s, its redirects and its
`servers[]` must not turn toolkeeper into a way into the person's own network: a host that is,
or whose name resolves to, a loopback, private, link-local or otherwise non-public address
(127.0.0.0/8, ::1, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16 where clouds keep
their metadata, fe80::/10, fc00::/7, 0.0.0.0, 100.64.0.0/10, multicast) is reached only when the
person configured it themselves: the spec URL's own origin (scheme, host, port), `baseUrl`, or an
origin named in `allowRefOrigins`; another port of a configured host is another service, and is
not trusted with it. Every address a name resolves to is checked, so `localhost` or a public name
pointing at 10.0.0.1 is refused as 10.0.0.1 would be. A name that does not resolve is left to the
request, which fails on its own.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Collection
from urllib.parse import urlsplit

from toolkeeper.config.openapi import DEFAULT_PORTS, OpenApiConfig, is_web_url, origin_of


def internal_address(host: str, port: int) -> str | None:
    """The first non-public address `host` is or resolves to, described (`10.0.0.1, a private
    address`); None when all are public or the name does not resolve."""
    try:
        found = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None
    for *_, address in found:
        described = _non_public(str(address[0]))
        if described is not None:
            return described
    return None


def _non_public(text: str) -> str | None:
    ip = ipaddress.ip_address(text.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        kind = "a loopback address"
    elif ip.is_link_local:
        kind = "a link-local address"
    elif ip.is_unspecified:
        kind = "an unspecified address"
    elif ip.is_private:
        kind = "a private address"
    elif ip.is_multicast or not ip.is_global:
        kind = "not a public address"
    else:
        return None
    return f"{ip}, {kind}"


def internal_host_refusal(url: str, *, trusted_origins: Collection[str | None]) -> str | None:
    """Why `url` must not be reached: its origin is not one the person configured
    (`trusted_origins`, as `origin_of` writes them) and its host is or resolves to a non-public
    address. None when it may be reached."""
    origin = origin_of(url)
    if origin is None:
        return f"{url} is not an http(s) URL with a valid host and port"
    if origin in trusted_origins:
        return None
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or DEFAULT_PORTS[parts.scheme.lower()]
    found = internal_address(host, port)
    if found is None:
        return None
    return found if found.split(",")[0] == host else f"{host} resolves to {found}"


def unsafe_server(url: str, config: OpenApiConfig) -> str | None:
    """Why calls must not be sent to `url`, the server a spec names, or None when they may.

    Only a spec fetched from a URL is doubted, and only when the person did not configure the
    server's origin: with `baseUrl` set, the spec's servers are not used at all; the spec URL's
    own origin and those of `allowRefOrigins` are theirs. The source calls this with the server it is
    about to use, before any request (`_base_url`)."""
    if config.base_url or not is_web_url(config.spec):
        return None
    trusted = {origin_of(config.spec), *config.spec_limits.ref_origins}
    refusal = internal_host_refusal(url, trusted_origins=trusted)
    if refusal is None:
        return None
    return (
        f"its server {url!r} points inside your network ({refusal}), and the spec came from the "
        "network: calls are not sent there unless you set 'baseUrl' to it yourself"
    )
