"""The loopback port `toolkeeper login` opens for one sign-in: the browser comes back to
`http://127.0.0.1:PORT/oauth/callback` with the code, as RFC 8252 has native apps do.

The command cannot send the browser to a running gateway's port instead: a sign-in's state lives
in the process that began it, and nothing records where gateways listen.
"""

from __future__ import annotations

import html
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

CALLBACK_PATH = "/oauth/callback"

# What the callback does with the authorization server's answer: the page's heading, its text,
# and whether the sign-in is over (done or failed for good) so the port may close.
Outcome = tuple[str, str, bool]
Complete = Callable[[dict[str, str]], Awaitable[Outcome]]


class _QuietServer(uvicorn.Server):
    """uvicorn without signal handlers of its own: Ctrl-C must reach the command, which cancels
    the sign-in and closes the port."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LoopbackCallback:
    """A port on 127.0.0.1, bound before the sign-in begins so its address can be the redirect."""

    def __init__(self, complete: Complete) -> None:
        self._complete = complete
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(8)
        self.port: int = self._socket.getsockname()[1]
        app = Starlette(routes=[Route(CALLBACK_PATH, self._callback, methods=["GET"])])
        self._server = _QuietServer(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        )

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    async def serve(self) -> None:
        try:
            await self._server.serve(sockets=[self._socket])
        finally:
            self._socket.close()

    def close(self) -> None:
        self._server.should_exit = True

    async def _callback(self, request: Request) -> Response:
        params = {key: value for key, value in request.query_params.items()}
        heading, text, over = await self._complete(params)
        page = (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>toolkeeper: {html.escape(heading)}</title></head><body>"
            f"<h1>{html.escape(heading)}</h1><p>{html.escape(text)}</p></body></html>"
        )
        return HTMLResponse(page, status_code=200 if over else 400)
