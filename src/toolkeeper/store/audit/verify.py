"""Walking the audit chain: every entry checked in the order of its places, from where the
newest anchor says the chain starts (retention's summary of what it deleted) to the head, each
segment a person's repair began walked on its own (`segments.py`). The first place where the
chain is not whole is told apart: changed, moved, removed, inserted, the head, or a record
without a place that was not there when the chain started.
"""

from __future__ import annotations

import heapq
import hmac
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from toolkeeper.store.audit.append import ChainHead, read_head
from toolkeeper.store.audit.key import ChainKey
from toolkeeper.store.audit.record import (
    ANCHOR,
    DONE,
    GAP,
    RECORD,
    STARTED,
    Entry,
    content,
    entry_mac,
    facts_of,
    first_phase,
    micros,
)
from toolkeeper.store.tables import audit_log


@dataclass(frozen=True)
class Broken:
    """The first place where the chain is not whole. `how` is "changed", "moved" (inserted, or
    moved from another place), "removed", "inserted" (a second record at a taken place, or beyond
    the head), "head" (the head does not match the last record) or "unchained" (a record without a
    place that was not there when the chain started); `record` is the record named (its columns),
    None when the record is gone."""

    seq: int
    how: str
    record: Mapping[str, Any] | None
    missing: tuple[int, int] | None = None  # the places of removed entries, first and last


@dataclass
class ChainSummary:
    """What a walk found: records from the start, gaps and the records they say were lost,
    anchors, calls never completed, and records from before the chain."""

    records: int = 0
    gaps: int = 0
    lost: int = 0
    anchors: int = 0
    removed: int = 0  # records retention removed, as the starting anchor says
    started: int = 0
    unchained: int = 0
    first_seq: int = 0
    last_seq: int = 0


class Walk:
    """Checks entries given in the order of their places, from the place after `start_seq`, whose
    predecessor's MAC is `start_mac`; stops at the first problem. Entries before the start are
    refused (retention removed those places) unless `before_start_ok` (an export's segment)."""

    def __init__(
        self, secret: bytes, start_seq: int, start_mac: str, head_seq: int, *, before_start_ok: bool
    ) -> None:
        self.secret = secret
        self.start_seq = start_seq
        self.expected = start_seq + 1
        self.prev = start_mac
        self.head_seq = head_seq
        self.before_start_ok = before_start_ok
        self.summary = ChainSummary(first_seq=start_seq + 1, last_seq=start_seq)
        self.broken: Broken | None = None
        self.matched = 0  # entries whose MAC matched: none at all means another key
        self._suspect: Entry | None = None  # an entry whose MAC failed, told apart by the next one

    def feed(self, entry: Entry) -> bool:
        """Check one entry; False once the chain is known broken (the rest need not come)."""
        if self.broken is not None:
            return False
        if self._suspect is not None:
            self._judge_suspect(entry)
            return False
        if entry.seq < self.expected:
            if entry.seq <= self.start_seq and self.before_start_ok:
                return True
            self.broken = Broken(entry.seq, "inserted", entry.values)
            return False
        if entry.seq > self.head_seq:
            self.broken = Broken(entry.seq, "inserted", entry.values)
            return False
        if entry.seq > self.expected:
            self.broken = Broken(self.expected, "removed", entry.values, (self.expected, entry.seq - 1))
            return False
        if not self._verifies(entry, self.prev):
            self._suspect = entry
            return True
        self.matched += 1
        self.prev = entry.mac
        self.expected += 1
        self._count(entry)
        return True

    def finish(self, head_mac: str) -> Broken | None:
        """The verdict once every entry was fed: the last must be the head."""
        if self.broken is None and self._suspect is not None:
            suspect = self._suspect
            self.broken = Broken(
                suspect.seq, "changed" if head_mac == suspect.mac else "moved", suspect.values
            )
        if self.broken is None:
            last = self.expected - 1
            if last < self.head_seq:
                self.broken = Broken(last + 1, "removed", None, (last + 1, self.head_seq))
            elif self.prev != head_mac:
                self.broken = Broken(self.head_seq, "head", None)
        self.summary.last_seq = self.expected - 1
        return self.broken

    def _judge_suspect(self, entry: Entry) -> None:
        """An entry whose MAC failed sits where it was written (its content changed) when the next
        entry was built on its MAC; otherwise it was put there (inserted, or moved)."""
        suspect = self._suspect
        assert suspect is not None
        chained = entry.seq == suspect.seq + 1 and self._verifies(entry, suspect.mac)
        if chained:
            self.matched += 1
        self.broken = Broken(suspect.seq, "changed" if chained else "moved", suspect.values)

    def _verifies(self, entry: Entry, prev: str) -> bool:
        try:
            expected = entry_mac(
                self.secret, prev, entry.seq, entry.phase, content(entry.values, entry.phase)
            )
        except (TypeError, ValueError, KeyError, AttributeError):  # a value no record can hold
            return False
        return hmac.compare_digest(expected, entry.mac)

    def _count(self, entry: Entry) -> None:
        if entry.phase == DONE:
            return
        values = entry.values
        summary = self.summary
        summary.records += 1
        kind = values.get("kind")
        if kind == GAP:
            summary.gaps += 1
            summary.lost += int(facts_of(values).get("dropped") or 0)
        elif kind == ANCHOR:
            summary.anchors += 1
        elif values.get("outcome") == STARTED and values.get("done_seq") is None:
            summary.started += 1


