"""The audit log, once for every face: reading it (the CLI and the web face pass the person's
filters as they typed them; what each filter accepts is decided here), verifying its chain
segment by segment, a person's repair (a new segment), and the key's custody at start-up."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection

from toolkeeper.config.model import GatewaySettings
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.jsonwire import has_utf8_form
from toolkeeper.policy.model import Decision
from toolkeeper.services.durations import DURATION_FORMS, parse_duration
from toolkeeper.store import Store, StoreError
from toolkeeper.store.audit import export as audit_export
from toolkeeper.store.audit import journal as audit_journal
from toolkeeper.store.audit import key as audit_key
from toolkeeper.store.audit import log as audit_rows
from toolkeeper.store.audit import record as audit_record
from toolkeeper.store.audit import segments as audit_segments
from toolkeeper.store.audit import verify as audit_verify
from toolkeeper.store.audit.append import read_head

# The decisions a record can hold: what happened to the call (a person asked ends in one of these).
RECORDED_DECISIONS = (Decision.ALLOW.value, Decision.DENY.value)
MAX_LIMIT = 10_000
MAX_OFFSET = 10_000_000  # far beyond any log a person pages through; keeps the number a number


class FilterError(ServiceError):
    """A filter of the audit log that cannot be read: `field` names it, so that a form can show
    the message beside it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, ErrorKind.INVALID)
        self.field = field


