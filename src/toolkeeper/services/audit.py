"""Reading the audit log, once: the CLI (and later the web face) pass the person's filters as
they typed them; what each filter accepts is decided here."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Row

from toolkeeper.errors import ServiceError
from toolkeeper.policy.model import Decision
from toolkeeper.services.durations import DURATION_FORMS, parse_duration
from toolkeeper.store import Store
from toolkeeper.store import audit as audit_rows

# The decisions a record can hold: what happened to the call (a person asked ends in one of these).
RECORDED_DECISIONS = (Decision.ALLOW.value, Decision.DENY.value)
MAX_LIMIT = 10_000

SINCE_FORMS = (
    f"a duration back from now ({DURATION_FORMS}) or an ISO date or time "
    "(2026-11-23, 2026-11-23T18:00, 2026-11-23T18:00:00+01:00; without a zone it is local time)"
)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The moment a `since` filter names, in UTC."""
    value = text.strip()
    duration = parse_duration(value)
    if duration is not None:
        try:
            return (now or datetime.now(UTC)) - duration
        except OverflowError:  # further back than the calendar goes: every record is later
            return datetime.min.replace(tzinfo=UTC)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ServiceError(f"since: {text!r} is not a time. Use {SINCE_FORMS}.") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the person's own clock
    return moment.astimezone(UTC)


def parse_decision(text: str) -> str:
    value = text.strip().lower()
    if value not in RECORDED_DECISIONS:
        raise ServiceError(
            f"decision: {text!r} is not a recorded decision. Use {' or '.join(RECORDED_DECISIONS)} "
            "(a call a person was asked about is recorded as what they decided)."
        )
    return value


class AuditService:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def query(
        self,
        tool: str | None = None,
        server: str | None = None,
        decision: str | None = None,
        since: str | None = None,
        limit: int = 50,
        *,
        principal: str | None = None,
    ) -> list[dict[str, Any]]:
        """The newest records first, at most `limit`, narrowed by the filters given. `tool` is the
        exposed name a client called, the downstream tool's name, or `server.tool`; `principal` is
        who the gateway let in, exactly as recorded (a key's name, "oauth:<subject>", "local")."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ServiceError(f"limit: {limit} is out of range; give a number from 1 to {MAX_LIMIT}.")
        recorded = parse_decision(decision) if decision else None
        start = parse_since(since) if since else None
        async with self.store.read() as conn:
            rows = await audit_rows.query(
                conn,
                tool=tool or None,
                server=server or None,
                decision=recorded,
                since=start,
                principal=principal or None,
                limit=limit,
            )
        return [_record_json(row) for row in rows]


def _record_json(row: Row[Any]) -> dict[str, Any]:
    return {
        "id": row.id,
        "at": audit_rows.started_at(row).isoformat(),
        "client": {"name": row.client_name, "version": row.client_version, "session": row.client_session},
        # Who the gateway let in, and the OAuth client it came through; None before it recorded them.
        "principal": row.principal,
        "principalClient": row.principal_client,
        "exposedName": row.exposed_name,
        "server": row.server,
        "tool": row.tool,
        "refId": row.ref_id,
        "argumentsSha256": row.arguments_sha256,
        "arguments": json.loads(row.arguments) if row.arguments is not None else None,
        "hints": json.loads(row.hints) if row.hints is not None else None,
        "decision": row.decision,
        "decidedBy": row.decided_by,
        "channel": row.channel,
        "waitMs": row.wait_ms,
        "outcome": row.outcome,
        "detail": row.detail,
        "latencyMs": row.latency_ms,
    }
