"""Segments of the audit chain: when the chain can no longer be written on (a record or its head
changed behind the gateway's back, or its key lost), a person decides, and `toolkeeper audit
repair` starts a new segment. Its first record is an anchor built on nothing, whose facts keep
the person's reason and the end of the segment before it: its last place and MAC, its key's
fingerprint, and how it verified at that moment. The earlier segment stays, the evidence of what
happened; verifying walks each segment on its own, and a change made inside an earlier segment
after the repair still shows (it breaks the segment before the place it broke at then).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from toolkeeper.store.audit.append import lock_head, newest_entry, write_entries
from toolkeeper.store.audit.key import ChainKey
from toolkeeper.store.audit.record import ANCHOR, anchor_row, facts_of, iso
from toolkeeper.store.audit.verify import Broken, chain_start, segment_start, verify_store, walk_segment
from toolkeeper.store.db import StoreError
from toolkeeper.store.tables import audit_log

SEGMENT = "segment"  # the key of a repair anchor's facts that says what it ended and why


class NothingToRepair(StoreError):
    """The store has no audit chain yet."""


def start_segment(
    conn: Connection, key: ChainKey, reason: str, by: str, replica: str | None = None
) -> dict[str, Any]:
    """Append the anchor of a new segment, keyed with `key`, saying why (`reason`, by `by`) and
    what the segment before it was: its places, last MAC, key and how it verified now. The
    anchor's facts; the anchor is `replica`'s (the process writing it). In the caller's
    transaction."""
    head = lock_head(conn, remake=True)
    newest, newest_mac = newest_entry(conn)
    end = max(head.seq, newest)
    if end == 0:
        raise NothingToRepair("The audit log has no chain yet, so there is nothing to repair.")
    found = verify_store(conn, key)
    first = segment_start(conn)
    previous = {
        "first_seq": first.seq if first is not None else chain_start(conn).seq + 1,
        "last_seq": end,
        "last_mac": head.mac if head.seq == end else newest_mac,
        "key_fingerprint": head.fingerprint,
        "wrong_key": found.wrong_key,
        "broken_seq": found.broken.seq if found.broken is not None and not found.wrong_key else None,
        "broken_how": found.broken.how if found.broken is not None and not found.wrong_key else None,
    }
    unchained, unchained_newest = conn.execute(
        select(func.count(), func.max(audit_log.c.at)).where(audit_log.c.seq.is_(None))
    ).one()
    facts = {
        "through_seq": end,
        "last_mac": "",
        "removed": 0,
        "oldest": None,
        "newest": None,
        "unchained": int(unchained or 0),
        "unchained_newest": iso(unchained_newest),
        SEGMENT: {"reason": reason, "by": by, "previous": previous},
    }
    head.seq, head.mac = end, ""  # built on nothing: the new segment verifies on its own
    detail = f"A new audit chain segment starts here ({by}): {reason}"
    write_entries(conn, head, key, [anchor_row(facts, detail)], replica=replica)
    return facts


@dataclass(frozen=True)
class EarlierSegment:
    """An earlier segment as it verifies now, beside how it verified when it was ended."""

    first_seq: int
    last_seq: int
    ended_at: str | None  # when the repair began the next one
    reason: str
    by: str
    other_key: bool  # keyed with another key than the one given: it cannot be walked with it
    broken_then: Broken | None  # how it was broken when repaired (seq and how only)
    broken_now: Broken | None

    @property
    def changed_since(self) -> bool:
        """Whether the segment was changed after the repair: it now breaks where it did not."""
        now, then = self.broken_now, self.broken_then
        if self.other_key or now is None:
            return False
        return then is None or now.seq < then.seq


def earlier_segments(conn: Connection, key: ChainKey) -> list[EarlierSegment]:
    """Every segment before the current one, oldest first, each walked on its own."""
    rows = conn.execute(
        select(audit_log)
        .where(audit_log.c.kind == ANCHOR, audit_log.c.seq.is_not(None))
        .order_by(audit_log.c.seq)
    )
    found = []
    for row in rows:
        values = dict(row._mapping)
        segment = facts_of(values).get(SEGMENT)
        if isinstance(segment, dict) and isinstance(segment.get("previous"), dict):
            found.append(_walked(conn, key, values, segment))
    return found


def _walked(
    conn: Connection, key: ChainKey, anchor: Mapping[str, Any], segment: Mapping[str, Any]
) -> EarlierSegment:
    previous = segment["previous"]
    first, last = int(previous.get("first_seq") or 1), int(previous.get("last_seq") or 0)
    then_seq = previous.get("broken_seq")
    broken_then = Broken(int(then_seq), str(previous.get("broken_how")), None) if then_seq else None
    other_key = previous.get("key_fingerprint") not in (None, key.fingerprint)
    broken_now = None
    if not other_key:
        start = chain_start(conn, through=last)
        begin = segment_start(conn, through=last)
        _, broken_now = walk_segment(conn, key, begin, start, last, str(previous.get("last_mac")), last=False)
    at = anchor.get("at")
    return EarlierSegment(
        first,
        last,
        iso(at) if isinstance(at, datetime) else None,
        str(segment.get("reason") or ""),
        str(segment.get("by") or ""),
        other_key,
        broken_then,
        broken_now,
    )
