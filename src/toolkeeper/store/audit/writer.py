"""The audit log's writer: a thread of its own, with a connection of its own, writes the records,
so the event loop that serves calls never waits for the store, nor for the work of making a row
(the digest, the JSON, the chain's MACs).

The call path only hands values over (`add`, `start`, `complete`: a list append under a lock).
The thread makes the rows and writes them through the chain (`append.py`), one transaction per
batch: every half second, and as soon as a batch is full. Audit writes do not bump the store
revision: a record is no reason for a gateway to reload its state.

A call recorded before it runs (`start`) is kept in the gateway's journal first
(`journal.py`: a copy into a file mapped into memory, which a crash of the gateway
does not lose), and its call runs at once; the thread writes it at most `AHEAD_SECONDS` later and
then frees its slot. Records of a gateway that ended are recovered from its journal when the
writer starts. Without a journal (no file locks, the home not writable, every slot held), the
call waits for its record's commit instead, at most `WRITE_AHEAD_SECONDS`.

Whether records can be written is checked when the writer starts (`append.check_writable`)
and known from every write after: while they cannot (`refusal`), the audit stage refuses calls
that are not reliably read-only. When the store refuses (read-only, locked, full, unreachable,
the chain changed or keyed otherwise) the writer says so once, keeps the records (up to
`max_waiting`, then the oldest go, counted) and writes them when the store takes them again,
after a gap record that says how many went, from when to when. It also deletes
records older than `auditRetentionDays`, at start and then daily.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from toolkeeper.policy.binding import arguments_digest, canonical_json
from toolkeeper.store.audit import log as audit_rows
from toolkeeper.store.audit.append import append, check_writable, prepare, read_head
from toolkeeper.store.audit.journal import AuditJournal, Orphans, add_missing
from toolkeeper.store.audit.key import ChainKey, load_chain_key
from toolkeeper.store.audit.record import STORED
from toolkeeper.store.audit.retention import retain
from toolkeeper.store.db import Store, StoreError, ThreadConnection, default_home

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.5
BATCH_SIZE = 200  # records per transaction; a full batch is written without waiting
MAX_WAITING = 10_000  # records kept while the store refuses them; beyond this the oldest go
RETRY_SECONDS = 5.0  # while the store refuses, how often to try again
# How soon the record of a call kept in the journal is written to the store: soon enough that
# `toolkeeper audit` shows a running call, late enough that a quick call is written once, ended.
AHEAD_SECONDS = 0.05
# Without a journal: how long a call that is not reliably read-only waits for its "started"
# record to be committed.
# Past this the call does not run (the audit fails closed), and until the store takes records
# again such calls are refused without waiting.
WRITE_AHEAD_SECONDS = 2.0
# How long a stopping gateway gives the last records: a store that hangs must not hold the exit.
SHUTDOWN_FLUSH_SECONDS = 3.0
RETENTION_EVERY_SECONDS = 24 * 3600.0
RETENTION_RETRY_SECONDS = 3600.0

# Keyed by the columns of the `audit_log` table. On the call path `at` is a POSIX timestamp,
# `hints` a tuple, `arguments_sha256` (and `arguments`) the call's arguments as they came, and
# `id` is left out (but for a call recorded before it runs, whose journal knows it by its id): the
# writer's thread makes the datetime, the digest, the JSON and the id.
Record = dict[str, Any]
HintsHeld = audit_rows.HintsHeld

STARTED = "started"  # the outcome of a call recorded before it ran, until it is completed


@dataclass(frozen=True, slots=True)
class UnreadArguments:
    """In a record's place of arguments: they were never read, and why (the edge refused a
    message nested too deep to read)."""

    why: str


_TIMED_OUT = "timed out"  # what a write-ahead's waiter holds when its caller stopped waiting
GATEWAY_STOPPED = "gateway_stopped"


class Started:
    """A call recorded before it runs. The loop's side sets `slot`, `waiter` and `ended`; the
    thread's side `row`, `written`, `stored` and `dropped`, and frees the slot."""

    __slots__ = ("dropped", "ended", "journaled", "record", "row", "slot", "stored", "waiter", "written")

    def __init__(self, record: Record) -> None:
        self.record = record
        self.journaled = False  # kept in the journal: safe from a crash before it is written
        self.slot: int | None = None  # its slot in the journal until the store has it
        self.waiter: asyncio.Future[str | None] | None = None
        self.ended = False  # its completion was handed over
        self.row: Record | None = None
        self.written = False  # committed as started: its outcome goes as a completion
        self.stored: Record | None = None  # the values it was committed with, for its completion
        self.dropped = False


