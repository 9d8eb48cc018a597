"""The audit chain: every record is written with a MAC over its content and the previous entry's
MAC, keyed with a secret kept outside the store, so a change, a removal, an insertion or a
reordering shows when the chain is walked.

PLACEHOLDER: this first version only writes the rows and completes them; the chain itself (the
MACs, the head, verifying, retention's anchors) is still to be written here. Its interface is
what the audit writer uses.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, insert, update

from toolkeeper.store.tables import audit_log

KEY_FILE = "audit.key"


@dataclass(frozen=True)
class ChainKey:
    """The secret the chain's MACs are keyed with, and where it came from (for messages)."""

    secret: bytes
    where: str


def load_chain_key(home: Path) -> ChainKey:
    """The key in `home`, made (readable by its owner only) when there is none yet."""
    path = home / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(secrets.token_bytes(32))
        path.chmod(0o600)
    return ChainKey(path.read_bytes(), str(path))


def append(
    conn: Connection,
    key: ChainKey,
    rows: Sequence[Mapping[str, Any]],
    completions: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Write `rows` (values keyed by column; `kind` "call", "gap" or "anchor"; a call recorded
    before it runs has outcome "started") and complete earlier started calls with `completions`
    (each: `id`, `outcome`, `detail`, `latency_ms`), in the caller's transaction. Each new row and
    each completion takes the chain's next place."""
    if rows:
        conn.execute(insert(audit_log), [dict(row) for row in rows])
    for done in completions:
        conn.execute(
            update(audit_log)
            .where(audit_log.c.id == done["id"])
            .values(outcome=done["outcome"], detail=done.get("detail"), latency_ms=done.get("latency_ms"))
        )
