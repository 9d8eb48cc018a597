"""What a committed write changed, as the other processes on a PostgreSQL store hear it.

On PostgreSQL every write that changes what a running gateway keeps in memory ends with a
`pg_notify` in its own transaction, so the notice is delivered exactly when (and only if) the
change commits. Its payload is small JSON: the topics the write touched and, for a write that
bumped the store revision, the new revision, which lets a listener notice a notice it missed.

The topics are worked out from the tables the transaction's statements wrote (a hook on the
engine notes them), so no writer names them and a new write cannot forget to announce itself.
A write that bumps the revision and touched a table no topic covers, or ran SQL that is not a
plain insert, update or delete, announces `ALL_TOPICS`: the listener reads everything again.
Writes that do not bump the revision (audit records, a key's last use) announce only the
approvals, whose waiting calls are released by the notice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event

# A topic for each table whose rows a gateway keeps in memory, or waits on.
TOPIC_OF_TABLE = {
    "toolsets": "toolsets",
    "toolset_tools": "toolsets",
    "tool_notes": "toolsets",
    "tool_overrides": "hints",
    "argument_rules": "rules",
    "confirm_modes": "policy",
    "approval_rules": "policy",
    "client_keys": "keys",
    "signin_tokens": "signins",
    "gateway_state": "state",
    "pending_approvals": "approvals",
}
# Tables no running gateway keeps a copy of: writing them announces nothing.
UNANNOUNCED_TABLES = frozenset(
    {"audit_log", "audit_chain", "working_sets", "store_revision", "spent_request_states", "rate_buckets"}
)
# Announced even by writes that do not bump the revision: a call waits on these rows.
ANNOUNCED_WITHOUT_REVISION = frozenset({"approvals"})
ALL_TOPICS = "all"
UNKNOWN_WRITE = "?"  # SQL whose table is not known: the listener must read everything again
# PostgreSQL refuses a payload of 8000 bytes or more; a notice is far smaller, but a store grown
# new tables must not fail its writes for it.
MAX_PAYLOAD = 7000
MAX_CHANNEL = 63  # PostgreSQL truncates longer identifiers
_WRITTEN = "toolkeeper.written_tables"


@dataclass(frozen=True)
class ChangeNotice:
    """What one committed write changed: its topics, and the revision it made (None for a write
    that did not bump it)."""

    topics: frozenset[str]
    revision: int | None

    def payload(self) -> str:
        body: dict[str, Any] = {"t": sorted(self.topics)}
        if self.revision is not None:
            body["r"] = self.revision
        text = json.dumps(body, separators=(",", ":"))
        if len(text) > MAX_PAYLOAD:
            return ChangeNotice(frozenset({ALL_TOPICS}), self.revision).payload()
        return text

    @classmethod
    def parse(cls, payload: str) -> ChangeNotice | None:
        """The notice a payload holds; None when it cannot be understood (the listener then
        reads everything again)."""
        try:
            body = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        topics, revision = body.get("t"), body.get("r")
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            return None
        if revision is not None and (not isinstance(revision, int) or isinstance(revision, bool)):
            return None
        return cls(frozenset(topics), revision)


def channel_for(schema: str | None) -> str:
    """The store's channel: one per schema, so stores sharing a database do not hear each other
    (notices never cross databases)."""
    if not schema:
        return "toolkeeper_changes"
    channel = f"toolkeeper_changes:{schema}"
    if len(channel.encode()) > MAX_CHANNEL:
        channel = f"toolkeeper_changes:{hashlib.sha256(schema.encode()).hexdigest()[:40]}"
    return channel


def notice_for(tables: Iterable[str], revision: int | None) -> ChangeNotice | None:
    """The notice a write that touched `tables` gives (revision: the one it bumped to, if it
    did); None when it announces nothing."""
    topics: set[str] = set()
    for table in tables:
        topic = TOPIC_OF_TABLE.get(table)
        if topic is not None:
            topics.add(topic)
        elif table not in UNANNOUNCED_TABLES:
            topics.add(ALL_TOPICS)
    if revision is None:
        topics &= ANNOUNCED_WITHOUT_REVISION
        return ChangeNotice(frozenset(topics), None) if topics else None
    return ChangeNotice(frozenset(topics), revision)


def note_written_tables(engine: Engine) -> None:
    """Make `engine` note, on a connection that is `collecting`, every table its statements write."""
    event.listen(engine, "before_cursor_execute", _note_statement)


def collecting(conn: Connection) -> set[str]:
    """Begin noting the tables `conn` writes; the set they are noted in."""
    written: set[str] = set()
    conn.info[_WRITTEN] = written
    return written


def stop_collecting(conn: Connection) -> None:
    conn.info.pop(_WRITTEN, None)


def _note_statement(
    conn: Connection, _cursor: Any, _statement: str, _parameters: Any, context: Any, _many: bool
) -> None:
    written = conn.info.get(_WRITTEN)
    if written is None:
        return
    compiled = getattr(context, "compiled", None)
    statement = getattr(compiled, "statement", None)
    if statement is None:
        written.add(UNKNOWN_WRITE)  # SQL given as text to the driver
    elif statement.is_dml:
        written.add(getattr(statement.table, "name", UNKNOWN_WRITE))
    elif not statement.is_select:
        written.add(UNKNOWN_WRITE)
