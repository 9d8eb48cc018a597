"""The audit page: recorded calls, newest first, one per row, narrowed by a GET form whose values
the pager keeps; a gap (records that had to be dropped) shows in place as a gap. Each call's
whole record is one click away at `/audit/{id}`."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from toolkeeper.display import visible, visible_line
from toolkeeper.faces.web.face import face_of, render
from toolkeeper.faces.web.shown import NAME_MAX, json_block, utc_time, who
from toolkeeper.services.audit import (
    RECORDED_DECISIONS,
    FilterError,
    marker_sentence,
    outcome_label,
    remote_account_label,
    several_replicas,
)

PER_PAGE = 50
FILTERS = ("tool", "server", "decision", "client", "since", "until")
PAGE_MAX = 100_000  # far beyond any log a person pages through


def shown_record(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the page shows it: its time, who called, its outcome in words, and for a gap
    or an anchor the sentence that says what it marks."""
    latency = record.get("latencyMs")
    wait = record.get("waitMs")
    return {
        **record,
        "when": utc_time(record.get("at")),
        # Names and text a client or server chose, every character that would act made visible.
        "name": visible_line(str(record.get("exposedName") or ""), NAME_MAX),
        "detailShown": visible(str(record["detail"])) if record.get("detail") else "",
        "who": who(record.get("principal"), record.get("client"), record.get("principalClient")),
        "outcomeShown": outcome_label(record),
        # The remote server's account the call was made with (a subject the server chose).
        "remoteAccountShown": visible_line(remote_account_label(record), NAME_MAX),
        # The gateway process that wrote it, where replicas share the store.
        "replicaShown": visible_line(str(record.get("replica") or ""), NAME_MAX),
        "duration": f"{latency:,} ms" if isinstance(latency, int) else "",
        "waited": f"{wait / 1000:,.1f} s" if isinstance(wait, int) else "",
        "marker": marker_sentence(record, utc_time),
    }


def _page_number(text: str | None) -> int:
    """The page asked for (1 when none is); a number out of range is refused beside the pager."""
    if not text:
        return 1
    if not text.isdigit() or not 1 <= int(text) <= PAGE_MAX:
        raise FilterError("page", f"page: {text!r} is not a page; give a number from 1 to {PAGE_MAX:,}.")
    return int(text)


def _link(filters: dict[str, str], page: int) -> str:
    given = {name: value for name, value in filters.items() if value}
    return "/audit?" + urlencode({**given, "page": page}) if page > 1 else "/audit?" + urlencode(given)


async def audit(request: Request) -> Response:
    filters = {name: request.query_params.get(name, "").strip() for name in FILTERS}
    problems: dict[str, str] = {}
    records: list[dict[str, Any]] = []
    page = 1
    try:
        page = _page_number(request.query_params.get("page"))
        records = await face_of(request).services.audit.query(
            tool=filters["tool"],
            server=filters["server"],
            decision=filters["decision"],
            client=filters["client"],
            since=filters["since"],
            until=filters["until"],
            limit=PER_PAGE + 1,  # one more says whether a next page exists
            offset=(page - 1) * PER_PAGE,
        )
    except FilterError as error:
        problems[error.field] = str(error)
    context = {
        "filters": filters,
        "problems": problems,
        "decisions": RECORDED_DECISIONS,
        "records": [shown_record(record) for record in records[:PER_PAGE]],
        "with_replica": several_replicas(records[:PER_PAGE]),
        "page": page,
        "first": (page - 1) * PER_PAGE + 1,
        "previous": _link(filters, page - 1) if page > 1 else None,
        "next": _link(filters, page + 1) if len(records) > PER_PAGE else None,
        "filtered": any(filters.values()),
        "query": request.url.query,  # what each record's link carries back
    }
    return render(request, "audit.html", context, status_code=422 if problems else 200)


async def record(request: Request) -> Response:
    found = await face_of(request).services.audit.record(request.path_params["record_id"])
    shown = shown_record(found)
    blocks = {
        name: json_block(found[name]) if found.get(name) is not None else None
        for name in ("arguments", "facts")
    }
    # The record's address carries the listing's filters and page, so that its way back keeps them.
    back = "/audit" + (f"?{request.url.query}" if request.url.query else "")
    return render(request, "audit_record.html", {"record": shown, "blocks": blocks, "back": back})


ROUTES: list[BaseRoute] = [
    Route("/audit", audit, methods=["GET"], name="audit"),
    Route("/audit/{record_id}", record, methods=["GET"], name="audit-record"),
]
