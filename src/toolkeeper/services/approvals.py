"""Calls waiting for a person: list them, approve or deny one. The CLI, the dashboard and the
gateway's approval gate all go through here.

Answering writes only the pending call's row: the answer, who gave it and the channel (the face)
they used. The gateway holding the call waits for that answer here, and runs or refuses the call.
A "session" or "always" yes becomes an approval rule, written by the gate, which knows the
session the call came from.

A call whose caller stopped waiting (nobody answered in time, its client went away, its gateway
stopped or is gone) is not waiting any more, and nothing runs when a person says yes to it. A
yes for once is still kept: the same call (server, tool, arguments, definition) retried by the
same principal with the same client name within the retry window runs on it without asking
again, once, in whichever gateway process the retry reaches.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from toolkeeper.config.model import DEFAULT_RETRY_WINDOW
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.jsonwire import has_utf8_form
from toolkeeper.policy.model import Answer
from toolkeeper.store import Store, StoreError, spent_states
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
GATEWAY_STOPPED = "the gateway stopped"  # why a call waiting when its gateway stopped was not run
GATEWAY_GONE = "its gateway stopped before an answer came"  # … when its gateway is found gone later


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
        # Questions asked before these were kept have none of them.
        "reliedOn": call.question.get("reliedOn", []),
        "serverTitle": call.question.get("serverTitle"),
        "claims": call.question.get("claims", []),
        "argumentsInFull": call.question.get("argumentsInFull", []),
        "reason": call.question.get("reason"),
        "text": call.question.get("text"),
        "choices": call.question.get("choices", [a.value for a in Answer]),
        "answer": call.answer,
        "decidedBy": call.decided_by,
        "decidedAt": call.decided_at.isoformat() if call.decided_at else None,
        "denyReason": call.reason,
        "ranBy": call.ran_by,
    }


def parse_answer(text: Any) -> Answer:
    """How far a yes reaches, as a face was given it: once, session or always."""
    try:
        return Answer(text)
    except ValueError:
        choices = ", ".join(a.value for a in Answer)
        raise ServiceError(
            f"An approval's scope is one of {choices}; got {text!r}.", ErrorKind.INVALID
        ) from None


class ApprovalService:
    def __init__(
        self, store: Store, *, retry_window: float = DEFAULT_RETRY_WINDOW, keep_arguments: bool = False
    ) -> None:
        self.store = store
        # Whether a decided call's question keeps its argument values (`auditArguments`).
        self.keep_arguments = keep_arguments
        # How long a late yes can be given after its caller stopped waiting, and then how long
        # it holds for a retry of the call.
        self.retry_window = retry_window
        # Once the gateway is stopping: why. The calls waiting here (each under one of `_waits`)
        # are ended, and no call waits from then on.
        self.stopping: str | None = None
        self._waits: set[anyio.CancelScope] = set()
        # Set when a decision may have been written elsewhere; made by the first waiting call.
        self._news: anyio.Event | None = None

    # -- the person's side -------------------------------------------------------------------

    async def pending(
        self, *, include_decided: bool = False, limit: int | None = 100
    ) -> list[dict[str, Any]]:
        """The calls waiting for an answer, newest first (`limit` of them; None: all); decided
        ones too with `include_decided`. A call whose gateway is gone is not waiting: it is
        settled as not run first."""
        calls: list[dict[str, Any]] = (await self.page(include_decided=include_decided, limit=limit))["calls"]
        return calls

    async def page(self, *, include_decided: bool = False, limit: int | None = 100) -> dict[str, Any]:
        """`pending`'s calls with how many there are in all (`total`), so that a face can say how
        many it does not show."""
        await self.settle_orphans()
        async with self.store.read() as conn:
            calls = await rows.listed(conn, include_decided=include_decided, limit=limit)
            total = len(calls)
            if limit is not None and total >= limit:
                total = await rows.counted(conn, include_decided=include_decided)
        return {"calls": [describe(c) for c in calls], "total": total}

    async def waiting_ids(self) -> list[str]:
        """The ids of the calls waiting now, newest first, read from the store (whichever gateway
        process asked): what a face watches to know the waiting set changed. Settles nothing,
        so that watching stays a cheap read."""
        async with self.store.read() as conn:
            return await rows.waiting_ids(conn)

    async def approve(
        self, call_id: str, answer: Answer = Answer.ONCE, *, by: str, channel: str
    ) -> dict[str, Any]:
        """Let a waiting call run; `answer` says how far the yes reaches. `by` is who answered as
        people read it, `channel` the face they answered with (cli, dashboard).

        A call whose caller stopped waiting runs nothing now: a yes for once is kept for the same
        call retried by the same client within the retry window (`late` in the answer, with
        `retryUntil`)."""
        _check_id(call_id)
        await self.settle_orphans()
        async with self.store.write(bump_revision=False) as conn:
            call = await self._known(conn, call_id)
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
            if call.status == PENDING and await rows.settle(
                conn,
                call_id,
                rows.APPROVED,
                answer=answer.value,
                decided_by=by,
                channel=channel,
                keep_arguments=self.keep_arguments,
            ):
                approved = replace(call, status=rows.APPROVED, answer=answer.value, decided_by=by)
                return {**describe(approved), "late": False}
            # It stopped waiting, just now or before.
            call = await self._known(conn, call_id)
            return await self._approve_late(conn, call, answer, by=by, channel=channel)

    async def _approve_late(
        self, conn: Any, call: PendingCall, answer: Answer, *, by: str, channel: str
    ) -> dict[str, Any]:
        now = datetime.now(UTC)
        if call.status == PENDING and call.expires_at <= now:
            # Its time ran out a moment ago; the gateway holding it is about to say so.
            call = replace(call, reason="no answer in time")
        elif call.status not in rows.STOPPED_WAITING:
            raise _decided(call)
        stopped = call.decided_at or call.expires_at
        if now > stopped + timedelta(seconds=self.retry_window):
            raise ServiceError(
                f"Call {call.id} ({call.exposed_name}) stopped waiting ({call.reason or 'not run'}) "
                f"{_duration((now - stopped).total_seconds())} ago, longer than the retry window "
                f"({_duration(self.retry_window)}): nothing runs, and a new call of it is asked again.",
                ErrorKind.CONFLICT,
            )
        if answer is not Answer.ONCE:
            raise ServiceError(
                f"Call {call.id} ({call.exposed_name}) is no longer waiting ({call.reason or 'not run'}): "
                "only a yes for once can still be given, and it holds for the same call retried by "
                "its client. Approve it once, or add an approval rule for the tool.",
                ErrorKind.INVALID,
            )
        if not await rows.approve_late(conn, call.id, answer=answer.value, decided_by=by, channel=channel):
            raise _decided(await self._known(conn, call.id))
        late = replace(call, status=rows.APPROVED_LATE, answer=answer.value, decided_by=by, decided_at=now)
        return {
            **describe(late),
            "late": True,
            "stoppedWaiting": call.reason,
            "retryUntil": (now + timedelta(seconds=self.retry_window)).isoformat(),
        }

    async def deny(self, call_id: str, *, by: str, channel: str, reason: str | None = None) -> dict[str, Any]:
        _check_id(call_id)
        if reason is not None and not has_utf8_form(reason):
            raise ServiceError(
                "The reason holds text with no UTF-8 form (bytes that are not UTF-8); give it as UTF-8 text.",
                ErrorKind.INVALID,
            )
        await self.settle_orphans()
        async with self.store.write(bump_revision=False) as conn:
            call = await self._known(conn, call_id)
            if call.status == PENDING and await rows.settle(
                conn,
                call_id,
                rows.DENIED,
                reason=reason,
                decided_by=by,
                channel=channel,
                keep_arguments=self.keep_arguments,
            ):
                return describe(replace(call, status=rows.DENIED, reason=reason, decided_by=by))
            call = await self._known(conn, call_id)
            if call.status in rows.STOPPED_WAITING:
                raise ServiceError(
                    f"Call {call_id} ({call.exposed_name}) is no longer waiting "
                    f"({call.reason or 'not run'}): nothing runs, and a new call of it is asked again.",
                    ErrorKind.CONFLICT,
                )
            raise _decided(call)

    async def _known(self, conn: Any, call_id: str) -> PendingCall:
        call = await rows.get(conn, call_id)
        if call is None:
            raise ServiceError(
                f"No call has the approval ID '{call_id}'. The pending calls are listed with their IDs.",
                ErrorKind.NOT_FOUND,
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
        when nobody answered in time, or when the gateway began to stop (`stopping` says why). A
        call nobody answered is settled as expired, as not run when the gateway stops, or when
        its caller is cancelled while it waits."""
        settled: PendingCall | None = None
        with anyio.CancelScope() as stop:
            self._waits.add(stop)
            if self.stopping is not None:
                stop.cancel()
            waiting = anyio.move_on_after(timeout)
            try:
                with waiting:
                    settled = await self._until_decided(call_id)
            finally:
                self._waits.discard(stop)
                if settled is None or settled.status == PENDING:
                    with anyio.CancelScope(shield=True):
                        # The wait's own scope says whether time ran out, the stop scope whether
                        # the gateway is stopping; otherwise the caller went away (its client
                        # cancelled).
                        if waiting.cancelled_caught:
                            status, why = rows.EXPIRED, "no answer in time"
                        elif stop.cancel_called:
                            status, why = rows.NOT_RUN, GATEWAY_STOPPED
                        else:
                            status, why = rows.NOT_RUN, "the call went away before an answer came"
                        settled = await self._stop_waiting(call_id, status, why)
        ended = (rows.APPROVED, rows.DENIED, rows.STORE_RESTORED)
        return settled if settled is not None and settled.status in ended else None

    def stop_waits(self, reason: str) -> int:
        """The gateway is stopping (`reason`): end every wait for an answer now (each call is
        settled as not run) and every wait that would begin. How many were waiting."""
        self.stopping = reason
        for scope in list(self._waits):
            scope.cancel()
        return len(self._waits)

    @property
    def waits(self) -> int:
        """Calls of this process waiting for an answer."""
        return len(self._waits)

    async def take_late_yes(
        self, call_hash: str, *, principal: str | None, client_name: str | None, within: float, replica: str
    ) -> PendingCall | None:
        """A late yes, given within the last `within` seconds for this exact call made by the
        same principal with the same client name, taken for one retry that `replica` runs (None
        when there is none, or another retry took it first)."""
        since = datetime.now(UTC) - timedelta(seconds=within)
        async with self.store.read() as conn:  # most calls asked about have none: write nothing then
            kept = await rows.late_yeses(conn, call_hash, principal=principal, since=since)
        for late in kept:
            if late.client.get("name") != client_name:
                continue
            async with self.store.write(bump_revision=False) as conn:
                if await rows.use_late_yes(conn, late.id, replica):
                    return replace(late, status=rows.RUN_ON_RETRY, ran_by=replica)
        return None

    async def claim_run(self, call_id: str, replica: str) -> bool:
        """`replica` runs the approved call; False when another replica runs it (or it is not
        approved): whoever waits for an answer on any replica, the call runs once."""
        async with self.store.write(bump_revision=False) as conn:
            return await rows.claim_run(conn, call_id, replica)

    async def spend_request_state(self, nonce: str, expires: float) -> bool:
        """Mark an answered request state spent on every replica; False when it already was."""
        async with self.store.write(bump_revision=False) as conn:
            return await spent_states.spend(conn, nonce, datetime.fromtimestamp(expires, UTC))

    def decisions_changed(self) -> None:
        """A decision may have been written (a PostgreSQL store's notice said so): every waiting
        call reads its row now instead of at its next poll."""
        news, self._news = self._news, None
        if news is not None:
            news.set()

    async def _until_decided(self, call_id: str) -> PendingCall | None:
        """Read the row until it is no longer pending (None when it is gone): at each of
        `decisions_changed`, and every `POLL_SECONDS` whatever is heard."""
        while True:
            # Taken before the read: news that comes during it is not missed.
            if self._news is None:
                self._news = anyio.Event()
            news = self._news
            try:
                call = await self.state(call_id)
            except StoreError as exc:
                logger.warning("cannot read approval %s: %s", call_id, exc)
            else:
                if call is None or call.status != PENDING:
                    return call
            with anyio.move_on_after(POLL_SECONDS):
                await news.wait()

    async def _stop_waiting(self, call_id: str, status: str, why: str) -> PendingCall | None:
        """Settle a row nobody answered; the row as it is when a person answered meanwhile."""
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
                conn,
                call_id,
                status,
                reason=reason,
                decided_by="toolkeeper",
                unless_expired=False,
                keep_arguments=self.keep_arguments,
            )

    async def settle_orphans(self) -> int:
        """Pending calls of this host whose gateway process is gone, and expired ones of any
        host: recorded as not run, so nothing waits for an answer that can no longer matter (a
        late yes may still be given to them). Read first: most of the time nothing is written."""
        now = datetime.now(UTC)
        async with self.store.read() as conn:
            candidates = await rows.orphaned(conn)
        gone = {call.id for call in candidates if _holder_gone(call)}
        orphans = [call for call in candidates if call.id in gone or call.expires_at <= now]
        if not orphans:
            return 0
        settled = 0
        async with self.store.write(bump_revision=False) as conn:
            for call in orphans:
                reason = GATEWAY_GONE if call.id in gone else "nobody answered in time"
                settled += await rows.settle(
                    conn,
                    call.id,
                    rows.NOT_RUN,
                    reason=reason,
                    decided_by="toolkeeper",
                    unless_expired=False,
                    keep_arguments=self.keep_arguments,
                )
        return settled

    async def forget_decided_arguments(self) -> int:
        """Unless arguments are kept, remove the argument values left in the questions of calls
        decided before they were removed at the decision (a gateway does this at start); how
        many calls changed."""
        if self.keep_arguments:
            return 0
        # Read first: after the first start almost nothing is left to change, and a scan under
        # the write lock would hold up every other writer of the store for nothing.
        async with self.store.read() as conn:
            call_ids = await rows.decided_with_arguments(conn)
        if not call_ids:
            return 0
        async with self.store.write(bump_revision=False) as conn:
            return await rows.forget_arguments(conn, call_ids)


def _holder_gone(call: PendingCall) -> bool:
    """Whether the gateway holding a call is known to be gone: only a process of this host can be
    checked; one held on another host waits until it expires."""
    return held_by_a_gone_process(call.client.get("holder") or {})


def _decided(call: PendingCall) -> ServiceError:
    outcome = call.status.replace("_", " ") + (f" by {call.decided_by}" if call.decided_by else "")
    return ServiceError(
        f"Call {call.id} ({call.exposed_name}) is already decided: {outcome}.", ErrorKind.CONFLICT
    )


def _check_id(call_id: str) -> None:
    """An approval ID is text a person copies from a listing; bytes that are not UTF-8 (a
    command line's surrogate escapes) name no call, and cannot even be looked up."""
    if not has_utf8_form(call_id):
        try:  # the bytes as given, where the command line escaped them
            shown = call_id.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
        except UnicodeEncodeError:
            shown = call_id.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise ServiceError(
            f"No call has the approval ID '{shown}': it holds bytes that are not UTF-8. "
            "The pending calls are listed with their IDs.",
            ErrorKind.NOT_FOUND,
        )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


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