@dataclass(frozen=True)
class ChainStart:
    """Where a walk of the store starts: the newest anchor's `through_seq` and `last_mac`."""

    seq: int
    mac: str
    anchor: Mapping[str, Any] | None
    facts: Mapping[str, Any]


@dataclass(frozen=True)
class StoreCheck:
    """A walk of a store's chain. `head` None: the store has no chain yet (and `records` rows
    from before it); `wrong_key`: the key is not the chain's."""

    head: ChainHead | None
    summary: ChainSummary
    broken: Broken | None
    wrong_key: bool = False
    records: int = 0


def chain_start(conn: Connection, through: int | None = None) -> ChainStart:
    """The newest anchor's summary of what came before it (of the anchors up to place `through`,
    when given: an earlier segment's): where the walk starts."""
    placed = audit_log.c.seq.is_not(None) if through is None else audit_log.c.seq <= through
    row = conn.execute(
        select(audit_log).where(audit_log.c.kind == ANCHOR, placed).order_by(audit_log.c.seq.desc()).limit(1)
    ).first()
    if row is None:
        return ChainStart(0, "", None, {})
    anchor = dict(row._mapping)
    facts = facts_of(anchor)
    through, last_mac = facts.get("through_seq"), facts.get("last_mac")
    if not isinstance(through, int) or not isinstance(last_mac, str) or not 0 <= through < anchor["seq"]:
        # Facts no anchor is written with: walk from the anchor's own place, where its MAC fails.
        return ChainStart(int(anchor["seq"]) - 1, "", anchor, facts)
    return ChainStart(through, last_mac, anchor, facts)


def segment_start(conn: Connection, through: int | None = None) -> Entry | None:
    """The anchor the current segment of the chain starts with (the chain's first, or the one a
    person's repair wrote), or the segment holding place `through`: the newest anchor built on
    nothing (`last_mac` "", `through_seq` the place before its own). None when retention deleted
    it (before it kept it)."""
    placed = audit_log.c.seq.is_not(None) if through is None else audit_log.c.seq <= through
    rows = conn.execute(
        select(audit_log).where(audit_log.c.kind == ANCHOR, placed).order_by(audit_log.c.seq.desc())
    )
    for row in rows:
        values = dict(row._mapping)
        facts = facts_of(values)
        if facts.get("last_mac") == "" and facts.get("through_seq") == int(values["seq"]) - 1:
            return Entry(int(values["seq"]), RECORD, values.get("mac") or "", values)
    return None


def walk_segment(
    conn: Connection,
    key: ChainKey,
    segment: Entry | None,
    start: ChainStart,
    end_seq: int,
    end_mac: str,
    *,
    last: bool,
) -> tuple[Walk, Broken | None]:
    """Walk one segment from `start` (its newest anchor's summary) to its end, whose entry's MAC is
    `end_mac`. Entries beyond the end are inserted in the `last` segment, the next segment's in
    an earlier one."""
    walk = Walk(key.secret, start.seq, start.mac, end_seq, before_start_ok=False)
    for entry in stored_entries(conn, walk_floor(start, segment)):
        if (entry.seq > end_seq and not last) or not walk.feed(entry):
            break
    broken = walk.finish(end_mac)
    if segment is not None and segment.seq <= start.seq and not starts_whole(segment, key):
        broken = Broken(segment.seq, "changed", segment.values)  # kept by retention, checked alone
    return walk, broken


