"""The HTTP edge's defence against DNS rebinding: a request's Host and Origin headers, parsed
and matched exactly against the names the gateway answers to, before anything else reads it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$")
# A client sends the same Host and Origin on every request: each pair is decided once. Past
# this many pairs (headers made up by whoever calls) the decisions are forgotten and made anew.
MAX_REMEMBERED_DECISIONS = 256


class HostGuard:
    """Host and Origin headers matched exactly against the allowed names: a name with ":*"
    allows it on any port, without it only bare. Parsed, never compared by prefix, so
    `localhost:80@evil.com` or `http://localhost:80.evil.com` are not taken for local."""

    def __init__(self, hosts: Sequence[str], origins: Sequence[str]) -> None:
        self.hosts = frozenset(hosts)
        self.origins = frozenset(origins)
        self._decided: dict[tuple[str | None, str | None], tuple[int, str] | None] = {}

    def problem(self, host: str | None, origin: str | None) -> tuple[int, str] | None:
        """The HTTP status and text a request with these headers is refused with, as the SDK
        words it; None if it may pass. No Origin (a client that is not a browser) passes."""
        key = (host, origin)
        if key not in self._decided:
            if len(self._decided) >= MAX_REMEMBERED_DECISIONS:
                self._decided.clear()
            self._decided[key] = self._decide(host, origin)
        return self._decided[key]

    def _decide(self, host: str | None, origin: str | None) -> tuple[int, str] | None:
        if host is None or not self._host_allowed(host):
            return 421, "Invalid Host header"
        if origin and not self.origin_allowed(origin):
            return 403, "Invalid Origin header"
        return None

    def _host_allowed(self, host: str) -> bool:
        match = _HOST.match(host)
        if match is None:
            return False
        name, port = match.group(1).lower(), match.group(2)
        return (f"{name}:*" in self.hosts and port is not None) or (
            (f"{name}:{port}" if port else name) in self.hosts
        )

    def origin_allowed(self, origin: str) -> bool:
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        if (
            parts.path
            or parts.query
            or parts.fragment
            or parts.username
            or parts.password
            or not parts.hostname
        ):
            return False
        name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        # The parser is lenient around brackets: "[::1].evil.com" parses to the host "::1". Only
        # a network location that is exactly the host and port it parsed to is taken at its word.
        if parts.netloc.lower() != (name if port is None else f"{name}:{port}"):
            return False
        base = f"{parts.scheme}://{name}"
        return (f"{base}:*" in self.origins and port is not None) or (
            (f"{base}:{port}" if port is not None else base) in self.origins
        )


DEFAULT_PORTS = {"http": 80, "https": 443}


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether a browser's Origin header names exactly the site the request was sent to: the
    scheme it came in on and its Host header (already checked), the default port left out as
    browsers leave it out. A page on another port of the same machine is another site."""
    match = _HOST.match(host)
    if match is None:
        return False
    name, port = match.group(1).lower(), match.group(2)
    number = int(port) if port is not None else DEFAULT_PORTS.get(scheme)
    shown = "" if number == DEFAULT_PORTS.get(scheme) else f":{number}"
    return origin.lower() == f"{scheme}://{name}{shown}"
