"""The servers under `/api/servers`: their state, and reconnecting one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web.face import JsonResponse, face_of
from toolkeeper.services.inspect import server_rows
from toolkeeper.services.servers import reconnect_server
from toolkeeper.services.signin import with_sign_in


async def servers(request: Request) -> Response:
    """Every configured server with its state.
    ---
    summary: List the servers
    description: Each server's state, era, trust, tool count, connection count and last error;
      invalid and disabled entries too. A remote server that signs in has a `signIn` object (the
      account's state, subject and times; never a token).
    responses:
      200: {description: "{servers: [...]}"}
    """
    face = face_of(request)
    return JsonResponse({"servers": with_sign_in(server_rows(face.gateway), face.sign_in)})


async def reconnect(request: Request) -> Response:
    """Reconnect a server now.
    ---
    summary: Reconnect a server now
    description: Drops the server's connection and connects again at once (its backoff started
      over); a source that is not an MCP server reads what it was made from again. Its tools are
      listed again once it is back.
    parameters:
      - {name: name, in: path, required: true, schema: {type: string}}
    responses:
      202: {description: The reconnection has started}
      404: {description: No server of that name}
      409: {description: The server is disabled or its entry is invalid}
    """
    name = request.path_params["name"]
    return JsonResponse(reconnect_server(face_of(request).gateway, name), status_code=202)


ROUTES: list[BaseRoute] = [
    Route("/servers", servers, methods=["GET"]),
    Route("/servers/{name}/reconnect", reconnect, methods=["POST"]),
]
