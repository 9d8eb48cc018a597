"""Retention of the audit log: the records older than the retention period go, as far as the
chain allows (a prefix of it, walked first), summarised by a new anchor that says what went and
where the chain now starts.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, func, select

from toolkeeper.store.audit.append import check_key, lock_head, write_entries
from toolkeeper.store.audit.key import ChainKey
from toolkeeper.store.audit.record import ANCHOR, anchor_row, iso
from toolkeeper.store.audit.verify import (
    ChainStart,
    Walk,
    chain_start,
    mac_at,
    segment_start,
    stored_entries,
    walk_floor,
)
from toolkeeper.store.db import StoreError
from toolkeeper.store.tables import audit_log


class ChainNotWhole(StoreError):
    """Retention is held: the part of the chain it would delete is not whole."""


def retain(conn: Connection, key: ChainKey, cutoff: datetime, *, replica: str | None = None) -> int:
    """Delete the records that started before `cutoff`, as far as the chain allows: a prefix of
    it (up to the first record that started later, and never a record completed after that
    point), and the records from before the chain; then append an anchor saying what went and
    where the chain now starts. How many records went. In the caller's transaction.

    The part to delete is walked first: when it is not whole nothing is deleted (ChainNotWhole),
    so retention never wipes out the evidence of a change. The anchor is `replica`'s."""
    head = lock_head(conn)
    check_key(head, key)
    old_unchained = (audit_log.c.seq.is_(None)) & (audit_log.c.at < cutoff)
    if head.seq == 0:  # no chain yet: only records from before it
        return int(conn.execute(audit_log.delete().where(old_unchained)).rowcount or 0)
    start = chain_start(conn)
    segment = segment_start(conn)
    # The current segment's start anchor stays (it says why the segment began), and so do the
    # earlier segments, the evidence of what was repaired.
    floor = segment.seq if segment is not None else 0
    through = _removable_through(conn, cutoff, head.seq, max(start.seq, floor))
    removable = (
        audit_log.c.seq.is_not(None) & (audit_log.c.seq > floor) & (audit_log.c.seq <= through)
    ) | old_unchained
    count, oldest, newest = conn.execute(
        select(func.count(), func.min(audit_log.c.at), func.max(audit_log.c.at)).where(removable)
    ).one()
    if not count:
        return 0
    last_mac = _check_prefix(conn, key, start, through, walk_floor(start, segment))
    conn.execute(audit_log.delete().where(removable))
    unchained, unchained_newest = conn.execute(
        select(func.count(), func.max(audit_log.c.at)).where(audit_log.c.seq.is_(None))
    ).one()
    facts = {
        "through_seq": through,
        "last_mac": last_mac,
        "removed": int(count),
        "oldest": iso(oldest),
        "newest": iso(newest),
        "unchained": int(unchained or 0),
        "unchained_newest": iso(unchained_newest),
    }
    detail = f"Retention removed {count} records that started before {iso(cutoff)}."
    write_entries(conn, head, key, [anchor_row(facts, detail)], replica=replica)
    return int(count)


def _removable_through(conn: Connection, cutoff: datetime, head_seq: int, start_seq: int) -> int:
    """The last place of the longest prefix of the chain whose records (anchors aside) all
    started before `cutoff` and were all completed within it."""
    # An anchor's own time holds nothing back: what it says is carried by the next anchor.
    first_recent = conn.execute(
        select(func.min(audit_log.c.seq)).where(
            audit_log.c.seq > start_seq, audit_log.c.at >= cutoff, audit_log.c.kind != ANCHOR
        )
    ).scalar()
    through = int(first_recent) - 1 if first_recent is not None else head_seq
    while through > start_seq:
        straddling = conn.execute(
            select(func.min(audit_log.c.seq)).where(
                audit_log.c.seq <= through, audit_log.c.done_seq > through
            )
        ).scalar()
        if straddling is None:
            break
        through = int(straddling) - 1
    return max(through, start_seq)


def _check_prefix(conn: Connection, key: ChainKey, start: ChainStart, through: int, floor: int) -> str:
    """The MAC at `through`, once the entries up to it (after `floor`) are checked."""
    if through == start.seq:
        return start.mac
    stored = mac_at(conn, through)
    walk = Walk(key.secret, start.seq, start.mac, through, before_start_ok=False)
    for entry in stored_entries(conn, floor):
        if entry.seq > through or not walk.feed(entry):
            break
    broken = walk.finish(stored or "")
    if broken is not None:
        raise ChainNotWhole(
            f"Retention deleted nothing: the audit chain is not whole at place {broken.seq} ({broken.how}), "
            "and the records stay as evidence. Run `toolkeeper audit verify` to see which record."
        )
    return walk.prev
