"""The audit log's writer: makes each call's record into a row once the call's answer has left
(the digest, the JSON, the text the columns take), so neither the call nor a later write waits
for that. A task of the running gateway writes the rows waiting every half second (or sooner
once a batch is full), one transaction per batch, without bumping the store revision: an audit
record is no reason for a gateway to reload its state. When the store refuses (read-only,
locked, full, unreachable) it says so once, keeps the records (up to a bound, then the oldest
go, counted) and writes them when the store takes them again. It also deletes records older
than `auditRetentionDays`, at start and then daily.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from toolkeeper.policy.binding import arguments_digest, canonical_json
from toolkeeper.store import Store, StoreError
from toolkeeper.store import audit as audit_rows

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.5
BATCH_SIZE = 200  # records per transaction; a full batch is written without waiting
MAX_WAITING = 10_000  # records kept while the store refuses them; beyond this the oldest go
RETRY_SECONDS = 5.0  # while the store refuses, how often to try again
# How long a stopping gateway gives the last records: a store that hangs must not hold the exit.
SHUTDOWN_FLUSH_SECONDS = 3.0
RETENTION_EVERY_SECONDS = 24 * 3600.0
RETENTION_RETRY_SECONDS = 3600.0

# Keyed by the columns of the `audit_log` table. On the call path `at` is a POSIX timestamp,
# `hints` a tuple and `id` is left out: the writer makes the datetime, the JSON and the id (the
# ids of the records made together come from one read of the system's random source; a uuid4
# each cost more than the rest of the record).
Record = dict[str, Any]


HintsHeld = tuple[tuple[str, bool, str | None], ...]


class AuditWriter:
    """Holds records until the store has them; run it in the gateway's task group."""

    def __init__(
        self,
        store: Store,
        retention_days: int,
        *,
        batch_size: int = BATCH_SIZE,
        max_waiting: int = MAX_WAITING,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        self.store = store
        self.retention_days = retention_days
        self.batch_size = batch_size
        self.max_waiting = max_waiting
        self.flush_seconds = flush_seconds
        self._plan: audit_rows.RowPlan | None = None  # known once the store is open
        self._unmade: list[Record] = []  # made into rows once their calls have been answered
        self._waiting: deque[audit_rows.StoreRow] = deque()  # rows for the next write, oldest first
        self._batch_ready = anyio.Event()
        self._refused_since: float | None = None  # when the store began refusing records
        self.dropped = 0  # records dropped since the store began refusing them

    @property
    def waiting(self) -> int:
        return len(self._unmade) + len(self._waiting)

    def add(self, record: Record) -> None:
        """Keep a record for the next write. Called on the call path, before the call is answered:
        no I/O, nothing awaited; the row is made once the answer has left."""
        if self.waiting >= self.max_waiting:
            if self._waiting:
                self._waiting.popleft()
            else:
                self._unmade.pop(0)
            self._drop(1)
        self._unmade.append(record)
        if len(self._unmade) == 1:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop runs here: the next flush makes the rows
            # Two turns on: the call's answer is written at the end of the next turn, and the
            # rows wait until it has left.
            loop.call_soon(loop.call_soon, self._make_rows)

    def _make_rows(self) -> None:
        records, self._unmade = self._unmade, []
        if not records:
            return
        if self._plan is None:
            self._plan = audit_rows.row_plan(self.store.engine.dialect)
        plan = self._plan
        fresh_ids = os.urandom(16 * len(records)).hex()  # one system call for all of them
        for index, record in enumerate(records):
            try:
                self._waiting.append(plan.row(_values(record, fresh_ids[32 * index : 32 * index + 32])))
            except Exception:  # one record that cannot become a row loses only itself
                logger.exception("audit log: cannot record a call of %r", record.get("exposed_name"))
        if len(self._waiting) >= self.batch_size and self._refused_since is None:
            self._batch_ready.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Write batches until cancelled, then write what is left (for a bounded time)."""
        task_status.started()
        next_retention = 0.0
        try:
            while True:
                if time.monotonic() >= next_retention:
                    pruned = await self.apply_retention()
                    next_retention = time.monotonic() + (
                        RETENTION_EVERY_SECONDS if pruned is not None else RETENTION_RETRY_SECONDS
                    )
                # While the store refuses, a full batch is no reason to try again sooner.
                refused = self._refused_since is not None
                with anyio.move_on_after(RETRY_SECONDS if refused else self.flush_seconds):
                    await self._batch_ready.wait()
                self._batch_ready = anyio.Event()
                await self.flush()
        finally:
            # Shielded: this runs because the gateway is stopping, and these records are the last.
            # Not while the store refuses: a locked SQLite file holds each attempt for its whole
            # busy timeout, which no cancellation cuts short, and the exit would wait for it.
            if self._refused_since is None:
                with anyio.move_on_after(SHUTDOWN_FLUSH_SECONDS, shield=True):
                    await self.flush()
            if self.waiting or self.dropped:
                lost = f"{self.waiting} records could not be written before the gateway stopped"
                if self.dropped:
                    lost += f", and {self.dropped} older ones were dropped while the store refused them"
                logger.error("audit log: %s; they are lost", lost)

    async def flush(self) -> bool:
        """Write the records waiting now, one transaction per batch. False when the store
        refused: the records stay and the next flush tries again. Records that arrive during
        the writes wait for the next flush: under steady calls a flush that chased them would
        commit a few records at a time, back to back, and a commit costs far more than a record."""
        self._make_rows()
        left = len(self._waiting)
        while left > 0 and self._waiting:
            count = min(self.batch_size, left, len(self._waiting))
            left -= count
            batch = [self._waiting.popleft() for _ in range(count)]
            try:
                await self._write(batch)
            except Exception as exc:  # whatever it is, the gateway runs on
                if not audit_rows.rejected_record(exc):
                    self._put_back(batch)
                    self._refused(exc)
                    return False
                # Not the store but something in the batch: keep every record it accepts.
                if not await self._write_one_by_one(batch):
                    return False
            except BaseException:
                self._put_back(batch)  # cancelled mid-write: the shutdown flush takes them
                raise
            self._accepted()
        return True

    async def apply_retention(self) -> int | None:
        """Delete records older than the retention period; how many went, or None if the store
        refused (it is tried again later)."""
        cutoff = datetime.now(UTC) - timedelta(days=self.retention_days)
        try:
            async with self.store.write(bump_revision=False) as conn:
                removed = await audit_rows.delete_older_than(conn, cutoff)
        except StoreError as exc:
            logger.warning(
                "audit log: cannot delete records older than %d days: %s", self.retention_days, exc
            )
            return None
        except Exception:  # the gateway runs on without it; tried again later
            logger.exception("audit log: deleting records older than %d days failed", self.retention_days)
            return None
        if removed:
            logger.info("audit log: deleted %d records older than %d days", removed, self.retention_days)
        return removed

    async def _write(self, batch: list[audit_rows.StoreRow]) -> None:
        assert self._plan is not None  # rows were made with it
        async with self.store.write(bump_revision=False) as conn:
            await audit_rows.insert_rows(conn, self._plan, batch)

    async def _write_one_by_one(self, batch: list[audit_rows.StoreRow]) -> bool:
        """Write a batch the database rejected for something in it record by record, dropping
        only the records it rejects. False when the store itself refused (the rest wait again)."""
        for index, record in enumerate(batch):
            try:
                await self._write([record])
            except Exception as exc:  # this record only
                if not audit_rows.rejected_record(exc):
                    self._put_back(batch[index:])
                    self._refused(exc)
                    return False
                assert self._plan is not None
                logger.error(
                    "audit log: the record of a call of %r was rejected and dropped: %s",
                    self._plan.value(record, "exposed_name"),
                    exc,
                )
            except BaseException:
                self._put_back(batch[index:])
                raise
        return True

    def _put_back(self, batch: list[audit_rows.StoreRow]) -> None:
        self._waiting.extendleft(reversed(batch))
        overflow = len(self._waiting) - self.max_waiting
        for _ in range(max(overflow, 0)):
            self._waiting.popleft()
        if overflow > 0:
            self._drop(overflow)

    def _drop(self, count: int) -> None:
        if self.dropped == 0:
            logger.warning(
                "audit log: %d records are waiting for the store; dropping the oldest from now on "
                "(the count is logged when the store takes records again)",
                self.max_waiting,
            )
        self.dropped += count

    def _refused(self, exc: Exception) -> None:
        # Once per outage: a retry every few seconds must not repeat the same error.
        if self._refused_since is None:
            self._refused_since = time.monotonic()
            logger.error(
                "audit log: the store refuses records, so they are kept in memory (up to %d) and "
                "written when it takes them again: %s",
                self.max_waiting,
                exc,
            )

    def _accepted(self) -> None:
        if self._refused_since is None:
            return
        seconds = time.monotonic() - self._refused_since
        self._refused_since = None
        if self.dropped:
            logger.error(
                "audit log: the store takes records again after %.0f s; %d records were dropped meanwhile",
                seconds,
                self.dropped,
            )
            self.dropped = 0
        else:
            logger.warning("audit log: the store takes records again after %.0f s; none were lost", seconds)


def _values(record: Record, fresh_id: str) -> Record:
    """A record's values as the table's columns take them (off the call path: the digest and the
    JSON are made here; the store cuts and escapes the text)."""
    values = dict(record)
    values.setdefault("id", fresh_id)
    values["arguments_sha256"] = arguments_digest(record["arguments_sha256"])
    if record["arguments"] is not None:
        values["arguments"] = _arguments_text(record["arguments"])
    values["at"] = datetime.fromtimestamp(record["at"], UTC)
    if values["hints"] is not None:
        values["hints"] = _hints_text(values["hints"])
    return values


def _arguments_text(arguments: dict[str, Any]) -> str:
    """The canonical JSON of the arguments, as text the database can hold."""
    encoded = canonical_json(arguments)
    try:
        return encoded.decode()
    except UnicodeDecodeError:  # a lone surrogate: the same value, with JSON's escapes
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"))


# (hint, value, source) for each hint; a tuple so the writer can remember its JSON.
_HINTS_ENCODER = json.JSONEncoder(ensure_ascii=False)
_hints_texts: dict[HintsHeld, str] = {}  # a tool's calls mostly hold the same hints


def _hints_text(hints: HintsHeld) -> str:
    """The hints column: {hint: {"value": …, "source": …}} as JSON."""
    text = _hints_texts.get(hints)
    if text is None:
        if len(_hints_texts) >= 1024:
            _hints_texts.clear()
        text = _hints_texts[hints] = _HINTS_ENCODER.encode(
            {name: {"value": value, "source": source} for name, value, source in hints}
        )
    return text
