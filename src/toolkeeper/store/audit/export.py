"""Exporting the audit log with its chain (JSON lines: a header, then every record with its
places, MACs and predecessors' MACs), and verifying such an export on its own, without the store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from toolkeeper.store.audit.append import read_head
from toolkeeper.store.audit.key import ChainKey
from toolkeeper.store.audit.record import ANCHOR, CHAIN_COLUMNS, CONTENT_COLUMNS, DONE, Entry, entries_of, iso
from toolkeeper.store.audit.verify import Broken, ChainSummary, Walk, chain_start, mac_at, stored_entries
from toolkeeper.store.tables import audit_log

EXPORT_FORMAT = "toolkeeper-audit-export"
# Version 2: records name their replica (see `record.py`); an export of version 1, whose records
# name none, is read the same way.
EXPORT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAC_CONSTRUCTION = (
    'HMAC-SHA256(key, prev_mac + "\\n" + seq + "\\n" + phase + "\\n" + content): phase "record", '
    '"started" (content without outcome, detail, latency_ms) or "done"; content the JSON array '
    '(separators "," and ":", ASCII escapes) of the columns in content_columns, at as integer '
    "microseconds since the epoch (UTC), and without replica where a record's replica is null"
)


def export_lines(conn: Connection, since: datetime | None = None) -> Iterator[dict[str, Any]]:
    """A header, then every record (from the first that started at or after `since`, when given)
    with its columns and its entries' places, MACs and predecessors' MACs. Records come in the
    order of their last entry (a started call when it completed). Read in one transaction."""
    head = read_head(conn)
    if head is None:
        return
    start = chain_start(conn)
    from_seq = start.seq + 1
    if since is not None:
        first = conn.execute(
            select(func.min(audit_log.c.seq)).where(
                audit_log.c.seq > start.seq, audit_log.c.at >= since, audit_log.c.kind != ANCHOR
            )
        ).scalar()
        from_seq = int(first) if first is not None else head.seq + 1
    prev = start.mac if from_seq - 1 == start.seq else (mac_at(conn, from_seq - 1) or "")
    yield {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "key_fingerprint": head.fingerprint,
        "from_seq": from_seq,
        "from_prev_mac": prev,
        "head_seq": head.seq,
        "head_mac": head.mac,
        "content_columns": list(CONTENT_COLUMNS),
        "mac": MAC_CONSTRUCTION,
    }
    if since is None:
        for row in conn.execute(select(audit_log).where(audit_log.c.seq.is_(None)).order_by(audit_log.c.at)):
            yield export_record(dict(row._mapping), None, None)
    waiting: dict[str, str] = {}  # started calls completed later: the MAC before their first entry
    for entry in stored_entries(conn, from_seq - 1):
        if entry.seq > head.seq:
            break
        values = entry.values
        if entry.phase == DONE:
            yield export_record(values, waiting.pop(values["id"], None), prev)
        elif values.get("done_seq") is not None and int(values["done_seq"]) <= head.seq:
            waiting[values["id"]] = prev
        else:
            yield export_record(values, prev, None)
        prev = entry.mac


def export_record(
    values: Mapping[str, Any], prev_mac: str | None, done_prev_mac: str | None
) -> dict[str, Any]:
    line = {column: values.get(column) for column in CONTENT_COLUMNS}
    line["at"] = iso(values["at"])
    for column in CHAIN_COLUMNS:
        line[column] = values.get(column)
    line["prev_mac"] = prev_mac
    line["done_prev_mac"] = done_prev_mac
    return line


class ExportUnreadable(ValueError):
    """A file that is not an audit export; the message says what is wrong and where."""


@dataclass(frozen=True)
class ExportCheck:
    fingerprint: str | None
    summary: ChainSummary
    broken: Broken | None
    wrong_key: bool
    records: int


def verify_export(lines: Iterable[str], key: ChainKey) -> ExportCheck:
    """Check an export written by `export_lines` (JSON lines); ExportUnreadable for a file that
    is not one. A line that is not a record counts as a change at its place."""
    numbered = enumerate(lines, start=1)
    header = _export_header(next(numbered, (0, ""))[1])
    entries: list[Entry] = []
    unchained = records = 0
    for number, line in numbered:
        if not line.strip():
            continue
        values = _export_values(number, line)
        records += 1
        found = list(entries_of(values))
        if not found:
            unchained += 1
        entries.extend(found)
    entries.sort(key=lambda entry: entry.seq)
    walk = Walk(
        key.secret, header["from_seq"] - 1, header["from_prev_mac"], header["head_seq"], before_start_ok=True
    )
    for entry in entries:
        if not walk.feed(entry):
            break
    broken = walk.finish(header["head_mac"])
    walk.summary.unchained = unchained
    fingerprint = header.get("key_fingerprint")
    wrong_key = fingerprint is not None and fingerprint != key.fingerprint and walk.matched == 0
    if broken is None and fingerprint is not None and fingerprint != key.fingerprint:
        broken = Broken(header["head_seq"], "head", None)
    return ExportCheck(fingerprint, walk.summary, broken, wrong_key, records)


def _export_header(line: str) -> dict[str, Any]:
    try:
        header = json.loads(line) if line.strip() else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise ExportUnreadable(
            "its first line is not the header of a toolkeeper audit export "
            "(made by `toolkeeper audit export --format jsonl`)"
        )
    if header.get("version") not in READABLE_VERSIONS:
        raise ExportUnreadable(
            f"it is an export of version {header.get('version')!r}; this toolkeeper reads "
            f"{' and '.join(str(version) for version in READABLE_VERSIONS)}"
        )
    for name in ("from_seq", "head_seq"):
        if not isinstance(header.get(name), int):
            raise ExportUnreadable(f"its header has no {name}")
    for name in ("from_prev_mac", "head_mac"):
        if not isinstance(header.get(name), str):
            raise ExportUnreadable(f"its header has no {name}")
    return header


def _export_values(number: int, line: str) -> dict[str, Any]:
    """A record line's values as the store held them (`at` a datetime again); a line that is not
    one becomes a record whose MAC cannot match, at the place it names if any."""
    try:
        found = json.loads(line)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise ExportUnreadable(f"line {number} is not a JSON object")
    values = dict(found)
    try:
        values["at"] = datetime.fromisoformat(values["at"])
    except (KeyError, TypeError, ValueError):
        raise ExportUnreadable(f"line {number} has no time ('at')") from None
    for column in ("seq", "done_seq"):
        if values.get(column) is not None and not isinstance(values[column], int):
            raise ExportUnreadable(f"line {number}: {column} is not a number")
    return values
