"""Finding tools by what they do, as JSON: `GET /api/search?q=`. The tools page's search box
shows the same answer (`Gateway.search_as_person`); both are thin faces over services/search.py, which
the model's `find-tools` and `toolkeeper search` share.

It is not `/api/tools/search`: that path is one tool's (`/api/tools/{name}`) when a server
offers a tool named `search` without a prefix."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web.face import JsonResponse, face_of


def limit_from(text: str | None) -> object:
    """A limit as a query string gives it: digits become a number; anything else goes to the
    service as it came, which refuses it by name."""
    if text is None or text == "":
        return None
    return int(text) if text.strip().isdigit() else text


async def search(request: Request) -> Response:
    """Find tools by what they do.
    ---
    summary: Find tools by what they do, best match first
    description: Ranks every tool the servers offer (BM25 over each tool's name, title,
      description with its notes, and parameter names), as the model's find-tools and
      `toolkeeper search` do.
    parameters:
      - name: q
        in: query
        required: true
        schema: {type: string, maxLength: 500}
        description: what the tool should do, in a few words
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 20, default: 5}}
    responses:
      200:
        description: >
          {"query", "matches": [{name, title, description (its first line), tokens (its
          definition's estimated tokens), listed (in the list normal mode gives clients)}],
          "encoding" (the tokenizer's encoding the estimates use)}. No match is an empty list.
      422: {description: "the query is empty or too long, or limit is not a whole number from 1 to 20"}
    """
    params = request.query_params
    answer = await face_of(request).gateway.search_as_person(params.get("q"), limit_from(params.get("limit")))
    return JsonResponse(answer.as_json())


ROUTES: list[BaseRoute] = [Route("/search", search, methods=["GET"])]