@dataclass(frozen=True, slots=True)
class Completion:
    """How a call recorded before it ran ended."""

    started: Started
    outcome: str
    detail: str | None
    latency_ms: int | None


Item = Record | Started | Completion


class _Gap:
    """Records dropped since the last gap record: how many, and the span of their times."""

    def __init__(self) -> None:
        self.count = 0
        self.first: datetime | None = None
        self.last: datetime | None = None

    def add(self, count: int, at: datetime) -> None:
        self.count += count
        self.first = at if self.first is None or at < self.first else self.first
        self.last = at if self.last is None or at > self.last else self.last

    def merge(self, other: _Gap) -> None:
        if other.count and other.first is not None and other.last is not None:
            self.add(other.count - 1, other.first)
            self.add(1, other.last)


class AuditWriter:
    """Holds records until the store has them; run it in the gateway's task group."""

    def __init__(
        self,
        store: Store,
        retention_days: int,
        *,
        key: Callable[[str | None], ChainKey] | None = None,
        home: Path | None = None,
        batch_size: int = BATCH_SIZE,
        max_waiting: int = MAX_WAITING,
        flush_seconds: float = FLUSH_SECONDS,
        write_ahead_seconds: float = WRITE_AHEAD_SECONDS,
        journal_folder: Path | None = None,
        ahead_seconds: float = AHEAD_SECONDS,
        replica: str | None = None,
    ) -> None:
        self.store = store
        self.retention_days = retention_days
        # The chain's key (read on the writer's thread): what `key` gives (told the fingerprint
        # of the key the chain's records are signed with, if any), else the key file in `home`
        # (beside a SQLite store by default).
        self.chain_key = key
        self.home = home
        self.batch_size = batch_size
        self.max_waiting = max_waiting
        self.flush_seconds = flush_seconds
        self.write_ahead_seconds = write_ahead_seconds
        # Where this gateway's journal goes, and where the journals of gateways that ended are
        # recovered from; None: no journal (every call recorded before it runs waits for the store).
        self.journal_folder = journal_folder
        self.ahead_seconds = ahead_seconds
        # The name of this process among the replicas of its store, which every record it writes
        # carries (one the journal keeps too, so that a recovered record names its own).
        self.replica = replica
        self._journal: AuditJournal | None = None
        self._alarm: asyncio.TimerHandle | None = None  # the loop's: when the thread writes next
        # Shared by the loop's thread and the writer's: the items handed over, under `_lock`.
        self._lock = threading.Lock()
        self._incoming: deque[Item] = deque()
        self._wake = threading.Event()
        self._flush_requests: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[bool]]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The loop's side: calls recorded before they ran that have not ended yet.
        self._running: dict[Started, None] = {}
        self._stalled = False  # a write-ahead waited its whole time; calls do not wait meanwhile
        # The writer thread's side (and a flush's, under `_writing`).
        self._writing = threading.Lock()
        self._store_connection: ThreadConnection | None = None
        self._key: ChainKey | None = None
        self._ahead: deque[Started] = deque()  # rows of calls recorded before they ran, not written yet
        self._rows: deque[Record] = deque()  # rows of ended calls, oldest first
        self._completions: deque[Completion] = deque()  # of calls whose started row is written
        self._gap = _Gap()  # under `_lock`: both sides drop records
        self._refused_since: float | None = None  # when the store began refusing records
        # Why records cannot be written now (the store's or the chain's error), read by the call
        # path: a call that is not reliably read-only does not run meanwhile.
        self._refusal: str | None = None
        self._checked = asyncio.Event()  # set once the thread knows whether records can be written
        self._next_attempt = 0.0

    # -- the call path (the event loop's thread): hand over, never wait ------------------------

    @property
    def waiting(self) -> int:
        return len(self._incoming) + len(self._ahead) + len(self._rows) + len(self._completions)

    @property
    def dropped(self) -> int:
        return self._gap.count

    @property
    def refusal(self) -> str | None:
        """Why records cannot be written now, or None while they can."""
        return self._refusal

    @property
    def checked_now(self) -> bool:
        """Whether `checked` would not wait (read on every risky call: no coroutine made)."""
        return self._checked.is_set() or self._thread is None

    async def checked(self) -> bool:
        """Wait until the writer's thread checked, as it starts, whether records can be written
        (at most `write_ahead_seconds`); whether it did. No wait once it has, nor for a writer
        whose thread is not running (nothing is known, and nothing is written)."""
        if self.checked_now:
            return True
        with anyio.move_on_after(self.write_ahead_seconds):
            await self._checked.wait()
        return self._checked.is_set()

    def add(self, record: Record) -> None:
        """Keep the record of an ended call for the next write."""
        self._hand_over(record, urgent=False)

    def start(self, record: Record) -> Started:
        """Hand over the record of a call about to run, outcome "started": kept in the journal and
        written soon, or else written at once (`written` waits for that); its outcome follows
        with `complete`."""
        # Its id is given now, so that a record recovered from the journal is known by it.
        fresh = {
            **record,
            "id": os.urandom(16).hex(),
            "outcome": STARTED,
            "detail": None,
            "latency_ms": None,
            "replica": self.replica,
        }
        started = Started(fresh)
        self._running[started] = None
        journal = self._journal
        slot = journal.keep(fresh) if journal is not None else None
        if slot is not None:
            started.journaled = True
            started.slot = slot
            self._hand_over(started, urgent=False)
            self._write_soon()
            return started
        if not self._unsure:
            loop = asyncio.get_running_loop()
            started.waiter = loop.create_future()
        self._hand_over(started, urgent=True)
        return started

    async def written(self, started: Started) -> bool:
        """Wait until the started record is safe: kept in the journal (no wait), or else committed,
        at most `write_ahead_seconds`; whether it is. While the store refuses or is slow, calls do
        not wait (and are refused)."""
        if started.journaled:
            return True
        waiter = started.waiter
        if waiter is None:
            return False
        if not waiter.done():
            # A timer, not a cancel scope and a shield: this wait is on every such call's path.
            # Cancelled, the caller cancels only the waiter, which the writer then leaves alone.
            timer = asyncio.get_running_loop().call_later(
                self.write_ahead_seconds, _resolve, waiter, _TIMED_OUT
            )
            try:
                await waiter
            finally:
                timer.cancel()
        if waiter.result() is not _TIMED_OUT:
            return not started.dropped
        if not self._stalled:
            self._stalled = True
            logger.warning(
                "audit log: the store did not take the record of a call of %r within %.0f s, so the "
                "call is refused; calls that are not reliably read-only are refused until the store "
                "takes records again",
                started.record.get("exposed_name"),
                self.write_ahead_seconds,
            )
        return False

    def complete(self, started: Started, *, outcome: str, detail: str | None, latency_ms: int) -> None:
        """The outcome of a call handed over with `start`."""
        if started.ended:
            return  # completed already: the gateway stopped while it ran
        started.ended = True
        self._running.pop(started, None)
        self._hand_over(Completion(started, outcome, detail, latency_ms), urgent=False)

    def stop_running(self, reason: str) -> int:
        """The gateway is stopping: every call recorded before it ran that has not ended is
        completed as "gateway_stopped" (whatever its own end, which comes later or never). How many."""
        running = list(self._running)
        now = time.time()
        for started in running:
            elapsed_ms = round((now - started.record["at"]) * 1000)
            self.complete(
                started,
                outcome=GATEWAY_STOPPED,
                detail=f"the gateway stopped ({reason}) while the call ran; its outcome is unknown",
                latency_ms=elapsed_ms,
            )
        return len(running)

    def _write_soon(self) -> None:
        """Wake the thread `ahead_seconds` from now, unless it is woken by then already: one
        timer for all the calls started meanwhile, not a thread switch per call."""
        if self._alarm is None:
            self._alarm = asyncio.get_running_loop().call_later(self.ahead_seconds, self._alarm_rang)

    def _alarm_rang(self) -> None:
        self._alarm = None
        self._ensure_thread()
        self._wake.set()

    @property
    def _unsure(self) -> bool:
        return self._stalled or self._refused_since is not None

    def _hand_over(self, item: Item, *, urgent: bool) -> None:
        with self._lock:
            incoming = self._incoming
            incoming.append(item)
            # Bounded even while the thread is held up in a write (a locked file holds it for
            # its whole busy timeout).
            if len(incoming) > 2 * self.max_waiting:
                self._drop_handed_over(incoming.popleft())
            full = len(incoming) >= self.batch_size
        if urgent or full:
            self._ensure_thread()
            self._wake.set()

    def _drop_handed_over(self, item: Item) -> None:
        # Under `_lock`.
        if isinstance(item, Completion):
            at = time.time()
        else:
            record = item.record if isinstance(item, Started) else item
            at = record["at"]
            if isinstance(item, Started):
                item.dropped = True
                self._free_slot(item)
                if item.waiter is not None:  # on the loop's thread: its call waits no longer
                    _resolve(item.waiter, None)
        self._gap.add(1, datetime.fromtimestamp(at, UTC))

    # -- the gateway's task ---------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start the writer's thread and apply the retention period until cancelled; then
        complete the calls still running as "gateway_stopped" and write what is left (for a
        bounded time)."""
        self._loop = asyncio.get_running_loop()
        self._journal = self._open_journal()
        self._ensure_thread()
        task_status.started()
        try:
            while True:
                pruned = await self.apply_retention()
                await anyio.sleep(RETENTION_EVERY_SECONDS if pruned is not None else RETENTION_RETRY_SECONDS)
        finally:
            with anyio.CancelScope(shield=True):
                self.stop_running("the gateway stopped")
                await self._stop_thread()

    async def flush(self) -> bool:
        """Write the records handed over until now. False when the store refused: the records
        stay and a later write tries again."""
        if self._stopping:  # the writer's thread has ended (or is ending): write from a worker
            return await anyio.to_thread.run_sync(self._write_waiting)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        with self._lock:
            self._flush_requests.append((loop, done))
        self._ensure_thread()
        self._wake.set()
        return await done

    async def stop(self) -> None:
        """Write what is left (for a bounded time) and end the writer's thread."""
        await self._stop_thread()

    def _open_journal(self) -> AuditJournal | None:
        if self.journal_folder is None:
            return None
        try:
            return AuditJournal.open(self.journal_folder, self.store.label)
        except OSError as exc:
            logger.warning(
                "audit log: cannot keep a journal in %s (%s), so every call that is not reliably "
                "read-only waits for its record to be committed before it is forwarded",
                self.journal_folder,
                exc.strerror or exc,
            )
            return None

    async def _stop_thread(self) -> None:
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        thread = self._thread
        if thread is None:
            self._close_journal()
            return
        self._stopping = True
        self._wake.set()
        with anyio.move_on_after(SHUTDOWN_FLUSH_SECONDS):
            while thread.is_alive():
                await anyio.sleep(0.01)
        if thread.is_alive():
            logger.error(
                "audit log: the store did not take the last records within %.0f s; %d records are lost",
                SHUTDOWN_FLUSH_SECONDS,
                self.waiting,
            )
        else:  # the thread frees slots: the journal closes only once it has ended
            self._close_journal()
        self._thread = None

    def _close_journal(self) -> None:
        journal, self._journal = self._journal, None
        if journal is None:
            return
        journal.close()
        if journal.held:
            logger.error(
                "audit log: %d records did not reach the store; they stay in %s, and the next gateway "
                "to start on this store adds them (as started, outcome unknown)",
                journal.held,
                journal.path,
            )

    def _ensure_thread(self) -> None:
        if self._thread is None and not self._stopping:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            # A daemon: a store that hangs must not keep a stopped gateway's process alive.
            self._thread = threading.Thread(target=self._work, name="toolkeeper-audit-writer", daemon=True)
            self._thread.start()

    async def apply_retention(self) -> int | None:
        """Delete records older than the retention period; how many went, or None if the store
        refused (it is tried again later)."""
        cutoff = datetime.now(UTC) - timedelta(days=self.retention_days)
        try:
            # On a worker thread, through the writer's connection: deleting a day's records
            # must not hold the loop either.
            removed = await anyio.to_thread.run_sync(self._retain, cutoff, abandon_on_cancel=True)
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

    def _probe(self) -> bool:
        """Check that an append would be taken (see `append.check_writable`); whether it
        would. A refusal is kept (`refusal`) until a write or a later probe succeeds."""
        with self._writing:
            try:
                key = self._key_now()
                self._connection_now().transaction(lambda conn: _checked_and_prepared(conn, key))
            except Exception as exc:  # whatever it is, the gateway runs on: read-only calls go on
                self._refused(exc)
                return False
            self._accepted()
            return True

    def _retain(self, cutoff: datetime) -> int:
        with self._writing:
            key = self._key_now()
            return self._connection_now().transaction(
                lambda conn: retain(conn, key, cutoff, replica=self.replica)
            )

    # -- the writer's thread ----------------------------------------------------------------------

    def _work(self) -> None:
        try:
            # Before anything else: whether records can be written at all (the chain whole at its
            # head, the key the chain's), so that no risky call runs on a chain that refuses them.
            self._probe()
            if self._loop is not None:
                _call_soon(self._loop, self._checked.set)
            self._recover()
            while True:
                timeout = RETRY_SECONDS if self._refused_since is not None else self.flush_seconds
                self._wake.wait(timeout)
                self._wake.clear()
                with self._lock:
                    requests, self._flush_requests = self._flush_requests, []
                stopping = self._stopping
                if stopping:
                    # Not while the store refuses: a locked SQLite file holds each attempt for its
                    # whole busy timeout, and the exit would wait for it.
                    ok = self._refused_since is None and self._write_waiting()
                elif requests or self._refused_since is None or time.monotonic() >= self._next_attempt:
                    ok = self._write_waiting()
                    if ok and self._refused_since is not None:  # nothing was waiting to try with
                        ok = self._probe()
                else:
                    with self._writing:  # rows are made (and bounded) while the store refuses
                        self._take()
                    ok = False
                for loop, done in requests:
                    _call_soon(loop, _resolve, done, ok)
                if stopping:
                    self._report_losses()
                    return
        except BaseException:  # the thread must say why it ended; the gateway runs on without it
            logger.exception("audit log: the writer stopped; records are no longer written")
            raise
        finally:
            if self._store_connection is not None:
                with self._writing:  # not under a retention still running on a worker thread
                    self._store_connection.close()

    def _recover(self) -> None:
        """Add the records left in the journals of gateways that ended to the store."""
        if self.journal_folder is None:
            return
        orphans = Orphans.find(self.journal_folder, self.store.label)
        if not orphans:
            return
        try:
            with orphans, self._writing:
                key = self._key_now()
                added = self._connection_now().transaction(
                    lambda conn: add_missing(conn, key, orphans.records)
                )
        except Exception as exc:  # the gateway runs on; the files stay for the next try
            logger.error(
                "audit log: cannot add the records left in %s to the store; the next gateway to "
                "start, or `toolkeeper audit`, tries again: %s",
                orphans.names(),
                exc,
            )
            return
        logger.warning("audit log: %s", orphans.told(added))

    def _write_waiting(self) -> bool:
        """Write what was handed over until now, a batch per transaction; False when the store
        refused (what is left waits). Records handed over during the writes wait for the next
        round: under steady calls, chasing them would commit a few records at a time."""
        with self._writing:
            self._take()
            left = len(self._rows) + len(self._completions) + len(self._ahead)
            while left > 0 or self._gap.count:
                batch = self._next_batch()
                count = len(batch.ahead) + len(batch.rows) + len(batch.completions)
                if count == 0 and batch.gap is None:
                    break
                left -= count
                if not self._write_batch(batch):
                    return False
            return True

    def _take(self) -> None:
        """Make rows of what was handed over (here, off the loop), keeping within `max_waiting`."""
        with self._lock:
            items, self._incoming = self._incoming, deque()
        if not items:
            return
        fresh_ids = os.urandom(16 * len(items)).hex()  # one system call for all of them
        for index, item in enumerate(items):
            if isinstance(item, Completion):
                self._take_completion(item)
                continue
            record = item.record if isinstance(item, Started) else item
            row = made_row(record, fresh_ids[32 * index : 32 * index + 32])
            if isinstance(item, Started):
                if item.dropped:
                    continue
                item.row = row
                self._ahead.append(item)
            else:
                self._rows.append(row)
        self._keep_within_bounds()

    def _take_completion(self, done: Completion) -> None:
        started = done.started
        if started.dropped:
            return  # its record was dropped and counted: the completion goes with it
        if started.written:
            self._completions.append(done)
        elif started.row is not None:  # not written yet: it is written complete
            started.row.update(
                {"outcome": done.outcome, "detail": done.detail, "latency_ms": done.latency_ms}
            )

    def _keep_within_bounds(self) -> None:
        excess = len(self._ahead) + len(self._rows) + len(self._completions) - self.max_waiting
        if excess <= 0:
            return
        gap = _Gap()
        for _ in range(excess):
            if self._rows:
                gap.add(1, self._rows.popleft()["at"])
            elif self._completions:
                self._completions.popleft()
                gap.add(1, datetime.now(UTC))
            else:
                started = self._ahead.popleft()
                started.dropped = True
                assert started.row is not None
                gap.add(1, started.row["at"])
                self._release([started])
        with self._lock:
            first_drop = self._gap.count == 0
            self._gap.merge(gap)
        if first_drop:
            logger.warning(
                "audit log: %d records are waiting for the store; dropping the oldest from now on "
                "(a gap record counts them once the store takes records again)",
                self.max_waiting,
            )

    def _next_batch(self) -> _Batch:
        """The calls recorded before they ran first, in a transaction of their own: their callers
        wait for its commit, which the smallest transaction reaches soonest, and the rest is
        written next, while those calls run. Then the oldest rows and completions, a batch's
        worth. The gap record, if records were dropped, leads."""
        ahead = _popped(self._ahead, self.batch_size)
        rows = [] if ahead else _popped(self._rows, self.batch_size)
        completions = [] if ahead else _popped(self._completions, self.batch_size)
        with self._lock:
            gap, self._gap = (self._gap, _Gap()) if self._gap.count else (None, self._gap)
        return _Batch(ahead, rows, completions, gap)

    def _write_batch(self, batch: _Batch) -> bool:
        try:
            stored = self._append(batch)
        except Exception as exc:  # whatever it is, the gateway runs on
            if not audit_rows.rejected_record(exc):
                self._put_back(batch)
                self._refused(exc)
                return False
            # Not the store but something in the batch: keep every record it accepts.
            return self._write_one_by_one(batch)
        self._written(batch, stored)
        self._accepted()
        return True

    def _connection_now(self) -> ThreadConnection:
        if self._store_connection is None:
            self._store_connection = ThreadConnection(self.store)
        return self._store_connection

    def _key_now(self) -> ChainKey:
        if self._key is None:
            # A key file is made only while no record was signed with a key (key.py).
            head = self._connection_now().transaction(read_head)
            signed_by = head.fingerprint if head is not None else None
            try:
                self._key = (
                    self.chain_key(signed_by)
                    if self.chain_key
                    else load_chain_key(self._key_home(), signed_by)
                )
            except OSError as exc:
                raise StoreError(f"Cannot read or make the audit log's key: {exc}") from None
        return self._key

    def _append(self, batch: _Batch) -> dict[str, Record]:
        key = self._key_now()
        connection = self._connection_now()
        rows = [started.row for started in batch.ahead if started.row is not None]
        rows += batch.rows
        if batch.gap is not None:
            rows.insert(0, gap_row(batch.gap, os.urandom(16).hex()))
        completions = [_completion_values(done) for done in batch.completions]
        return connection.transaction(lambda conn: append(conn, key, rows, completions, replica=self.replica))

    def _key_home(self) -> Path:
        if self.home is not None:
            return self.home
        return self.store.path.parent if self.store.path is not None else default_home()

    def _write_one_by_one(self, batch: _Batch) -> bool:
        """Write a batch the database rejected for something in it record by record, dropping
        only the records it rejects. False when the store itself refused (the rest wait again)."""
        singles = [
            *(_Batch(ahead=[started]) for started in batch.ahead),
            *(_Batch(rows=[row]) for row in batch.rows),
            *(_Batch(completions=[done]) for done in batch.completions),
        ]
        if batch.gap is not None:
            singles.insert(0, _Batch(gap=batch.gap))
        for index, single in enumerate(singles):
            try:
                stored = self._append(single)
            except Exception as exc:  # this record only
                if not audit_rows.rejected_record(exc):
                    for rest in reversed(singles[index:]):
                        self._put_back(rest)
                    self._refused(exc)
                    return False
                logger.error("audit log: the record of %s was rejected and dropped: %s", single.names(), exc)
                for started in single.ahead:
                    started.dropped = True
                self._release(single.ahead)
                continue
            self._written(single, stored)
        self._accepted()
        return True

    def _written(self, batch: _Batch, stored: dict[str, Record]) -> None:
        for started in batch.ahead:
            if started.row is not None and started.row["outcome"] == STARTED:
                started.written = True
                started.stored = stored.get(started.row["id"])
        self._release(batch.ahead)

    def _release(self, ahead: Iterable[Started]) -> None:
        """These records are in the store, or dropped (and counted): free their journal slots,
        and tell the calls waiting for them that they may run."""
        ahead = list(ahead)
        for started in ahead:
            self._free_slot(started)
        waiters = [started.waiter for started in ahead if started.waiter is not None]
        if waiters and self._loop is not None:
            _call_soon(self._loop, _resolve_all, waiters)

    def _free_slot(self, started: Started) -> None:
        slot, started.slot = started.slot, None
        journal = self._journal
        if slot is not None and journal is not None:
            journal.free(slot)

    def _put_back(self, batch: _Batch) -> None:
        self._ahead.extendleft(reversed(batch.ahead))
        self._rows.extendleft(reversed(batch.rows))
        self._completions.extendleft(reversed(batch.completions))
        if batch.gap is not None:
            with self._lock:
                self._gap.merge(batch.gap)
        self._keep_within_bounds()

    def _refused(self, exc: Exception) -> None:
        self._next_attempt = time.monotonic() + RETRY_SECONDS
        self._refusal = str(exc) or type(exc).__name__
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
        self._stalled = False
        self._refusal = None
        if self._refused_since is None:
            return
        seconds = time.monotonic() - self._refused_since
        self._refused_since = None
        logger.warning("audit log: the store takes records again after %.0f s", seconds)

    def _report_losses(self) -> None:
        lost = self.waiting
        with self._lock:
            dropped = self._gap.count
        if lost or dropped:
            message = f"{lost} records could not be written before the gateway stopped"
            if dropped:
                message += f", and {dropped} older ones were dropped while the store refused them"
            logger.error("audit log: %s; they are lost", message)


