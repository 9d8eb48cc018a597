"""The tools page: every tool, filtered by server, text and risk, paged, as a list or grouped by
risk (the seed's Option C), with bulk actions on a selection; above them, a search box that
ranks the tools by what they do (`?find=`, the same search as `GET /api/search`).

The filters are a GET form, so a search lives in the address and every pager link carries it.
A bulk action is a POST of the checked tools back to `/tools`; its outcome is kept in a
short-lived cookie across the redirect (303) to the same filtered page, which shows it once.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolkeeper.annotations.hints import HINTS
from toolkeeper.catalog import tokens
from toolkeeper.errors import ServiceError
from toolkeeper.faces.web.face import WebFace, face_of, render
from toolkeeper.policy.model import ConfirmMode
from toolkeeper.services.listing import INHERIT, Risk, ToolQuery, View

OUTCOME_COOKIE = "toolkeeper_tools_outcome"
# A cookie holds about 4 KB: the first errors are shown, the rest counted.
ERRORS_SHOWN = 8
MESSAGE_MAX = 200
# The search box's matches: more than the model's few, since a person scans them.
MATCHES_SHOWN = 10


async def tools_page(request: Request) -> Response:
    params = request.query_params
    face = face_of(request)
    problem = None
    try:
        query = _query_from(params)
    except ServiceError as exc:
        problem, query = str(exc), ToolQuery()
    try:
        listing = await face.services.listing.tools(query)
    except ServiceError as exc:
        if problem is not None:
            raise
        problem, query = str(exc), ToolQuery(view=query.view)
        listing = await face.services.listing.tools(query)
    response = render(
        request,
        "tools.html",
        {
            "query": query,
            "listing": listing,
            "problem": problem,
            "outcome": _read_outcome(request),
            "toolsets": await face.services.toolsets.names(),
            "risks": [r.value for r in Risk],
            "modes": [*(m.value for m in ConfirmMode), INHERIT],
            "hint_names": HINTS,
            "pages": _pages(query, listing["pagedOver"]),
            "view_links": {v.value: _link(_with(query, view=v, offset=0)) for v in View},
            "search": await _search(face, params.get("find")),
        },
    )
    if OUTCOME_COOKIE in request.cookies:  # shown once
        response.delete_cookie(OUTCOME_COOKIE, path="/tools")
    return response


async def act_on_selection(request: Request) -> Response:
    """A bulk action from the page's form; back to the same filtered page with its outcome."""
    form = await request.form()
    try:
        query = _query_from(form)
    except ServiceError:
        query = ToolQuery()
    options = {key: form.get(key) for key in ("toolset", "mode", "hint", "value")}
    outcome: dict[str, Any]
    try:
        done = await face_of(request).services.listing.bulk(
            form.get("action"), _form_list(form, "tool"), options, by_person=True
        )
        errors = done["errors"]
        outcome = {
            "message": done["message"],
            "errors": errors[:ERRORS_SHOWN],
            "more": len(errors) - ERRORS_SHOWN,
        }
    except ServiceError as exc:
        outcome = {"error": str(exc)[: MESSAGE_MAX * 4]}
    response = RedirectResponse(_link(query), status_code=303)
    response.set_cookie(
        OUTCOME_COOKIE, _encoded(outcome), max_age=120, path="/tools", httponly=True, samesite="strict"
    )
    return response


async def _search(face: WebFace, text: str | None) -> dict[str, Any] | None:
    """What the search box shows: nothing before a search; then the query as typed, and either
    its matches (each with its cost as a person reads it) or the refusal of the query."""
    if text is None:
        return None
    try:
        answer = await face.gateway.search_as_person(text, MATCHES_SHOWN)
    except ServiceError as exc:
        return {"text": text, "problem": str(exc)}
    return {
        "text": text,
        "query": answer.query,
        "no_match": answer.no_match,
        "matches": [{**found.as_json(), "cost": tokens.short(found.tokens)} for found in answer.found],
        "encoding": tokens.ENCODING,
    }


def _query_from(params: Any) -> ToolQuery:
    return ToolQuery.parse(
        server=params.get("server"),
        text=params.get("q"),
        risk=params.get("risk"),
        view=params.get("view"),
        offset=params.get("offset"),
        limit=params.get("limit"),
    )


def _with(query: ToolQuery, **changes: Any) -> ToolQuery:
    return ToolQuery(**{**query.__dict__, **changes})


def _link(query: ToolQuery) -> str:
    params = query.as_params()
    if query.offset:
        params["offset"] = str(query.offset)
    return "/tools" + ("?" + urlencode(params) if params else "")


def _pages(query: ToolQuery, total: int) -> dict[str, Any]:
    """Where the pager's links go: first, previous, next, last (None where there is none)."""
    last_offset = max(0, (total - 1) // query.limit * query.limit)
    previous = max(0, query.offset - query.limit)
    return {
        "first": _link(_with(query, offset=0)) if query.offset > 0 else None,
        "previous": _link(_with(query, offset=previous)) if query.offset > 0 else None,
        "next": _link(_with(query, offset=query.offset + query.limit))
        if query.offset + query.limit < total
        else None,
        "last": _link(_with(query, offset=last_offset)) if query.offset < last_offset else None,
        "from": min(total, query.offset + 1),
        "to": min(total, query.offset + query.limit),
        "number": query.offset // query.limit + 1,
        "count": max(1, -(-total // query.limit)),
    }


def _encoded(outcome: dict[str, Any]) -> str:
    for error in outcome.get("errors", []):
        error["message"] = error["message"][:MESSAGE_MAX]
    return base64.urlsafe_b64encode(json.dumps(outcome).encode()).decode()


def _read_outcome(request: Request) -> dict[str, Any] | None:
    raw = request.cookies.get(OUTCOME_COOKIE)
    if not raw:
        return None
    try:
        outcome = json.loads(base64.urlsafe_b64decode(raw.encode()))
    except (binascii.Error, ValueError):
        return None
    return outcome if isinstance(outcome, dict) else None


def _form_list(form: FormData, key: str) -> list[str]:
    return [v for v in form.getlist(key) if isinstance(v, str)]


ROUTES: list[BaseRoute] = [
    Route("/tools", tools_page, methods=["GET"], name="tools"),
    Route("/tools", act_on_selection, methods=["POST"], name="tools-act"),
]
