"""The audit log: one record per `tools/call`, the configuration tools' included, however it ended.

Two halves, so the call path never waits for the store:

- `AuditLog`, a record stage of the pipeline, turns the finished call into a record and appends
  it to the writer's buffer: no I/O, no serialisation beyond the arguments' digest (and the
  arguments themselves when `auditArguments` is on).
- `AuditWriter`, a task of the running gateway, writes what is waiting every half second (or
  sooner once a batch is full), one transaction per batch, without bumping the store revision:
  an audit record is no reason for a gateway to reload its state. When the store refuses
  (read-only, locked, full, unreachable) it says so once, keeps the records (up to a bound,
  then the oldest go, counted) and writes them when the store takes them again. It also deletes
  records older than `auditRetentionDays`, at start and then daily.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import anyio
from mcp.shared.exceptions import MCPError

from toolkeeper.catalog import CatalogTool
from toolkeeper.gateway.config_tools import ConfigTool
from toolkeeper.gateway.pipeline import ToolCall
from toolkeeper.policy.binding import arguments_digest, canonical_json
from toolkeeper.policy.model import Decision
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

# Keyed by the columns of the `audit_log` table. On the call path `at` is a POSIX timestamp and
# `id` is left out: the writer makes both (a uuid4 costs more than the rest of the record).
Record = dict[str, Any]


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
        self._waiting: deque[Record] = deque()
        self._batch_ready = anyio.Event()
        self._refused_since: float | None = None  # when the store began refusing records
        self.dropped = 0  # records dropped since the store began refusing them

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def add(self, record: Record) -> None:
        """Keep a record for the next write. Called on the call path: no I/O, nothing awaited."""
        waiting = self._waiting
        if len(waiting) >= self.max_waiting:
            waiting.popleft()
            self._drop(1)
        waiting.append(record)
        if len(waiting) >= self.batch_size and self._refused_since is None:
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
            if self._waiting or self.dropped:
                lost = f"{len(self._waiting)} records could not be written before the gateway stopped"
                if self.dropped:
                    lost += f", and {self.dropped} older ones were dropped while the store refused them"
                logger.error("audit log: %s; they are lost", lost)

    async def flush(self) -> bool:
        """Write the records waiting now, one transaction per batch. False when the store
        refused: the records stay and the next flush tries again. Records that arrive during
        the writes wait for the next flush: under steady calls a flush that chased them would
        commit a few records at a time, back to back, and a commit costs far more than a record."""
        left = len(self._waiting)
        while left > 0 and self._waiting:
            count = min(self.batch_size, left, len(self._waiting))
            left -= count
            batch = [self._waiting.popleft() for _ in range(count)]
            try:
                await self._write(batch)
            except Exception as exc:  # noqa: BLE001 - whatever it is, the gateway runs on
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
        except Exception:  # noqa: BLE001 - the gateway runs on without it; tried again later
            logger.exception("audit log: deleting records older than %d days failed", self.retention_days)
            return None
        if removed:
            logger.info("audit log: deleted %d records older than %d days", removed, self.retention_days)
        return removed

    async def _write(self, batch: list[Record]) -> None:
        async with self.store.write(bump_revision=False) as conn:
            await audit_rows.insert_batch(conn, [_row(record) for record in batch])

    async def _write_one_by_one(self, batch: list[Record]) -> bool:
        """Write a batch the database rejected for something in it record by record, dropping
        only the records it rejects. False when the store itself refused (the rest wait again)."""
        for index, record in enumerate(batch):
            try:
                await self._write([record])
            except Exception as exc:  # noqa: BLE001 - this record only
                if not audit_rows.rejected_record(exc):
                    self._put_back(batch[index:])
                    self._refused(exc)
                    return False
                logger.error(
                    "audit log: the record of a call of %r was rejected and dropped: %s",
                    record.get("exposed_name"),
                    exc,
                )
            except BaseException:
                self._put_back(batch[index:])
                raise
        return True

    def _put_back(self, batch: list[Record]) -> None:
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


def _storable(value: Any) -> Any:
    """Text the database can hold: a lone surrogate (valid in JSON, not in UTF-8) is escaped."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode()
    return value