@dataclass
class _Batch:
    """What one transaction writes."""

    ahead: list[Started] = field(default_factory=list)
    rows: list[Record] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    gap: _Gap | None = None

    def names(self) -> str:
        if self.gap is not None:
            return "a gap"
        names = [s.record.get("exposed_name") for s in self.ahead]
        names += [row.get("exposed_name") for row in self.rows]
        names += [done.started.record.get("exposed_name") for done in self.completions]
        return "a call of " + ", ".join(repr(name) for name in names)


def _checked_and_prepared(conn: Any, key: ChainKey) -> None:
    """Whether an append would be taken (raises if not), and its statements ready: the thread
    checks as the gateway starts, so the first calls' records need no compiling."""
    check_writable(conn, key)
    prepare(conn)


def _popped(items: deque[Any], count: int) -> list[Any]:
    return [items.popleft() for _ in range(min(count, len(items)))]


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    """Run `callback` on `loop`'s thread, unless that loop is gone (a test's, say)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _resolve_all(futures: list[asyncio.Future[str | None]]) -> None:
    for future in futures:
        _resolve(future, None)


def _completion_values(done: Completion) -> Record:
    started = done.started
    assert started.row is not None
    values: Record = {
        "id": started.row["id"],
        "outcome": done.outcome,
        "detail": done.detail,
        "latency_ms": done.latency_ms,
    }
    if started.stored is not None:
        values[STORED] = started.stored
    return values


# -- making rows (on the writer's thread) ------------------------------------------------------


def made_row(record: Record, fresh_id: str) -> Record:
    """A record's values as the table's columns take them. Arguments that cannot be serialised
    (nested past what Python's encoder reads, say) are recorded as such, with their size: a
    call is never left out of the log for its arguments."""
    values = {**audit_rows.NO_VALUES, "kind": "call", **record}
    values["id"] = record.get("id") or fresh_id
    arguments = record["arguments_sha256"]
    if isinstance(arguments, UnreadArguments):
        _no_arguments(values, f"the arguments were not read: {arguments.why}")
    else:
        try:
            values["arguments_sha256"] = arguments_digest(arguments)
            if record.get("arguments") is not None:
                values["arguments"] = _arguments_text(record["arguments"])
        except (RecursionError, ValueError, TypeError) as exc:
            kind = type(exc).__name__
            _no_arguments(values, f"the arguments could not be serialised ({kind}): {shape(arguments)}")
    values["at"] = datetime.fromtimestamp(record["at"], UTC)
    if values.get("hints") is not None:
        values["hints"] = audit_rows.hints_text(values["hints"])
    return values  # made storable by the chain, which cuts every text it writes


def _no_arguments(values: Record, why: str) -> None:
    """A record whose arguments are not there to digest: no digest, and the detail says why."""
    values["arguments_sha256"] = ""
    values["arguments"] = None
    detail = values.get("detail")
    values["detail"] = f"{detail}; {why}" if detail else why


def shape(value: Any) -> str:
    """How big a JSON value is, without recursing: how deep it nests and how many values it holds."""
    deepest = 0
    count = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        count += 1
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
    return f"nested {deepest} levels deep, {count} values"


def gap_row(gap: _Gap, fresh_id: str) -> Record:
    """The record of records that had to be dropped."""
    first = gap.first or datetime.now(UTC)
    last = gap.last or first
    reason = "the store refused records for too long, and more were waiting than the writer keeps"
    return {
        **audit_rows.NO_VALUES,
        "id": fresh_id,
        "kind": "gap",
        "at": first,
        "exposed_name": "",
        "arguments_sha256": "",
        "decision": "",
        "outcome": "gap",
        "detail": (
            f"{gap.count} records were dropped, of calls from {first.isoformat()} to "
            f"{last.isoformat()}: {reason}"
        ),
        "facts": json.dumps(
            {"dropped": gap.count, "from": first.isoformat(), "to": last.isoformat(), "reason": reason}
        ),
    }


def _arguments_text(arguments: dict[str, Any]) -> str:
    """The canonical JSON of the arguments, as text the database can hold."""
    encoded = canonical_json(arguments)
    try:
        return encoded.decode()
    except UnicodeDecodeError:  # a lone surrogate: the same value, with JSON's escapes
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"))