SINCE_FORMS = (
    f"a duration back from now ({DURATION_FORMS}) or an ISO date or time "
    "(2026-11-23, 2026-11-23T18:00, 2026-11-23T18:00:00+01:00; without a zone it is local time)"
)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The moment a `since` filter names, in UTC."""
    return parse_moment(text, "since", now)


def parse_moment(text: str, field: str, now: datetime | None = None) -> datetime:
    """The moment a time filter (`since`, `until`) names, in UTC: a duration back from now, or an
    ISO date or time."""
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
        raise FilterError(field, f"{field}: {text!r} is not a time. Use {SINCE_FORMS}.") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the person's own clock
    return moment.astimezone(UTC)


def parse_decision(text: str) -> str:
    value = text.strip().lower()
    if value not in RECORDED_DECISIONS:
        raise FilterError(
            "decision",
            f"decision: {text!r} is not a recorded decision. Use {' or '.join(RECORDED_DECISIONS)} "
            "(a call a person was asked about is recorded as what they decided).",
        )
    return value


class Verdict(StrEnum):
    """What `audit verify` found; each has its own exit code in the CLI."""

    WHOLE = "whole"
    BROKEN = "broken"
    EMPTY = "empty"
    NO_KEY = "no_key"
    WRONG_KEY = "wrong_key"


@dataclass(frozen=True)
class Verification:
    """A walk of the chain, for every face: the verdict, one line saying it, the counts, and the
    first record that is not as it was written (its columns as the record list shows them)."""

    verdict: Verdict
    message: str
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, Any] | None = None
    how: str | None = None  # changed, moved, removed, inserted, head, unchained
    # The segments before the current one and the breaks between them (`audit repair`).
    earlier: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "message": self.message,
            "counts": self.counts,
            "how": self.how,
            "first": self.first,
            "earlierSegments": self.earlier,
        }


class AuditService:
    def __init__(self, store: Store, settings: GatewaySettings | None = None) -> None:
        self.store = store
        self.settings = settings or GatewaySettings()

    async def query(
        self,
        tool: str | None = None,
        server: str | None = None,
        decision: str | None = None,
        since: str | None = None,
        limit: int = 50,
        *,
        principal: str | None = None,
        client: str | None = None,
        until: str | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """The newest records first, at most `limit` from the `offset`th on, narrowed by the
        filters given. `tool` is the exposed name a client called, the downstream tool's name, or
        `server.tool`; `principal` is who the gateway let in, exactly as recorded (a key's name,
        "oauth:<subject>", "local"); `client` the name the client gave itself, exactly; `since`
        and `until` are moments as `parse_moment` reads them, both included."""
        if not 1 <= limit <= MAX_LIMIT:
            raise FilterError(
                "limit", f"limit: {limit} is out of range; give a number from 1 to {MAX_LIMIT}."
            )
        if not 0 <= offset <= MAX_OFFSET:
            raise FilterError(
                "offset", f"offset: {offset} is out of range; give a number from 0 to {MAX_OFFSET}."
            )
        recorded = parse_decision(decision) if decision else None
        start = parse_moment(since, "since") if since else None
        end = parse_moment(until, "until") if until else None
        async with self.store.read() as conn:
            rows = await audit_rows.query(
                conn,
                tool=tool or None,
                server=server or None,
                decision=recorded,
                since=start,
                until=end,
                principal=principal or None,
                client=client or None,
                limit=limit,
                offset=offset,
            )
        return [_record_json(dict(row._mapping)) for row in rows]

    async def record(self, record_id: str) -> dict[str, Any]:
        """One record, as `query` shows it."""
        async with self.store.read() as conn:
            row = await audit_rows.get(conn, record_id) if has_utf8_form(record_id) else None
        if row is None:
            raise ServiceError(
                f"No audit record has the id {record_id!r}. The records are listed with their ids.",
                ErrorKind.NOT_FOUND,
            )
        return _record_json(dict(row._mapping))

    async def recover_journals(self) -> str | None:
        """Add to the store the records left in the journals of gateways that ended while calls
        ran (their running gateways' journals are theirs); what was done, or None when there
        was nothing to do. A gateway does this when it starts; the CLI before it reads the log,
        so that a gateway killed a moment after a call began still shows that call."""
        orphans = audit_journal.Orphans.find(audit_journal.journal_folder(self.settings), self.store.label)
        if not orphans:
            return None
        try:
            with orphans:
                key = audit_key.find_chain_key(self.settings)
                if key is None:
                    where = audit_key.key_file(self.settings)
                    raise ServiceError(f"there is no audit key ({where}) to add them with")
                async with self.store.write(bump_revision=False) as conn:
                    added = await conn.run_sync(audit_journal.add_missing, key, orphans.records)
        except ServiceError as exc:
            return f"The records left in {orphans.names()} by a gateway that ended could not be added: {exc}"
        return orphans.told(added)

    async def verify(self, export: Iterable[str] | None = None, *, source: str | None = None) -> Verification:
        """Walk the store's chain, or the lines of an export (`source` names it in messages)."""
        key = audit_key.find_chain_key(self.settings)
        if key is None:
            where = audit_key.key_file(self.settings)
            return Verification(
                Verdict.NO_KEY,
                f"No audit key to verify with: {where} does not exist and toolkeeper.auditKey "
                "(TOOLKEEPER_AUDIT_KEY) is not set. Use the key the gateways write with: copy their "
                "audit.key there, or set toolkeeper.auditKey.",
            )
        if export is not None:
            try:
                checked = audit_export.verify_export(export, key)
            except audit_export.ExportUnreadable as exc:
                raise ServiceError(f"{source or 'The file'} cannot be verified: {exc}.") from None
            return _verification(checked, key, source or "the export", records=checked.records)
        async with self.store.read() as conn:
            found, earlier = await conn.run_sync(_in_one_snapshot(_verify_segments, key))
        if found.head is None:
            older = f" ({found.records} records from before the chain)" if found.records else ""
            return Verification(
                Verdict.EMPTY,
                f"The audit log of {self.store.label} has no chained records yet{older}: nothing to verify.",
                {"unchained": found.records},
            )
        return _with_earlier(_verification(found, key, self.store.label, records=found.records), earlier)

    async def repair(self, reason: str, *, by: str, new_key: bool = False) -> Verification:
        """Start a new segment of the chain after a person's decision, with their `reason`; with
        `new_key`, keyed with a new key made in place of a lost one. Then verify."""
        if not reason.strip():
            raise ServiceError(
                "A repair needs the reason for it (--reason): it is kept in the chain with the break.",
                ErrorKind.INVALID,
            )
        try:
            key = (
                audit_key.make_new_key(self.settings) if new_key else audit_key.find_chain_key(self.settings)
            )
        except StoreError as exc:
            raise ServiceError(str(exc), ErrorKind.INVALID) from None
        if key is None:
            raise ServiceError(
                f"No audit key: {audit_key.key_file(self.settings)} does not exist and "
                "toolkeeper.auditKey is not set. Put the key back there, or start the new segment with "
                "a new key (--new-key).",
                ErrorKind.INVALID,
            )
        try:
            async with self.store.write(bump_revision=False) as conn:
                await conn.run_sync(
                    audit_segments.start_segment, key, reason.strip(), by, self.settings.replica
                )
        except audit_segments.NothingToRepair as exc:
            raise ServiceError(str(exc), ErrorKind.CONFLICT) from None
        return await self.verify()

    async def check_key_custody(self) -> None:
        """Refuse to serve (ServiceError) when the key file is gone while the chain holds records
        signed with a key: a new key would be made silently over them."""
        async with self.store.read() as conn:
            head = await conn.run_sync(read_head)
        try:
            audit_key.check_custody(self.settings, head.fingerprint if head else None, self.store.label)
        except audit_key.ChainKeyMissing as exc:
            raise ServiceError(str(exc), ErrorKind.STORE) from None

    async def export(self, write: Callable[[str], object], since: str | None = None) -> int:
        """Write the export's lines (JSON, one per line, with "\\n") through `write`; how many
        records. Read in one snapshot, so concurrent writers do not tear it."""
        start = parse_since(since) if since else None

        def lines(conn: Connection) -> int:
            count = -1
            for line in audit_export.export_lines(conn, start):
                write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
                count += 1
            return max(count, 0)

        async with self.store.read() as conn:
            return await conn.run_sync(_in_one_snapshot(lines))


def _verify_segments(
    conn: Connection, key: audit_key.ChainKey
) -> tuple[audit_verify.StoreCheck, list[audit_segments.EarlierSegment]]:
    return audit_verify.verify_store(conn, key), audit_segments.earlier_segments(conn, key)


def _with_earlier(found: Verification, earlier: list[audit_segments.EarlierSegment]) -> Verification:
    """The verification of the current segment, with the segments before it and their breaks: a
    change made inside an earlier segment after its repair makes the whole verdict broken."""
    if not earlier:
        return found
    listed = [_segment_json(segment) for segment in earlier]
    sentences = [_segment_sentence(segment) for segment in earlier]
    changed = next((segment for segment in earlier if segment.changed_since), None)
    if changed is not None and changed.broken_now is not None and found.verdict is not Verdict.BROKEN:
        broken = changed.broken_now
        first = _record_json(broken.record) if broken.record is not None else None
        message = (
            f"The audit chain of an earlier segment (places {changed.first_seq}–{changed.last_seq}) was "
            f"changed after it was repaired: {_broken_message('that segment', broken)}"
        )
        return Verification(Verdict.BROKEN, message, found.counts, first, broken.how, listed)
    message = found.message + " Earlier segments: " + " ".join(sentences)
    counts = {**found.counts, "segments": len(earlier) + 1}
    return Verification(found.verdict, message, counts, found.first, found.how, listed)


def _segment_sentence(segment: audit_segments.EarlierSegment) -> str:
    places = f"places {segment.first_seq}–{segment.last_seq}"
    if segment.other_key:
        state = "made with another key, so not verified with this one"
    elif segment.broken_now is None:
        state = "whole"
    else:
        state = f"broken at place {segment.broken_now.seq} ({segment.broken_now.how})"
    return (
        f"{places}: {state}; then a break, a new segment begun {segment.ended_at} by {segment.by}: "
        f"{segment.reason!r}."
    )


def _segment_json(segment: audit_segments.EarlierSegment) -> dict[str, Any]:
    now, then = segment.broken_now, segment.broken_then
    return {
        "firstSeq": segment.first_seq,
        "lastSeq": segment.last_seq,
        "otherKey": segment.other_key,
        "brokenAt": {"seq": now.seq, "how": now.how} if now is not None else None,
        "brokenWhenRepaired": {"seq": then.seq, "how": then.how} if then is not None else None,
        "changedSinceRepair": segment.changed_since,
        "break": {"at": segment.ended_at, "by": segment.by, "reason": segment.reason},
    }


def _in_one_snapshot(read: Callable[..., Any], *args: Any) -> Callable[[Connection], Any]:
    """`read` on a connection whose reads all see one moment (PostgreSQL repeatable read; a
    SQLite read transaction is one already): writers may append meanwhile."""

    def run(conn: Connection) -> Any:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return read(conn, *args)

    return run


HOW = {
    "changed": "was changed after it was written",
    "moved": "is not where it was written: it was inserted, or moved from another place",
    "inserted": "was inserted: its place in the chain is taken or beyond the chain's end",
    "head": "the chain's head does not match its records (it was changed or reset)",
    "unchained": "has no place in the chain and is not one of the records from before it: it was inserted",
}


def _verification(
    found: audit_verify.StoreCheck | audit_export.ExportCheck,
    key: audit_key.ChainKey,
    label: str,
    *,
    records: int,
) -> Verification:
    summary = found.summary
    counts = {
        "records": records,
        "chained": summary.records,
        "firstSeq": summary.first_seq,
        "lastSeq": summary.last_seq,
        "gaps": summary.gaps,
        "lost": summary.lost,
        "anchors": summary.anchors,
        "removedByRetention": summary.removed,
        "started": summary.started,
        "unchained": summary.unchained,
    }
    if found.wrong_key:
        return Verification(
            Verdict.WRONG_KEY,
            f"The audit chain of {label} was made with another key than {key.where}, so it cannot be "
            "verified with it. Use the key the gateways write with (their audit.key, or "
            "toolkeeper.auditKey).",
            counts,
        )
    broken = found.broken
    if broken is None:
        return Verification(Verdict.WHOLE, _whole_message(label, summary), counts)
    first = _record_json(broken.record) if broken.record is not None else None
    return Verification(Verdict.BROKEN, _broken_message(label, broken), counts, first, broken.how)


def _whole_message(label: str, summary: audit_verify.ChainSummary) -> str:
    parts = [f"{summary.records} records (places {summary.first_seq}–{summary.last_seq})"]
    parts.append(f"{summary.gaps} gaps ({summary.lost} records lost)")
    anchors = f"{summary.anchors} anchors"
    if summary.removed:
        anchors += f" (retention removed {summary.removed} records before the newest)"
    parts.append(anchors)
    if summary.started:
        parts.append(f"{summary.started} calls started with their outcome unknown")
    parts.append(f"{summary.unchained} unchained records from before the chain")
    return f"The audit chain of {label} is whole: " + ", ".join(parts) + "."


def _broken_message(label: str, broken: audit_verify.Broken) -> str:
    head = f"The audit chain of {label} is broken"
    if broken.how == "removed":
        first, last = broken.missing or (broken.seq, broken.seq)
        places = f"place {first}" if first == last else f"places {first}–{last}"
        after = (
            f"; the next record is {_named(broken.record)}" if broken.record is not None else " (the newest)"
        )
        return f"{head}: the records at {places} were removed{after}."
    if broken.record is None:
        return f"{head} at place {broken.seq}: {HOW.get(broken.how, broken.how)}."
    return f"{head}: the record {_named(broken.record)} {HOW.get(broken.how, broken.how)}."


def _named(values: Any) -> str:
    """A record as the messages name it: id, time, tool and place."""
    kind = values.get("kind") or audit_record.CALL
    what = values.get("exposed_name") or "" if kind == audit_record.CALL else kind
    at = values.get("at")
    when = audit_record.iso(at) if isinstance(at, datetime) else str(at)
    seq = values.get("seq")
    place = f", place {seq}" if seq is not None else ", no place"
    return f"{values.get('id')} ({when}, {what!r}{place})"


def _record_json(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record as every face shows it. A call whose outcome is "started" was recorded before it
    ran and never completed: its outcome is unknown (its gateway stopped or died meanwhile)."""
    v = values.get
    return {
        "id": v("id"),
        "at": audit_record.iso(v("at")),
        # A call; a gap (records that had to be dropped); an anchor (records retention removed).
        "kind": v("kind") or audit_record.CALL,
        "facts": audit_record.facts_of(values) if v("facts") is not None else None,
        # The remote server's account a call was made with: `account` (`gateway`, or the
        # principal's `kind:name`) and the token's `subject` where it names one; None for a call
        # to a server that signs in nowhere, and for gaps and anchors.
        "remoteAccount": _remote_account(values),
        "seq": v("seq"),
        "client": {"name": v("client_name"), "version": v("client_version"), "session": v("client_session")},
        # Who the gateway let in, and the OAuth client it came through; None before it recorded them.
        "principal": v("principal"),
        "principalClient": v("principal_client"),
        # The gateway process (replica) that wrote the record; None before records named one.
        "replica": v("replica"),
        "exposedName": v("exposed_name"),
        "server": v("server"),
        "tool": v("tool"),
        "refId": v("ref_id"),
        "argumentsSha256": v("arguments_sha256"),
        "arguments": _json_or_text(v("arguments")),
        "hints": _json_or_text(v("hints")),
        "decision": v("decision"),
        "decidedBy": v("decided_by"),
        "channel": v("channel"),
        "waitMs": v("wait_ms"),
        "outcome": v("outcome"),
        "detail": v("detail"),
        "latencyMs": v("latency_ms"),
    }


def several_replicas(records: Iterable[Mapping[str, Any]]) -> bool:
    """Whether these records (as every face shows them) were written by more than one gateway
    process: the faces then show each record's replica beside it."""
    return len({record.get("replica") for record in records if record.get("replica")}) > 1


def _remote_account(values: Mapping[str, Any]) -> dict[str, Any] | None:
    if (values.get("kind") or audit_record.CALL) != audit_record.CALL:
        return None  # a gap's or an anchor's facts are of another shape
    found = audit_record.facts_of(values).get("remote_account")
    if not isinstance(found, dict) or not isinstance(found.get("account"), str):
        return None
    subject = found.get("subject")
    return {"account": found["account"], "subject": subject if isinstance(subject, str) else None}


def remote_account_label(record: Mapping[str, Any]) -> str:
    """The remote account a call was made with, as people read it: `as alice (gateway)`, or
    `as key:bob` when the token names no subject; empty when none was used."""
    found = record.get("remoteAccount")
    if not found:
        return ""
    subject = found.get("subject")
    return f"as {subject} ({found['account']})" if subject else f"as {found['account']}"


STARTED_LABEL = "started, outcome unknown"


def outcome_label(record: Mapping[str, Any]) -> str:
    """A record's outcome as people read it: a call still "started" was recorded before it ran
    and never completed, so what it did is unknown."""
    outcome = str(record.get("outcome") or "")
    return (
        STARTED_LABEL
        if outcome == audit_record.STARTED and record.get("kind") == audit_record.CALL
        else outcome
    )


def marker_sentence(record: Mapping[str, Any], when: Callable[[str], str]) -> str | None:
    """What a gap or an anchor record says, with times shown by `when` (an ISO time in, the
    face's own rendering out); None for a call."""
    facts = record.get("facts") or {}
    kind = record.get("kind")
    if kind == audit_record.GAP:
        dropped = facts.get("dropped")
        span = _span(facts.get("from"), facts.get("to"), when)
        reason = facts.get("reason") or record.get("detail") or ""
        lost = f"{dropped} records lost" if isinstance(dropped, int) else "records lost"
        return f"— {lost}{span}{': ' + reason if reason else ''} —"
    if kind == audit_record.ANCHOR:
        removed = facts.get("removed")
        if not removed:
            return "— the audit chain starts here —"
        return (
            f"— retention removed {removed} records{_span(facts.get('oldest'), facts.get('newest'), when)} —"
        )
    return None


def _span(start: Any, end: Any, when: Callable[[str], str]) -> str:
    if not isinstance(start, str) or not isinstance(end, str):
        return ""
    try:
        return f" between {when(start)} and {when(end)}"
    except ValueError:  # not a time: a record changed by hand shows as it is
        return f" between {start} and {end}"


def _json_or_text(stored: str | None) -> Any:
    """A JSON column's value; its text as stored when it is not JSON (a record changed by hand)."""
    if stored is None:
        return None
    try:
        return json.loads(stored)
    except ValueError:
        return stored
