"""An HTTP server that records exactly what it received (method, the raw request path, query,
headers, body bytes) and answers `{"ok": true}` (or its `answer`, JSON bytes a test sets): a
bare ASGI app run by uvicorn in a thread on a free port of 127.0.0.1, so a test can assert on
the bytes a request put on the wire."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn


@dataclass(frozen=True)
class Received:
    method: str
    raw_path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class EchoApi:
    url: str = ""
    received: list[Received] = field(default_factory=list)
    answer: bytes = b'{"ok": true}'

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.received.append(
            Received(
                method=scope["method"],
                raw_path=scope["raw_path"].decode("latin-1"),
                query=scope["query_string"].decode("latin-1"),
                headers={k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]},
                body=body,
            )
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": self.answer})


@contextmanager
def running_echo() -> Iterator[EchoApi]:
    """The echo server on a free port of 127.0.0.1, listening before this returns."""
    api = EchoApi()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    api.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(api, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        yield api
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
