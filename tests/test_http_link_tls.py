"""The raw HTTP lane's TLS settings are made once per process, off the event loop: loading the
system's certificates is no cost a new connection pays."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from toolkeeper.downstreams import http
from toolkeeper.downstreams.http import HttpLink

pytestmark = pytest.mark.anyio


async def test_every_https_connection_shares_one_context_made_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made_in: list[threading.Thread] = []
    real = ssl.create_default_context

    def counted() -> ssl.SSLContext:
        made_in.append(threading.current_thread())
        return real()

    monkeypatch.setattr(ssl, "create_default_context", counted)
    http.client_tls.cache_clear()
    with socket.socket() as closed:  # a port nobody listens on: each connection is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    for link in (HttpLink(f"https://127.0.0.1:{port}/mcp", {}), HttpLink(f"https://127.0.0.1:{port}/b", {})):
        for _ in range(2):
            with pytest.raises(ConnectionRefusedError):
                await link._connect()
    http.client_tls.cache_clear()
    assert len(made_in) == 1 and made_in[0] is not threading.main_thread()
