"""The audit API: recorded calls, newest first, filtered and paged as the audit page does; one
record whole."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web.face import JsonResponse, face_of
from toolkeeper.services.audit import FilterError

DEFAULT_LIMIT = 50
TEXT_FILTERS = ("tool", "server", "decision", "client", "principal", "since", "until")


def _number(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or len(text) > 18:
        raise FilterError(name, f"{name}: {text!r} is not a whole number.")
    return int(text)


async def list_records(request: Request) -> Response:
    """Recorded calls, newest first.
    ---
    summary: List audit records
    description: >
      Newest first, `limit` of them from the `offset`th on, narrowed by the filters given. Gaps
      (records that had to be dropped) stay in whatever the filters of calls, since a gap may
      hide calls that match them; `since` and `until` narrow them too. `nextOffset` is where
      the next page starts (null on the last page). A call to a remote server that signs in has
      `remoteAccount`: the `account` it was made with (`gateway`, or the principal's `kind:name`)
      and the token's `subject` where it names one (else null); other records have null.
      `replica` names the gateway process that wrote the record, where replicas share the store
      (null for records written before records named one).
    parameters:
      - name: tool
        in: query
        schema: {type: string}
        description: the name a client called, server.tool, or the tool's own name
      - {name: server, in: query, schema: {type: string}}
      - {name: decision, in: query, schema: {type: string, enum: [allow, deny]}}
      - name: client
        in: query
        schema: {type: string}
        description: the name the client gave itself, exactly
      - name: principal
        in: query
        schema: {type: string}
        description: "who the gateway let in, exactly as recorded: a key's name, oauth:SUBJECT, local"
      - name: since
        in: query
        schema: {type: string}
        description: a duration back from now (15m, 2h, 7d) or an ISO date or time
      - name: until
        in: query
        schema: {type: string}
        description: a duration back from now or an ISO date or time
      - {name: offset, in: query, schema: {type: integer, minimum: 0, default: 0}}
      - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 10000, default: 50}}
    responses:
      200: {description: "`{records: [...], offset, limit, nextOffset}`"}
      401: {description: No or a wrong token}
      422: {description: "A filter that cannot be read"}
    """
    offset = _number(request, "offset", 0)
    limit = _number(request, "limit", DEFAULT_LIMIT)
    given = {name: request.query_params.get(name, "").strip() for name in TEXT_FILTERS}
    records = await face_of(request).services.audit.query(
        tool=given["tool"],
        server=given["server"],
        decision=given["decision"],
        client=given["client"],
        principal=given["principal"],
        since=given["since"],
        until=given["until"],
        limit=limit,
        offset=offset,
    )
    # A full page may have a next one; a short page is the last.
    next_offset = offset + len(records) if len(records) == limit else None
    return JsonResponse({"records": records, "offset": offset, "limit": limit, "nextOffset": next_offset})


async def get_record(request: Request) -> Response:
    """One audit record.
    ---
    summary: Get an audit record
    description: The whole record, as the list gives it.
    parameters:
      - {name: record_id, in: path, required: true, schema: {type: string}}
    responses:
      200: {description: The record}
      404: {description: No record has this id}
    """
    return JsonResponse(await face_of(request).services.audit.record(request.path_params["record_id"]))


ROUTES: list[BaseRoute] = [
    Route("/audit", list_records, methods=["GET"]),
    Route("/audit/{record_id}", get_record, methods=["GET"]),
]
