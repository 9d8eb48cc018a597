"""Protected remote MCP servers for the sign-in tests, as real processes on real ports.

`running_protected_server(folder, *flags)` starts tests/servers/protected_mcp.py (an MCP server
behind the SDK's own OAuth, its authorization server built in) and hands back a
`ProtectedServer`: its URLs, and the admin routes through which a test expires, revokes or looks
at the tokens the server has issued. The `protected_server` fixture (tests/conftest.py) is one
that approves every sign-in at once.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode
from urllib.request import Request, urlopen

ROOT = Path(__file__).resolve().parent.parent
PROTECTED_MCP = ROOT / "tests" / "servers" / "protected_mcp.py"
START_SECONDS = 30.0


@dataclass
class ProtectedServer:
    """A running tests/servers/protected_mcp.py."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def base(self) -> str:
        """The authorization server's issuer, and the origin of everything the server serves."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The MCP endpoint, the URL a toolkeeper entry names."""
        return f"{self.base}/mcp"

    def admin(self, route: str, method: str = "POST", **query: str) -> dict[str, Any]:
        address = f"{self.base}/admin/{route}" + (f"?{urlencode(query)}" if query else "")
        with urlopen(
            Request(address, method=method, data=b"" if method == "POST" else None), timeout=10
        ) as answer:
            result: dict[str, Any] = json.loads(answer.read())
            return result

    def stats(self) -> dict[str, Any]:
        """What the server has seen: registrations, authorizations, code_exchanges, refreshes,
        revocations, `calls.<tool>`, and the live clients, tokens and subjects."""
        return self.admin("stats", method="GET")

    def expire_access_tokens(self, subject: str | None = None) -> int:
        """Every access token (of `subject`) expires now; how many did."""
        return int(self.admin("expire", **_whose(subject))["expired"])

    def revoke_refresh_tokens(self, subject: str | None = None, *, access_too: bool = False) -> int:
        """Every refresh token (of `subject`, and its access tokens if asked) stops working."""
        query = _whose(subject) | ({"access": "1"} if access_too else {})
        return int(self.admin("revoke", **query)["revoked"])

    def next_sign_in_as(self, subject: str) -> None:
        """Who the next auto-approved sign-in is."""
        self.admin("subject", name=subject)

    def token_endpoint_down(self, down: bool = True) -> None:
        """The token endpoint answers 503 (or, with False, works again)."""
        self.admin("token-endpoint", down="1" if down else "0")


def _whose(subject: str | None) -> dict[str, str]:
    return {} if subject is None else {"subject": subject}


@contextmanager
def running_protected_server(folder: Path, *flags: str) -> Iterator[ProtectedServer]:
    """tests/servers/protected_mcp.py started with `flags`, listening; stopped on the way out.
    Its log goes to `folder`/protected_mcp.log."""
    with (folder / "protected_mcp.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(PROTECTED_MCP), *flags],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            assert process.stdout is not None
            yield ProtectedServer(port=_printed_port(process, process.stdout), process=process)
        finally:
            _stop(process)


def _printed_port(process: subprocess.Popen[bytes], stdout: IO[bytes]) -> int:
    """The port the server prints once it listens."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], 0.1)
        if ready:
            line = stdout.readline()
            if line.strip().isdigit():
                return int(line)
            if not line and process.poll() is not None:
                break
    raise RuntimeError(f"protected_mcp.py did not say its port (exit status {process.poll()})")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
