"""Calls waiting for a person: list them, approve or deny one. The CLI, the dashboard and the
gateway's approval gate all go through here.

Answering writes only the pending call's row: the answer, who gave it and the channel (the face)
they used. The gateway holding the call waits for that answer here, and runs or refuses the call.
A "session" or "always" yes becomes an approval rule, written by the gate, which knows the
session the call came from.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import anyio

from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.policy.model import Answer
from toolkeeper.store import Store, StoreError
from toolkeeper.store import approvals as rows
from toolkeeper.store.approvals import PENDING, PendingCall

logger = logging.getLogger(__name__)

# Who holds a pending call (or a "for this session" approval rule): this host and process. A row
# held by a process that is gone was never answered in time, and is recorded as not run. `boot` is
# drawn afresh by every process: it tells this process from an earlier one that had the same pid
# (a container's first process has the same pid every time it starts).
BOOT = secrets.token_hex(8)
HOLDER: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "boot": BOOT}
POLL_SECONDS = 0.25  # how often a waiting call looks for the person's answer in the store


def describe(call: PendingCall) -> dict[str, Any]:
    """A pending call as the faces show it (camelCase, times in ISO 8601)."""
    client = call.client
    return {
        "id": call.id,
        "status": call.status,
        "tool": call.exposed_name,
        "namespacedName": call.namespaced_name,
        "principal": call.principal,
        "client": {k: client.get(k) for k in ("name", "version", "session")},
        "createdAt": call.created_at.isoformat(),
        "expiresAt": call.expires_at.isoformat(),
        "arguments": call.arguments,
        "sentence": call.question.get("sentence"),
        "warnings": call.question.get("warnings", []),
        "reason": call.question.get("reason"),
        "text": call.question.get("text"),
        "choices": call.question.get("choices", [a.value for a in Answer]),
        "answer": call.answer,
        "decidedBy": call.decided_by,
        "decidedAt": call.decided_at.isoformat() if call.decided_at else None,
        "denyReason": call.reason,
    }


class ApprovalService:
    def __init__(self, store: Store) -> None:
        self.store = store

    # -- the person's side -------------------------------------------------------------------

    async def pending(self, *, include_decided: bool = False, limit: int = 100) -> list[dict[str, Any]]:
        async with self.store.read() as conn:
            return [
                describe(c) for c in await rows.listed(conn, include_decided=include_decided, limit=limit)
            ]

    async def approve(
        self, call_id: str, answer: Answer = Answer.ONCE, *, by: str, channel: str
    ) -> dict[str, Any]:
        """Let a waiting call run; `answer` says how far the yes reaches. `by` is who answered as
        people read it, `channel` the face they answered with (cli, dashboard)."""
        async with self.store.write(bump_revision=False) as conn:
            call = await self._waiting(conn, call_id)
            allowed = call.question.get("choices", [a.value for a in Answer])
            if answer.value not in allowed:
                why = (
                    "its client has no session that a yes could be kept for"
                    if Answer.ALWAYS.value in allowed
                    else "its confirm mode asks for every call"
                )
                answers = [a for a in allowed if a != "deny"]
                raise ServiceError(
                    f"Call {call_id} ({call.exposed_name}) can only be approved {' or '.join(answers)}: "
                    f"{why}.",
                    ErrorKind.INVALID,
                )
            await rows.settle(
                conn, call_id, rows.APPROVED, answer=answer.value, decided_by=by, channel=channel
            )
        return describe(replace(call, status=rows.APPROVED, answer=answer.value, decided_by=by))

    async def deny(self, call_id: str, *, by: str, channel: str, reason: str | None = None) -> dict[str, Any]:
        async with self.store.write(bump_revision=False) as conn:
            call = await self._waiting(conn, call_id)
            await rows.settle(conn, call_id, rows.DENIED, reason=reason, decided_by=by, channel=channel)
        return describe(replace(call, status=rows.DENIED, reason=reason, decided_by=by))

    async def _waiting(self, conn: Any, call_id: str) -> PendingCall:
        call = await rows.get(conn, call_id)
        if call is None:
            raise ServiceError(
                f"No call has the approval ID '{call_id}'. The pending calls are listed with their IDs.",
                ErrorKind.NOT_FOUND,
            )
        if call.status != PENDING:
            outcome = call.status.replace("_", " ") + (f" by {call.decided_by}" if call.decided_by else "")
            raise ServiceError(
                f"Call {call_id} ({call.exposed_name}) is already decided: {outcome}.",
                ErrorKind.CONFLICT,
            )
        if call.expires_at <= datetime.now(UTC):
            raise ServiceError(
                f"Call {call_id} ({call.exposed_name}) waited too long and was not run; "
                "its client has been told. Ask the client to call the tool again.",
                ErrorKind.CONFLICT,
            )
        return call

    # -- the gate's side ---------------------------------------------------------------------

    async def open(self, call: PendingCall) -> None:
        async with self.store.write(bump_revision=False) as conn:
            await rows.add(conn, call)

    async def state(self, call_id: str) -> PendingCall | None:
        async with self.store.read() as conn:
            return await rows.get(conn, call_id)

    async def wait_for_answer(self, call_id: str, timeout: float) -> PendingCall | None:
        """Wait up to `timeout` seconds for a person to answer a pending call: its row once they
        approved or denied it, or once a restore ended the wait (status `store_restored`); None
        when nobody answered in time. A call nobody answered is settled as expired, or as not run
        when its caller is cancelled while it waits."""
        settled: PendingCall | None = None
        waiting = anyio.move_on_after(timeout)
        try:
            with waiting:
                settled = await self._until_decided(call_id)
        finally:
            if settled is None or settled.status == PENDING:
                with anyio.CancelScope(shield=True):
                    # The wait's own scope says whether time ran out; otherwise the caller went
                    # away (its client cancelled, the gateway is stopping).
                    settled = await self._stop_waiting(call_id, timed_out=waiting.cancelled_caught)
        ended = (rows.APPROVED, rows.DENIED, rows.STORE_RESTORED)
        return settled if settled is not None and settled.status in ended else None

    async def _until_decided(self, call_id: str) -> PendingCall | None:
        """Poll the row until it is no longer pending (None when it is gone)."""
        while True:
            await anyio.sleep(POLL_SECONDS)
            try:
                call = await self.state(call_id)
            except StoreError as exc:
                logger.warning("cannot read approval %s: %s", call_id, exc)
                continue
            if call is None or call.status != PENDING:
                return call

    async def _stop_waiting(self, call_id: str, *, timed_out: bool) -> PendingCall | None:
        """Settle a row nobody answered; the row as it is when a person answered meanwhile."""
        status, why = (
            (rows.EXPIRED, "no answer in time")
            if timed_out
            else (rows.NOT_RUN, "the call went away before an answer came")
        )
        try:
            if await self.give_up(call_id, status, why):
                return None
            return await self.state(call_id)
        except StoreError as exc:
            logger.warning("cannot settle approval %s: %s", call_id, exc)
            return None

    async def give_up(self, call_id: str, status: str, reason: str) -> bool:
        """The call will not run (timeout, cancelled): settle its row if nobody answered yet."""
        async with self.store.write(bump_revision=False) as conn:
            return await rows.settle(
                conn, call_id, status, reason=reason, decided_by="toolkeeper", unless_expired=False
            )

    async def settle_orphans(self) -> int:
        """Pending calls of this host whose gateway process is gone, and expired ones of any
        host: recorded as not run, so nothing waits for an answer that can no longer matter."""
        settled = 0
        now = datetime.now(UTC)
        async with self.store.write(bump_revision=False) as conn:
            for call in await rows.orphaned(conn):
                gone = held_by_a_gone_process(call.client.get("holder") or {})
                if gone or call.expires_at <= now:
                    reason = (
                        "its gateway stopped before an answer came" if gone else "nobody answered in time"
                    )
                    settled += await rows.settle(
                        conn,
                        call.id,
                        rows.NOT_RUN,
                        reason=reason,
                        decided_by="toolkeeper",
                        unless_expired=False,
                    )
        return settled


def held_by_a_gone_process(holder: Mapping[str, Any]) -> bool:
    """Whether the process a row names as its holder is known to be gone: a process of this host
    that no longer runs, or an earlier process that had this process's pid."""
    if holder.get("host") != HOLDER["host"]:
        return False  # another host's processes cannot be looked at from here
    pid = holder.get("pid")
    if pid == HOLDER["pid"]:
        boot = holder.get("boot")
        return boot is not None and boot != BOOT
    return not _alive(pid)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