def _row(record: Record) -> Record:
    """A record as the table holds it (off the call path: JSON is encoded here, and text is cut
    to its column's length, which PostgreSQL enforces: a client may call any name it likes)."""
    # Kept on the waiting record, so a batch written again after a failure keeps its ids.
    record.setdefault("id", uuid.uuid4().hex)
    arguments = record["arguments_sha256"]
    if not isinstance(arguments, str):  # not yet digested (a batch written again already is)
        record["arguments_sha256"] = arguments_digest(arguments)
        if record["arguments"] is not None:
            record["arguments"] = _arguments_text(record["arguments"])
    row = {key: _storable(value) for key, value in record.items()}
    row["at"] = datetime.fromtimestamp(record["at"], UTC)
    if row["hints"] is not None:
        row["hints"] = json.dumps(row["hints"], ensure_ascii=False)
    for column, length in audit_rows.TEXT_LIMITS.items():
        value = row.get(column)
        if isinstance(value, str) and len(value) > length:
            row[column] = value[: length - 1] + "…"
    return row


class AuditLog:
    """The record stage: hands every finished call's record to the writer."""

    after_result: ClassVar[bool] = True
    needs_hints: ClassVar[bool] = False

    def __init__(self, writer: AuditWriter, *, keep_arguments: bool) -> None:
        self.writer = writer
        self.keep_arguments = keep_arguments

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        try:
            record = self.record(call)
        except Exception:  # noqa: BLE001 - recording must never fail the call it records
            logger.exception("audit log: cannot record a call of %r", call.name)
            return None
        self.writer.add(record)
        return None

    def record(self, call: ToolCall) -> Record:
        elapsed = time.monotonic() - call.started
        target = call.target
        server = tool = ref_id = None
        if isinstance(target, CatalogTool):
            server, tool, ref_id = target.server, target.name, target.ref_id
        elif isinstance(target, ConfigTool):
            tool = target.name
        arguments = call.arguments
        decision = call.decision
        outcome, detail = _outcome(call)
        return {
            "at": time.time() - elapsed,
            "client_name": call.client.name,
            "client_version": call.client.version,
            "client_session": call.client.session,
            "exposed_name": call.name,
            "server": server,
            "tool": tool,
            "ref_id": ref_id,
            # The arguments as the call had them; the writer digests (and, if asked, keeps) them
            # off the call path.
            "arguments_sha256": arguments,
            "arguments": arguments if self.keep_arguments else None,
            "hints": _hints(call),
            "decision": decision.final.value if decision else Decision.ALLOW.value,
            "decided_by": decision.decided_by if decision else "no policy",
            "channel": decision.channel if decision else None,
            "wait_ms": decision.wait_ms if decision else None,
            "outcome": outcome,
            "detail": detail,
            "latency_ms": round(elapsed * 1000),
        }


def _arguments_text(arguments: dict[str, Any]) -> str:
    """The canonical JSON of the arguments, as text the database can hold."""
    encoded = canonical_json(arguments)
    try:
        return encoded.decode()
    except UnicodeDecodeError:  # a lone surrogate: the same value, with JSON's escapes
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def _hints(call: ToolCall) -> dict[str, Any] | None:
    """The hints that held for the call and where each came from: the policy's view when a
    decide stage ran, else the resolved hints, else none were worked out."""
    if call.decision is not None:
        verdict = call.decision.verdict
        return {
            name: {"value": value, "source": verdict.sources.get(name)}
            for name, value in verdict.hints.items()
        }
    if call.resolution is not None:
        source = call.resolution.source
        return {name: {"value": value, "source": source} for name, value in call.resolution.hints.items()}
    return None


def _outcome(call: ToolCall) -> tuple[str, str | None]:
    """How the call ended, and the detail a person reading the log needs."""
    decision = call.decision
    if decision is not None and (decision.final is Decision.DENY or decision.outcome):
        return "not_run", decision.outcome or decision.verdict.reason
    error = call.error
    if error is not None:
        if isinstance(error, MCPError):
            return "protocol_error", error.message
        if isinstance(error, anyio.get_cancelled_exc_class()):
            return "cancelled", None
        return "error", f"{type(error).__name__}: {error}"
    result = call.result or {}
    if call.extra.get("timed_out"):
        return "timeout", _first_text(result)
    if result.get("isError") is True:
        return "isError", None
    return "ok", None


def _first_text(result: dict[str, Any]) -> str | None:
    content = result.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None
