"""A small REST API the OpenAPI tests call for real: a Starlette app that serves its own OpenAPI
document at /openapi.json and records every request it receives, run by uvicorn in a thread on
a free port of 127.0.0.1."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

HEADER_KEY = "k-123"
QUERY_KEY = "q-456"
SLOW_SECONDS = 5.0
HUGE_BYTES = 3 * 1024 * 1024

ITEM = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id", "name"],
}
ITEM_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "what the item is called"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["name"],
            }
        }
    },
}
ITEM_ID = {"name": "item_id", "in": "path", "required": True, "schema": {"type": "integer"}}


def json_response(schema: dict[str, Any], status: str = "200") -> dict[str, Any]:
    return {status: {"description": "ok", "content": {"application/json": {"schema": schema}}}}


def document(server_url: str) -> dict[str, Any]:
    """The API's OpenAPI document, its server at `server_url` (relative or absolute)."""
    text = {"200": {"description": "text", "content": {"text/plain": {"schema": {"type": "string"}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Test items API", "version": "1.0"},
        "servers": [{"url": server_url}],
        "components": {
            "securitySchemes": {
                "headerKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "queryKey": {"type": "apiKey", "in": "query", "name": "api_key"},
            }
        },
        "paths": {
            "/items": {
                "get": {
                    "operationId": "listItems",
                    "summary": "List items",
                    "parameters": [
                        {
                            "name": "tag",
                            "in": "query",
                            "schema": {"type": "array", "items": {"type": "string"}},
                        },
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                    ],
                    "responses": json_response(
                        {"type": "object", "properties": {"items": {"type": "array", "items": ITEM}}}
                    ),
                },
                "post": {
                    "operationId": "createItem",
                    "summary": "Create an item",
                    "requestBody": ITEM_BODY,
                    "responses": json_response(ITEM, "201"),
                },
            },
            "/items/{item_id}": {
                "get": {
                    "operationId": "getItem",
                    "parameters": [ITEM_ID],
                    "responses": json_response(ITEM),
                },
                "put": {
                    "operationId": "replaceItem",
                    "parameters": [ITEM_ID],
                    "requestBody": ITEM_BODY,
                    "responses": json_response(ITEM),
                },
                "patch": {
                    "operationId": "patchItem",
                    "parameters": [ITEM_ID],
                    "requestBody": {**ITEM_BODY, "required": False},
                    "responses": json_response(ITEM),
                },
                "delete": {
                    "operationId": "deleteItem",
                    "parameters": [ITEM_ID],
                    "responses": {"204": {"description": "deleted"}},
                },
            },
            "/ping": {
                "head": {"operationId": "headPing", "responses": {"200": {"description": "up"}}},
                "options": {"operationId": "optionsPing", "responses": {"204": {"description": "allowed"}}},
            },
            "/echo/{name}": {
                "get": {
                    "operationId": "echo",
                    "parameters": [
                        {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                        {
                            "name": "ids",
                            "in": "query",
                            "schema": {"type": "array", "items": {"type": "integer"}},
                        },
                        {
                            "name": "flags",
                            "in": "query",
                            "explode": False,
                            "schema": {"type": "array", "items": {"type": "string"}},
                        },
                        {"name": "X-Mode", "in": "header", "schema": {"type": "string"}},
                        {"name": "pref", "in": "cookie", "schema": {"type": "string"}},
                    ],
                    "responses": json_response({"type": "object"}),
                }
            },
            "/secure/header": {
                "get": {"operationId": "secureHeader", "security": [{"headerKey": []}], "responses": text}
            },
            "/secure/query": {
                "get": {"operationId": "secureQuery", "security": [{"queryKey": []}], "responses": text}
            },
            "/fail": {"get": {"operationId": "fail", "responses": text}},
            "/slow": {"get": {"operationId": "slow", "responses": text}},
            "/huge": {"get": {"operationId": "huge", "responses": text}},
            "/redirect/same": {"get": {"operationId": "redirectSame", "responses": text}},
            "/redirect/away": {"get": {"operationId": "redirectAway", "responses": text}},
            "/drift": {
                "get": {
                    "operationId": "drift",
                    "responses": json_response(
                        {
                            "type": "object",
                            "properties": {"count": {"type": "integer"}},
                            "required": ["count"],
                        }
                    ),
                }
            },
        },
    }


@dataclass
class RestApi:
    """The running API: its URL and what it received."""

    url: str = ""
    received: list[tuple[str, str]] = field(default_factory=list)
    items: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def spec_url(self) -> str:
        return f"{self.url}/openapi.json"

    def app(self) -> Starlette:
        return Starlette(routes=self._routes())

    def _routes(self) -> list[Route]:
        def recorded(handler: Any) -> Any:
            async def endpoint(request: Request) -> Response:
                self.received.append((request.method, request.url.path))
                response: Response = await handler(request)
                return response

            return endpoint

        return [
            Route("/openapi.json", self._openapi),
            Route("/api/items", recorded(self._items), methods=["GET", "POST"]),
            Route(
                "/api/items/{item_id:int}", recorded(self._item), methods=["GET", "PUT", "PATCH", "DELETE"]
            ),
            Route("/api/ping", recorded(self._ping), methods=["HEAD", "OPTIONS", "GET"]),
            Route("/api/echo/{name:path}", recorded(self._echo)),
            Route("/api/secure/header", recorded(self._secure_header)),
            Route("/api/secure/query", recorded(self._secure_query)),
            Route("/api/fail", recorded(self._fail)),
            Route("/api/slow", recorded(self._slow)),
            Route("/api/huge", recorded(self._huge)),
            Route("/api/redirect/same", recorded(self._redirect_same)),
            Route("/api/redirect/away", recorded(self._redirect_away)),
            Route("/api/drift", recorded(self._drift)),
        ]

    async def _openapi(self, request: Request) -> Response:
        return JSONResponse(document("/api"))

    async def _items(self, request: Request) -> Response:
        if request.method == "POST":
            body = await request.json()
            item_id = max(self.items, default=0) + 1
            self.items[item_id] = {"id": item_id, **body}
            return JSONResponse(self.items[item_id], status_code=201)
        tags = request.query_params.getlist("tag")
        found = [i for i in self.items.values() if not tags or set(tags) & set(i.get("tags", []))]
        limit = int(request.query_params.get("limit", len(found) or 1))
        return JSONResponse({"items": found[:limit]})

    async def _item(self, request: Request) -> Response:
        item_id = request.path_params["item_id"]
        if item_id not in self.items:
            return JSONResponse({"error": f"no item {item_id}"}, status_code=404)
        if request.method == "DELETE":
            del self.items[item_id]
            return Response(status_code=204)
        if request.method == "PUT":
            self.items[item_id] = {"id": item_id, **(await request.json())}
        elif request.method == "PATCH":
            self.items[item_id] = {**self.items[item_id], **(await request.json())}
        return JSONResponse(self.items[item_id])

    async def _ping(self, request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers={"Allow": "GET, HEAD, OPTIONS"})
        response = Response(status_code=200, headers={"X-Up": "yes"})
        response.set_cookie("tracker", "set-by-the-api")  # must not ride along on later requests
        return response

    async def _echo(self, request: Request) -> Response:
        return JSONResponse(
            {
                "raw_path": request.scope["raw_path"].decode(),
                "name": request.path_params["name"],
                "query": request.url.query,
                "ids": request.query_params.getlist("ids"),
                "flags": request.query_params.get("flags"),
                "mode": request.headers.get("x-mode"),
                "cookies": dict(request.cookies),
            }
        )

    async def _secure_header(self, request: Request) -> Response:
        if request.headers.get("x-api-key") != HEADER_KEY:
            return PlainTextResponse("missing or wrong X-API-Key", status_code=401)
        return PlainTextResponse("header key accepted")

    async def _secure_query(self, request: Request) -> Response:
        if request.query_params.get("api_key") != QUERY_KEY:
            return PlainTextResponse("missing or wrong api_key", status_code=401)
        return PlainTextResponse("query key accepted")

    async def _fail(self, request: Request) -> Response:
        return PlainTextResponse("database on fire", status_code=500)

    async def _slow(self, request: Request) -> Response:
        import anyio

        await anyio.sleep(SLOW_SECONDS)
        return PlainTextResponse("finally")

    async def _huge(self, request: Request) -> Response:
        return PlainTextResponse("x" * HUGE_BYTES)

    async def _redirect_same(self, request: Request) -> Response:
        return RedirectResponse("/api/ping", status_code=302)

    async def _drift(self, request: Request) -> Response:
        # Real APIs drift from their documents: this one says `count` is an integer.
        return JSONResponse({"count": "many"})

    async def _redirect_away(self, request: Request) -> Response:
        return RedirectResponse("http://example.invalid/steal", status_code=302)


def spec_document(api: RestApi) -> dict[str, Any]:
    """The API's document with its absolute server URL, for a spec written to a file."""
    return copy.deepcopy(document(f"{api.url}/api"))


@contextmanager
def running_api() -> Iterator[RestApi]:
    """The API on a free port of 127.0.0.1, listening before this returns, stopped on exit."""
    api = RestApi()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    api.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(api.app(), log_level="warning", lifespan="off"))
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