def walk_floor(start: ChainStart, segment: Entry | None) -> int:
    """The place after which a walk from `start` is fed entries: the earlier segments are walked
    on their own, and the segment's start anchor, which retention keeps, alone."""
    if segment is None:
        return 0
    return segment.seq if segment.seq <= start.seq else segment.seq - 1


def starts_whole(segment: Entry, key: ChainKey) -> bool:
    """Whether a segment's start anchor is as it was written (it is built on nothing)."""
    expected = entry_mac(key.secret, "", segment.seq, RECORD, content(segment.values, RECORD))
    return hmac.compare_digest(expected, segment.mac)


PAGE = 2000


def stored_entries(conn: Connection, after: int = 0) -> Iterator[Entry]:
    """Every chain entry in the store after place `after`, in the order of their places."""
    return heapq.merge(
        _entries_by(conn, "seq", after), _entries_by(conn, "done_seq", after), key=lambda e: e.seq
    )


def _entries_by(conn: Connection, place: str, after: int) -> Iterator[Entry]:
    column = audit_log.c[place]
    while True:
        rows = conn.execute(select(audit_log).where(column > after).order_by(column).limit(PAGE)).all()
        for row in rows:
            values = dict(row._mapping)
            seq = int(values[place])
            if place == "seq":
                yield Entry(seq, first_phase(values), values.get("mac") or "", values)
            else:
                yield Entry(seq, DONE, values.get("done_mac") or "", values)
        if len(rows) < PAGE:
            return
        after = int(rows[-1]._mapping[place])


def verify_store(conn: Connection, key: ChainKey) -> StoreCheck:
    """Walk the store's chain from the newest anchor to the head, in one read transaction."""
    head = read_head(conn)
    total = int(conn.execute(select(func.count()).select_from(audit_log)).scalar_one())
    if head is None or head.seq == 0:
        chained = conn.execute(select(func.count()).where(audit_log.c.seq.is_not(None))).scalar_one()
        if chained:  # records with places, and a head that says there are none: it was reset
            return StoreCheck(
                head or ChainHead(0, "", None), ChainSummary(), Broken(0, "head", None), records=total
            )
        return StoreCheck(None, ChainSummary(unchained=total), None, records=total)
    start = chain_start(conn)
    walk, broken = walk_segment(conn, key, segment_start(conn), start, head.seq, head.mac, last=True)
    summary = walk.summary
    summary.removed = int(start.facts.get("removed") or 0) if start.anchor is not None else 0
    if broken is None:
        broken = _check_unchained(conn, start, summary)
    wrong_key = head.fingerprint is not None and head.fingerprint != key.fingerprint and walk.matched == 0
    if (
        head.fingerprint is not None
        and head.fingerprint != key.fingerprint
        and not wrong_key
        and broken is None
    ):
        broken = Broken(head.seq, "head", None)  # the chain verifies with this key: the head was changed
    return StoreCheck(head, summary, broken, wrong_key=wrong_key, records=total)


def _check_unchained(conn: Connection, start: ChainStart, summary: ChainSummary) -> Broken | None:
    """Records without a place must be the ones from before the chain the starting anchor counted."""
    count, newest = conn.execute(
        select(func.count(), func.max(audit_log.c.at)).where(audit_log.c.seq.is_(None))
    ).one()
    summary.unchained = int(count or 0)
    expected = start.facts.get("unchained")
    limit = start.facts.get("unchained_newest")
    if not count:
        return None
    too_new = None
    if isinstance(limit, str):
        try:
            cutoff = datetime.fromisoformat(limit)
        except ValueError:
            cutoff = None
        if cutoff is not None and newest is not None and micros(newest) > micros(cutoff):
            too_new = conn.execute(
                select(audit_log)
                .where(audit_log.c.seq.is_(None), audit_log.c.at > cutoff)
                .order_by(audit_log.c.at)
                .limit(1)
            ).first()
    if too_new is None and isinstance(expected, int) and count <= expected:
        return None
    if too_new is None:
        too_new = conn.execute(
            select(audit_log).where(audit_log.c.seq.is_(None)).order_by(audit_log.c.at.desc()).limit(1)
        ).first()
    return Broken(0, "unchained", dict(too_new._mapping) if too_new is not None else None)


def mac_at(conn: Connection, seq: int) -> str | None:
    found = conn.execute(select(audit_log.c.mac).where(audit_log.c.seq == seq)).scalar()
    if found is None:
        found = conn.execute(select(audit_log.c.done_mac).where(audit_log.c.done_seq == seq)).scalar()
    return None if found is None else str(found)
