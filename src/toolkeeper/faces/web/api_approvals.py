"""The approvals API: the calls waiting for a person, answered through the same service as the
CLI's (with the dashboard as the channel), and the approval rules with revoke."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.faces.web.face import CHANNEL, JsonResponse, decided_by, face_of, json_object
from toolkeeper.policy.model import Answer
from toolkeeper.services.approvals import parse_answer


def rule_number(text: str) -> int | str:
    """A rule's id from an address: its number, or the text as given for the service to refuse."""
    return int(text) if text.isdigit() and len(text) < 19 else text


async def list_approvals(request: Request) -> Response:
    """The calls waiting for an answer.
    ---
    summary: List the calls waiting for approval
    description: >
      The calls waiting for a person's answer, newest first (the newest 100), with the warnings,
      the arguments as a sentence and as JSON, who waits and until when. With `all=1`, decided,
      expired and not-run calls too. `total` counts them all.
    parameters:
      - {name: all, in: query, required: false, schema: {type: string, enum: ["0", "1"]}}
    responses:
      200: {description: "`{calls: [...], total: n}`"}
      401: {description: No or a wrong token}
    """
    include_decided = request.query_params.get("all") == "1"
    return JsonResponse(await face_of(request).services.approvals.page(include_decided=include_decided))


async def approve(request: Request) -> Response:
    """Let a waiting call run.
    ---
    summary: Approve a waiting call
    description: >
      `scope` says how far the yes reaches: `once` (default), `session` (the rest of the client's
      session) or `always` (writes an approval rule, revocable). A call whose caller stopped
      waiting a moment ago can still be approved once for its retry (`late: true`).
    parameters:
      - {name: call_id, in: path, required: true, schema: {type: string}}
    requestBody:
      required: false
      content:
        application/json:
          schema:
            type: object
            properties: {scope: {type: string, enum: [once, session, always]}}
    responses:
      200: {description: The call as decided (`late` says whether it runs now or on a retry)}
      404: {description: No call has this ID}
      409: {description: "The call was already decided, or stopped waiting too long ago"}
      422: {description: "A scope that is not known, or not offered for this call"}
    """
    body = await json_object(request, required=False)
    answer = parse_answer(body.get("scope", Answer.ONCE.value))
    result = await face_of(request).services.approvals.approve(
        request.path_params["call_id"], answer, by=decided_by(request), channel=CHANNEL
    )
    return JsonResponse(result)


async def deny(request: Request) -> Response:
    """Refuse a waiting call.
    ---
    summary: Deny a waiting call
    description: The call is not run; its client is told a person declined it, with the reason.
    parameters:
      - {name: call_id, in: path, required: true, schema: {type: string}}
    requestBody:
      required: false
      content:
        application/json:
          schema:
            type: object
            properties: {reason: {type: string, description: Why, for the record and the client}}
    responses:
      200: {description: The call as decided}
      404: {description: No call has this ID}
      409: {description: "The call was already decided, or is no longer waiting"}
      422: {description: A reason that is not text}
    """
    body = await json_object(request, required=False)
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ServiceError("The reason is text; send it as a JSON string.", ErrorKind.INVALID)
    result = await face_of(request).services.approvals.deny(
        request.path_params["call_id"], by=decided_by(request), channel=CHANNEL, reason=reason or None
    )
    return JsonResponse(result)


async def list_rules(request: Request) -> Response:
    """The approval rules.
    ---
    summary: List the approval rules
    description: In the order they are tried; those your "session" and "always" answers wrote included.
    responses:
      200: {description: "`{rules: [...]}`"}
      401: {description: No or a wrong token}
    """
    return JsonResponse({"rules": await face_of(request).services.policy.rules()})


async def revoke_rule(request: Request) -> Response:
    """Remove an approval rule.
    ---
    summary: Revoke an approval rule
    description: Its calls are asked again.
    parameters:
      - {name: rule_id, in: path, required: true, schema: {type: integer}}
    responses:
      200: {description: "`{success: true, revoked: {...}}`"}
      404: {description: No rule has this id}
      422: {description: An id that is not a number}
    """
    rule_id = rule_number(request.path_params["rule_id"])
    return JsonResponse(await face_of(request).services.policy.revoke_rule(rule_id))


ROUTES: list[BaseRoute] = [
    Route("/approvals", list_approvals, methods=["GET"]),
    Route("/approvals/{call_id}/approve", approve, methods=["POST"]),
    Route("/approvals/{call_id}/deny", deny, methods=["POST"]),
    Route("/approval-rules", list_rules, methods=["GET"]),
    Route("/approval-rules/{rule_id}", revoke_rule, methods=["DELETE"]),
]
