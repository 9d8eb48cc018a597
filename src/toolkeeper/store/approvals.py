"""Calls waiting for a person's answer. Callers own the transaction.

A row is written by the gateway that holds the call and answered by whoever the person uses
(the CLI, the dashboard). The answer is a conditional update of a row that is still pending and
not expired, so two people answering at once, or an answer racing the timeout, cannot both win.

A yes that comes after the caller stopped waiting (the row expired or was not run) is kept as
`approved_late`: the same call retried by the same client takes it, once, by a conditional
update too, so two retries (in two gateway processes) cannot both run on it.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.tables import pending_approvals
from toolkeeper.store.toolsets import aware, now

PENDING = "pending"
APPROVED = "approved"
DENIED = "denied"
EXPIRED = "expired"  # nobody answered in time
NOT_RUN = "not_run"  # the call went away first: its client cancelled, or its gateway stopped
STORE_RESTORED = "store_restored"  # a backup was restored while the call waited: it was not run
# A yes given after the caller stopped waiting: it holds for the same call retried by the same
# client within the retry window, once.
APPROVED_LATE = "approved_late"
RUN_ON_RETRY = "run_on_retry"  # a late yes that a retry of the call used
# How a row looks once its caller stopped waiting without an answer: a late yes may still come.
STOPPED_WAITING = (EXPIRED, NOT_RUN)
ARGUMENTS_NOT_KEPT = "its arguments are not kept once it is decided (auditArguments is off)"


@dataclass(frozen=True)
class PendingCall:
    id: str
    created_at: datetime
    expires_at: datetime
    status: str
    client: dict[str, Any]  # name, version, session, and the holding gateway
    exposed_name: str
    namespaced_name: str
    ref_id: str
    call_hash: str
    arguments: Any  # None once decided
    question: dict[str, Any]  # sentence, warnings, reason, text, choices
    answer: str | None
    reason: str | None
    decided_by: str | None  # as people read it: "person via cli", "toolkeeper"
    decided_at: datetime | None
    channel: str | None = None  # the face a person answered with (cli, dashboard); None if nobody did
    principal: str | None = None  # who the gateway let in to make the call; None before it was recorded
    ran_by: str | None = None  # the replica that ran it once approved; None while nobody did


def _row(row: Any) -> PendingCall:
    return PendingCall(
        id=row.id,
        created_at=aware(row.created_at),
        expires_at=aware(row.expires_at),
        status=row.status,
        client=json.loads(row.client),
        exposed_name=row.exposed_name,
        namespaced_name=row.namespaced_name,
        ref_id=row.ref_id,
        call_hash=row.call_hash,
        arguments=json.loads(row.arguments) if row.arguments is not None else None,
        question=json.loads(row.question),
        answer=row.answer,
        reason=row.reason,
        decided_by=row.decided_by,
        decided_at=aware(row.decided_at),
        channel=row.channel,
        principal=row.principal,
        ran_by=row.ran_by,
    )


async def add(conn: AsyncConnection, call: PendingCall) -> None:
    await conn.execute(
        insert(pending_approvals).values(
            id=call.id,
            created_at=call.created_at,
            expires_at=call.expires_at,
            status=PENDING,
            client=json.dumps(call.client, ensure_ascii=False),
            exposed_name=call.exposed_name,
            namespaced_name=call.namespaced_name,
            ref_id=call.ref_id,
            call_hash=call.call_hash,
            arguments=json.dumps(call.arguments, ensure_ascii=False),
            question=json.dumps(call.question, ensure_ascii=False),
            principal=call.principal,
        )
    )


async def get(conn: AsyncConnection, call_id: str) -> PendingCall | None:
    row = (await conn.execute(select(pending_approvals).where(pending_approvals.c.id == call_id))).first()
    return _row(row) if row is not None else None


def _waiting_now() -> list[Any]:
    return [pending_approvals.c.status == PENDING, pending_approvals.c.expires_at > now()]


async def listed(
    conn: AsyncConnection, *, include_decided: bool = False, limit: int | None = 100
) -> list[PendingCall]:
    """The newest calls first (`limit` of them; None: all); only those still waiting unless
    `include_decided`."""
    query = select(pending_approvals).order_by(pending_approvals.c.created_at.desc()).limit(limit)
    if not include_decided:
        query = query.where(*_waiting_now())
    return [_row(row) for row in (await conn.execute(query)).all()]


async def waiting_ids(conn: AsyncConnection) -> list[str]:
    """The ids of the calls waiting now, newest first: a cheap look at whether the set changed."""
    newest_first = pending_approvals.c.created_at.desc()
    query = select(pending_approvals.c.id).where(*_waiting_now()).order_by(newest_first)
    return [row.id for row in (await conn.execute(query)).all()]


async def counted(conn: AsyncConnection, *, include_decided: bool = False) -> int:
    """How many calls `listed` would give without a limit."""
    query = select(func.count()).select_from(pending_approvals)
    if not include_decided:
        query = query.where(*_waiting_now())
    return int((await conn.execute(query)).scalar_one())


async def settle(
    conn: AsyncConnection,
    call_id: str,
    status: str,
    *,
    answer: str | None = None,
    reason: str | None = None,
    decided_by: str | None = None,
    channel: str | None = None,
    unless_expired: bool = True,
    keep_arguments: bool = False,
) -> bool:
    """Decide a pending call; False when it was no longer pending (or had expired). The
    arguments are cleared: they were kept only to show the person; so are their values in the
    question, unless `keep_arguments` (the audit log keeps arguments too)."""
    condition = [pending_approvals.c.id == call_id, pending_approvals.c.status == PENDING]
    if unless_expired:
        condition.append(pending_approvals.c.expires_at > now())
    result = await conn.execute(
        update(pending_approvals)
        .where(*condition)
        .values(
            status=status,
            answer=answer,
            reason=reason,
            decided_by=decided_by,
            channel=channel,
            decided_at=now(),
            arguments=None,
        )
    )
    if not result.rowcount:
        return False
    if not keep_arguments:
        await forget_arguments(conn, (call_id,))
    return True


def without_arguments(question: dict[str, Any]) -> dict[str, Any]:
    """A decided call's question with no argument value left: the sentence names the tool and
    the server only, and the long values are gone."""
    head = f"Call {question.get('toolName') or question.get('tool')} on {question.get('server')}"
    return {**question, "sentence": f"{head}; {ARGUMENTS_NOT_KEPT}.", "argumentsInFull": []}


async def decided_with_arguments(conn: AsyncConnection) -> list[str]:
    """The calls no longer pending whose question still holds argument values (decided before
    their values were removed at the decision)."""
    found = await conn.execute(
        select(pending_approvals.c.id, pending_approvals.c.question).where(
            pending_approvals.c.status != PENDING
        )
    )
    return [
        call_id
        for call_id, question in found.all()
        if (kept := json.loads(question)) != without_arguments(kept)
    ]


async def forget_arguments(conn: AsyncConnection, call_ids: Collection[str]) -> int:
    """Remove the argument values from the questions of `call_ids`; how many rows changed."""
    found = await conn.execute(
        select(pending_approvals.c.id, pending_approvals.c.question).where(
            pending_approvals.c.id.in_(call_ids)
        )
    )
    changed = 0
    for call_id, question in found.all():
        kept = json.loads(question)
        forgotten = without_arguments(kept)
        if forgotten != kept:
            await conn.execute(
                update(pending_approvals)
                .where(pending_approvals.c.id == call_id)
                .values(question=json.dumps(forgotten, ensure_ascii=False))
            )
            changed += 1
    return changed


async def approve_late(
    conn: AsyncConnection, call_id: str, *, answer: str, decided_by: str, channel: str
) -> bool:
    """Keep a yes for a call whose caller stopped waiting (or whose time ran out a moment ago,
    before its gateway said so); False when the row is not (or no longer) one. Why it stopped
    (`reason`) stays for the record."""
    stopped = or_(
        pending_approvals.c.status.in_(STOPPED_WAITING),
        and_(pending_approvals.c.status == PENDING, pending_approvals.c.expires_at <= now()),
    )
    result = await conn.execute(
        update(pending_approvals)
        .where(pending_approvals.c.id == call_id, stopped)
        .values(status=APPROVED_LATE, answer=answer, decided_by=decided_by, channel=channel, decided_at=now())
    )
    return bool(result.rowcount)


async def late_yeses(
    conn: AsyncConnection, call_hash: str, *, principal: str | None, since: datetime
) -> list[PendingCall]:
    """Late yeses not used yet for this exact call, given since `since` for calls `principal`
    made, oldest first."""
    column = pending_approvals.c.principal
    query = (
        select(pending_approvals)
        .where(
            pending_approvals.c.status == APPROVED_LATE,
            pending_approvals.c.call_hash == call_hash,
            pending_approvals.c.decided_at >= since,
            column.is_(None) if principal is None else column == principal,
        )
        .order_by(pending_approvals.c.decided_at)
    )
    return [_row(row) for row in (await conn.execute(query)).all()]


async def use_late_yes(conn: AsyncConnection, call_id: str, replica: str) -> bool:
    """Take a late yes for a retry `replica` runs; False when another retry took it first."""
    result = await conn.execute(
        update(pending_approvals)
        .where(pending_approvals.c.id == call_id, pending_approvals.c.status == APPROVED_LATE)
        .values(status=RUN_ON_RETRY, ran_by=replica)
    )
    return bool(result.rowcount)


async def claim_run(conn: AsyncConnection, call_id: str, replica: str) -> bool:
    """`replica` runs the approved call (on time, or on a retry's late yes); False when another
    replica claimed it first, or it is not approved: exactly one replica runs it."""
    result = await conn.execute(
        update(pending_approvals)
        .where(
            pending_approvals.c.id == call_id,
            pending_approvals.c.status.in_((APPROVED, RUN_ON_RETRY)),
            pending_approvals.c.ran_by.is_(None),
        )
        .values(ran_by=replica)
    )
    return bool(result.rowcount)


async def orphaned(conn: AsyncConnection) -> list[PendingCall]:
    """Pending rows, expired or not: the caller decides which of them nobody holds any more."""
    query = select(pending_approvals).where(pending_approvals.c.status == PENDING)
    return [_row(row) for row in (await conn.execute(query)).all()]
