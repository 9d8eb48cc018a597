"""The approvals inbox: the calls waiting for a person, newest first, answered here through the
same service as the CLI's (`channel` the dashboard); the approval rules, with revoke.

The list updates live: `/approvals/events` streams an event whenever the set of waiting calls
changes, and the page's script fetches the list again (`?fragment=1`). The store is the truth,
since another gateway process on the same store may be the one asking. Without scripts the page
works as it is, with a link that reloads it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any
from urllib.parse import urlencode

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from toolkeeper.errors import ServiceError, http_status
from toolkeeper.faces.web.api_approvals import rule_number
from toolkeeper.faces.web.face import CHANNEL, decided_by, face_of, render
from toolkeeper.faces.web.shown import json_block, utc_time, who
from toolkeeper.pipeline.approval import MAY_DESTROY, MAY_REACH_OUT
from toolkeeper.policy.model import Answer
from toolkeeper.services.approvals import ApprovalService, parse_answer
from toolkeeper.store import StoreError

EVENTS_POLL_SECONDS = 0.5  # how often the stream looks at the store for a change
KEEPALIVE_SECONDS = 15.0  # a comment line this often, so that a gone reader is noticed
RECONNECT_MS = 2000  # how soon a browser opens the stream again once it broke
DECIDED_SHOWN = 50  # how many decided calls `?all=1` shows
# How each warning of the gate is marked: the seed's destructive warning stands out.
WARNING_CLASSES = {MAY_DESTROY: "destructive", MAY_REACH_OUT: "openworld"}
REACH = {Answer.ONCE.value: "once", Answer.SESSION.value: "for this session", Answer.ALWAYS.value: "always"}


def shown_call(call: dict[str, Any]) -> dict[str, Any]:
    """A call as the inbox shows it: the service's description, plus who waits, its times and
    its arguments laid out as JSON."""
    return {
        **call,
        "who": who(call.get("principal"), call.get("client")),
        "asked": utc_time(call.get("createdAt")),
        "deadline": utc_time(call.get("expiresAt")),
        "decided": utc_time(call.get("decidedAt")),
        "warningsShown": [(text, WARNING_CLASSES.get(text, "")) for text in call.get("warnings", [])],
        "argumentsJson": json_block(call["arguments"]) if call.get("arguments") is not None else None,
    }


async def _list_context(request: Request) -> dict[str, Any]:
    page = await face_of(request).services.approvals.page()
    calls = [shown_call(call) for call in page["calls"]]
    return {"calls": calls, "total": page["total"], "waiting": " ".join(call["id"] for call in calls)}


async def _page_context(request: Request) -> dict[str, Any]:
    face = face_of(request)
    context = await _list_context(request)
    show_decided = request.query_params.get("all") == "1"
    decided: list[dict[str, Any]] = []
    if show_decided:
        every = await face.services.approvals.page(include_decided=True, limit=DECIDED_SHOWN)
        decided = [shown_call(call) for call in every["calls"] if call["status"] != "pending"]
    return {
        **context,
        "show_decided": show_decided,
        "decided": decided,
        "rules": await face.services.policy.rules(),
        "notice": _notice(request),
    }


def _notice(request: Request) -> str | None:
    """What the last answer given here did, from the address it redirected to."""
    said = request.query_params
    call_id, scope = said.get("call", ""), said.get("scope", "")
    if said.get("said") == "approved":
        reach = REACH.get(scope, "")
        if said.get("late") == "1":
            return (
                f"Approved call {call_id} {reach}, but its caller had stopped waiting: nothing runs "
                "now. The same call retried by its client soon runs without asking again."
            )
        return f"Approved call {call_id} {reach}: the call runs now."
    if said.get("said") == "denied":
        return f"Denied call {call_id}: the call was not run, and its client is told why."
    if said.get("said") == "revoked":
        return f"Revoked approval rule {said.get('rule', '')}: its calls are asked again."
    return None


async def inbox(request: Request) -> Response:
    if request.query_params.get("fragment") == "1":
        return render(request, "approvals_list.html", await _list_context(request))
    return render(request, "approvals.html", await _page_context(request))


async def _refused(request: Request, error: ServiceError, fields: dict[str, str] | None = None) -> Response:
    """The inbox again, with the service's refusal: at the top, and beside the field it is about."""
    context = {**await _page_context(request), "problem": str(error), "fields": fields or {}}
    return render(request, "approvals.html", context, status_code=http_status(error.kind))


def _back(**said: str) -> Response:
    return RedirectResponse("/approvals?" + urlencode(said), status_code=303)


async def approve(request: Request) -> Response:
    call_id = request.path_params["call_id"]
    form = await request.form()
    try:
        answer = parse_answer(form.get("scope", Answer.ONCE.value))
        result = await face_of(request).services.approvals.approve(
            call_id, answer, by=decided_by(request), channel=CHANNEL
        )
    except ServiceError as error:
        return await _refused(request, error)
    return _back(said="approved", call=call_id, scope=answer.value, late="1" if result.get("late") else "0")


async def deny(request: Request) -> Response:
    call_id = request.path_params["call_id"]
    form = await request.form()
    reason = str(form.get("reason", "")).strip() or None
    try:
        approvals = face_of(request).services.approvals
        await approvals.deny(call_id, by=decided_by(request), channel=CHANNEL, reason=reason)
    except ServiceError as error:
        return await _refused(request, error, {f"reason-{call_id}": str(error)})
    return _back(said="denied", call=call_id)


async def revoke(request: Request) -> Response:
    rule_id = rule_number(request.path_params["rule_id"])
    try:
        await face_of(request).services.policy.revoke_rule(rule_id)
    except ServiceError as error:
        return await _refused(request, error)
    return _back(said="revoked", rule=str(rule_id))


async def events(request: Request) -> Response:
    """Server-sent events: `pending` with the ids of the waiting calls, whenever they change."""
    stream = pending_changes(face_of(request).services.approvals)
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def pending_changes(
    approvals: ApprovalService,
    *,
    poll: float = EVENTS_POLL_SECONDS,
    keepalive: float = KEEPALIVE_SECONDS,
) -> AsyncIterator[str]:
    """The event stream's text: the waiting calls' ids at once, then each time the set changes,
    read from the store every `poll` seconds. It ends when the gateway begins to stop; it is
    cancelled with its request when the reader goes away (Starlette listens for that) or when
    the gateway ends the requests still open."""
    yield f"retry: {RECONNECT_MS}\n\n"
    seen: list[str] | None = None
    quiet = 0.0
    while approvals.stopping is None:
        current: list[str] | None = None
        with suppress(StoreError):  # locked or being restored for a moment: look again
            current = await approvals.waiting_ids()
        if current is not None and current != seen:
            seen, quiet = current, 0.0
            yield f"event: pending\ndata: {json.dumps({'waiting': current})}\n\n"
        elif quiet >= keepalive:
            quiet = 0.0
            yield ": waiting\n\n"
        await anyio.sleep(poll)
        quiet += poll


ROUTES: list[BaseRoute] = [
    Route("/approvals", inbox, methods=["GET"], name="approvals"),
    Route("/approvals/events", events, methods=["GET"], name="approval-events"),
    Route("/approvals/{call_id}/approve", approve, methods=["POST"], name="approve"),
    Route("/approvals/{call_id}/deny", deny, methods=["POST"], name="deny"),
    Route("/approvals/rules/{rule_id}/revoke", revoke, methods=["POST"], name="revoke-rule"),
]
