"""Demo REST API ``bookmarks``: a small bookmarks store with its own OpenAPI document.

The demo configuration adds it as an OpenAPI source, so its operations reach clients as tools
whose hints come from their HTTP method: list and get read only, create and update change
things, replace is idempotent, delete is destructive. It serves its document at
``/openapi.json`` (its server is ``/``, resolved against that URL), and keeps the bookmarks in a
JSON file (``--data``).

``python -m toolkeeper.demo.bookmarks --port 0`` serves it on a free port of 127.0.0.1 and
prints its URL as the first line on stdout; it stops when its standard input closes, so it
never outlives the process that started it.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolkeeper.demo.common import log_to_stderr

logger = logging.getLogger("toolkeeper.demo.bookmarks")

SEED = [
    {"id": 1, "url": "https://modelcontextprotocol.io", "title": "Model Context Protocol", "tags": ["mcp"]},
    {"id": 2, "url": "https://spec.openapis.org/oas/v3.1.0", "title": "OpenAPI 3.1", "tags": ["openapi"]},
]
BOOKMARK = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "description": "The bookmark's number."},
        "url": {"type": "string", "description": "Where it points."},
        "title": {"type": "string", "description": "What it is called."},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Words to find it by."},
    },
    "required": ["id", "url", "title"],
}
FIELDS = {key: BOOKMARK["properties"][key] for key in ("url", "title", "tags")}  # type: ignore[index]
BOOKMARK_ID = {
    "name": "bookmark_id",
    "in": "path",
    "required": True,
    "description": "The bookmark's number.",
    "schema": {"type": "integer"},
}
NOT_FOUND = {"404": {"description": "No such bookmark."}}


def _body(required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": FIELDS, "required": required, "additionalProperties": False}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _ok(schema: dict[str, Any], status: str = "200") -> dict[str, Any]:
    return {status: {"description": "OK", "content": {"application/json": {"schema": schema}}}}


DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "toolkeeper demo bookmarks", "version": "1.0"},
    "servers": [{"url": "/"}],
    "paths": {
        "/bookmarks": {
            "get": {
                "operationId": "listBookmarks",
                "summary": "List bookmarks",
                "description": "Every bookmark, or those with a tag.",
                "parameters": [
                    {
                        "name": "tag",
                        "in": "query",
                        "description": "Only bookmarks with this tag.",
                        "schema": {"type": "string"},
                    }
                ],
                "responses": _ok(
                    {"type": "object", "properties": {"bookmarks": {"type": "array", "items": BOOKMARK}}}
                ),
            },
            "post": {
                "operationId": "createBookmark",
                "summary": "Create a bookmark",
                "requestBody": _body(["url", "title"]),
                "responses": _ok(BOOKMARK, "201"),
            },
        },
        "/bookmarks/{bookmark_id}": {
            "get": {
                "operationId": "getBookmark",
                "summary": "Get a bookmark",
                "parameters": [BOOKMARK_ID],
                "responses": {**_ok(BOOKMARK), **NOT_FOUND},
            },
            "put": {
                "operationId": "replaceBookmark",
                "summary": "Replace a bookmark",
                "parameters": [BOOKMARK_ID],
                "requestBody": _body(["url", "title"]),
                "responses": {**_ok(BOOKMARK), **NOT_FOUND},
            },
            "patch": {
                "operationId": "updateBookmark",
                "summary": "Change some of a bookmark",
                "parameters": [BOOKMARK_ID],
                "requestBody": _body([]),
                "responses": {**_ok(BOOKMARK), **NOT_FOUND},
            },
            "delete": {
                "operationId": "deleteBookmark",
                "summary": "Delete a bookmark",
                "parameters": [BOOKMARK_ID],
                "responses": {"204": {"description": "Deleted."}, **NOT_FOUND},
            },
        },
    },
}


class Bookmarks:
    """The bookmarks, kept in one JSON file (in memory without one)."""

    def __init__(self, data: Path | None) -> None:
        self.data = data
        self._lock = threading.Lock()
        self._memory: list[dict[str, Any]] = [dict(b) for b in SEED]

    def read(self) -> list[dict[str, Any]]:
        if self.data is None:
            return [dict(b) for b in self._memory]
        if not self.data.exists():
            return [dict(b) for b in SEED]
        loaded: list[dict[str, Any]] = json.loads(self.data.read_text(encoding="utf-8"))
        return loaded

    def write(self, bookmarks: list[dict[str, Any]]) -> None:
        if self.data is None:
            self._memory = bookmarks
            return
        self.data.parent.mkdir(parents=True, exist_ok=True)
        self.data.write_text(json.dumps(bookmarks, indent=2), encoding="utf-8")

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/openapi.json", self._document),
                Route("/bookmarks", self._collection, methods=["GET", "POST"]),
                Route("/bookmarks/{bookmark_id:int}", self._one, methods=["GET", "PUT", "PATCH", "DELETE"]),
            ]
        )

    async def _document(self, request: Request) -> Response:
        return JSONResponse(DOCUMENT)

    async def _collection(self, request: Request) -> Response:
        if request.method == "POST":
            fields = await request.json()
            with self._lock:
                bookmarks = self.read()
                made = {"id": max((b["id"] for b in bookmarks), default=0) + 1, "tags": [], **fields}
                self.write([*bookmarks, made])
            return JSONResponse(made, status_code=201)
        tag = request.query_params.get("tag")
        found = [b for b in self.read() if tag is None or tag in b.get("tags", [])]
        return JSONResponse({"bookmarks": found})

    async def _one(self, request: Request) -> Response:
        wanted = request.path_params["bookmark_id"]
        fields = await request.json() if request.method in ("PUT", "PATCH") else {}
        with self._lock:
            bookmarks = self.read()
            found = next((b for b in bookmarks if b["id"] == wanted), None)
            if found is None:
                return JSONResponse({"error": f"no bookmark {wanted}"}, status_code=404)
            if request.method == "GET":
                return JSONResponse(found)
            rest = [b for b in bookmarks if b["id"] != wanted]
            if request.method == "DELETE":
                self.write(rest)
                return Response(status_code=204)
            changed = {"id": wanted, "tags": [], **fields} if request.method == "PUT" else {**found, **fields}
            self.write(sorted([*rest, changed], key=lambda b: int(b["id"])))
        return JSONResponse(changed)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="toolkeeper's demo REST API (bookmarks)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: 0, a free one)")
    parser.add_argument(
        "--data", type=Path, default=None, help="JSON file of the bookmarks (default: in memory)"
    )
    args = parser.parse_args(argv)
    log_to_stderr()
    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(64)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(Bookmarks(args.data).app(), log_level="warning", lifespan="off", access_log=False)
    )
    # Listening already: a request sent from now on waits in the socket's queue.
    print(f"http://{args.host}:{port}", flush=True)
    threading.Thread(target=_stop_when_stdin_closes, args=(server,), daemon=True).start()
    server.run(sockets=[sock])


def _stop_when_stdin_closes(server: Any) -> None:
    while sys.stdin.buffer.read(4096):
        pass
    server.should_exit = True


if __name__ == "__main__":
    main()
