"""An audit record as the chain covers it: its phases, the canonical bytes of its content, and
its MAC. An entry's MAC is

    HMAC-SHA256(key, prev_mac "\\n" seq "\\n" phase "\\n" content)

where `prev_mac` is the previous entry's MAC in hex ("" before the first), `seq` in decimal,
`phase` "record" (a complete record), "started" (a call recorded before it ran) or "done" (the
completion of a started call), and `content` the JSON array (separators "," and ":", ASCII
escapes) of the record's columns in `CONTENT_COLUMNS` order, `at` as integer microseconds since
the epoch in UTC. A "started" entry leaves out the result (`RESULT_COLUMNS`), which the "done"
entry covers with everything else.

Records have two formats. A record of the second names the replica (the gateway process) that
wrote it, and its content ends with `replica`; a record whose replica is null was written in the
first format, before records named one, and its content leaves that column out. The two arrays
differ in length, so giving a record a replica, or taking its replica away, changes its content
and its MAC no longer matches: which format a record is read in cannot be changed unnoticed.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toolkeeper.store.audit.log import storable
from toolkeeper.store.tables import AUDIT_ANCHOR, AUDIT_CALL, AUDIT_GAP

STARTED = "started"  # the outcome of a call recorded before it ran, until it completes
RECORD, DONE = "record", "done"  # the other phases (STARTED is one too)
STORED = "stored"  # a completion's key for the values its started record was stored with
CALL, GAP, ANCHOR = AUDIT_CALL, AUDIT_GAP, AUDIT_ANCHOR

# What a record's MAC covers, in this order. A column added to `audit_log` must be added here
# (tests check that every column but the chain's own is).
CONTENT_COLUMNS = (
    "id",
    "at",
    "client_name",
    "client_version",
    "client_session",
    "exposed_name",
    "server",
    "tool",
    "ref_id",
    "arguments_sha256",
    "arguments",
    "hints",
    "decision",
    "decided_by",
    "channel",
    "wait_ms",
    "outcome",
    "detail",
    "latency_ms",
    "principal",
    "principal_client",
    "kind",
    "facts",
    "replica",  # the second format's; a record without a replica leaves it out
)
RESULT_COLUMNS = ("outcome", "detail", "latency_ms")
STARTED_COLUMNS = tuple(column for column in CONTENT_COLUMNS if column not in RESULT_COLUMNS)
CHAIN_COLUMNS = ("seq", "mac", "done_seq", "done_mac")
INTEGER_COLUMNS = ("wait_ms", "latency_ms")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CONTENT_ENCODER = json.JSONEncoder(separators=(",", ":"))
_FACTS_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class _Format:
    """The columns one format of record covers, whole and as started, with the place of `at`."""

    whole: tuple[str, ...]
    started: tuple[str, ...]
    whole_at: int
    started_at: int

    @classmethod
    def of(cls, columns: tuple[str, ...]) -> _Format:
        started = tuple(column for column in columns if column not in RESULT_COLUMNS)
        return cls(columns, started, columns.index("at"), started.index("at"))


_FIRST_FORMAT = _Format.of(tuple(column for column in CONTENT_COLUMNS if column != "replica"))
_NAMING_FORMAT = _Format.of(CONTENT_COLUMNS)


# --- entries -------------------------------------------------------------------------------------


def micros(at: datetime) -> int:
    """A moment as integer microseconds since the epoch, UTC (SQLite hands back naive UTC)."""
    delta = (at if at.tzinfo is not None else at.replace(tzinfo=UTC)) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def content(values: Mapping[str, Any], phase: str) -> bytes:
    """The canonical bytes an entry of `phase` covers of a record's `values`."""
    form = _FIRST_FORMAT if values.get("replica") is None else _NAMING_FORMAT
    listed: list[Any]
    if phase == STARTED:
        listed = [values.get(column) for column in form.started]
        listed[form.started_at] = micros(values["at"])
    else:
        listed = [values.get(column) for column in form.whole]
        listed[form.whole_at] = micros(values["at"])
    return _CONTENT_ENCODER.encode(listed).encode()


def entry_mac(secret: bytes, prev_mac: str, seq: int, phase: str, covered: bytes) -> str:
    message = b"%s\n%d\n%s\n%s" % (prev_mac.encode("ascii", "replace"), seq, phase.encode(), covered)
    return hmac.digest(secret, message, "sha256").hex()


def first_phase(values: Mapping[str, Any]) -> str:
    """The phase of a stored record's first entry: a call completed later, or still started,
    was first entered as started."""
    if values.get("done_seq") is not None or values.get("outcome") == STARTED:
        return STARTED
    return RECORD


@dataclass(frozen=True)
class Entry:
    """One place in the chain: a record's first entry, or the completion of a started call."""

    seq: int
    phase: str
    mac: str
    values: Mapping[str, Any]


def entries_of(values: Mapping[str, Any]) -> Iterator[Entry]:
    """The chain entries a stored record holds (none for a record from before the chain)."""
    if values.get("seq") is not None:
        yield Entry(int(values["seq"]), first_phase(values), values.get("mac") or "", values)
    if values.get("done_seq") is not None:
        yield Entry(int(values["done_seq"]), DONE, values.get("done_mac") or "", values)


# --- the values an entry covers ------------------------------------------------------------------


def stored_values(row: Mapping[str, Any], replica: str | None = None) -> dict[str, Any]:
    """A row's values exactly as the store will hand them back (the MAC covers these); one that
    names no replica is `replica`'s."""
    values = dict(row)
    if values.get("replica") is None:
        values["replica"] = replica
    if values.get("id") is None:
        values["id"] = secrets.token_hex(16)
    if values.get("kind") is None:
        values["kind"] = CALL
    at: datetime = values["at"]
    values["at"] = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    facts = values.get("facts")
    if facts is not None and not isinstance(facts, str):
        values["facts"] = _FACTS_ENCODER.encode(facts)
    for column in INTEGER_COLUMNS:
        number = values.get(column)
        if number is not None and not isinstance(number, int):
            values[column] = int(number)
    return storable(values)


def result_values(done: Mapping[str, Any]) -> dict[str, Any]:
    """A completion's result columns as the store will hand them back (the record's other
    values are stored already)."""
    result = storable({column: done.get(column) for column in RESULT_COLUMNS})
    latency = result["latency_ms"]
    if latency is not None and not isinstance(latency, int):
        result["latency_ms"] = int(latency)
    return result


def anchor_row(facts: Mapping[str, Any], detail: str) -> dict[str, Any]:
    return {
        "id": secrets.token_hex(16),
        "at": datetime.now(UTC),
        "exposed_name": "",
        "arguments_sha256": "",
        "decision": "",
        "outcome": ANCHOR,
        "detail": detail,
        "kind": ANCHOR,
        "facts": facts,
    }


def iso(at: datetime | None) -> str | None:
    """A stored moment in ISO 8601, UTC (SQLite hands back naive UTC)."""
    if at is None:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def facts_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record's facts (a gap's or an anchor's; a call's name its remote account), each kind's of
    its own shape; empty when there are none or they are not an object."""
    raw = values.get("facts")
    if not isinstance(raw, str):
        return {}
    try:
        found = json.loads(raw)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
