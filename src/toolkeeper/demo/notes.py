"""Demo MCP server ``toolkeeper-notes``: a small notes store kept in SQLite.

Modelled on the Nextcloud notes server of ADR-017 ("Add MCP Tool Annotations"): the
same snake_case tool names, etag-based optimistic concurrency on updates, titles,
behaviour hints and parameter descriptions. The notes live in ``notes.sqlite`` in the
working directory unless ``--db PATH`` is given. Nothing is external, so every hint that
is declared says ``openWorldHint: false``.

Run it with ``python -m toolkeeper.demo.notes`` (stdio) or
``python -m toolkeeper.demo.notes --transport http --host 127.0.0.1 --port 8765``
(streamable HTTP at ``/mcp``). The server only ever logs to stderr.

Deliberate gaps
---------------
This server is the test bed of toolkeeper's annotation lint, so its metadata is
*deliberately* imperfect. Lint tests assert exactly this table; do not "fix" it.

===============  ============  =======================  ================================================
tool             title         annotations              deliberate gap
===============  ============  =======================  ================================================
search_notes     Search Notes  R=true O=false           none (correct)
get_note         Get Note      R=true O=false           none (correct)
create_note      Create Note   R=false D=false I=false  parameter ``category`` has no description
                               O=false                  (title and hints are correct)
update_note      Update Note   R=true I=false O=false   MISLEADING: claims read-only although it
                                                        overwrites the note's content
append_to_note   (none)        (none)                   no title and no annotations at all
delete_note      Delete Note   R=false D=true I=true    none (correct)
                               O=false
list_categories  (none)        (none)                   no title and no annotations at all
===============  ============  =======================  ================================================

R/D/I/O = readOnlyHint / destructiveHint / idempotentHint / openWorldHint. A hint not
listed is absent on the wire (e.g. update_note has no destructiveHint), not false.

Every parameter other than ``create_note.category`` carries a description, and every
tool has a description. ``list_categories`` takes no parameters.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from toolkeeper.demo.common import add_transport_arguments, log_to_stderr, serve

logger = logging.getLogger("toolkeeper.demo.notes")

SERVER_NAME = "toolkeeper-notes"
DEFAULT_DB = "notes.sqlite"
INSTRUCTIONS = (
    "A small notes store. Read a note with get_note before updating it (update_note needs its etag)."
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    content TEXT NOT NULL,
    category TEXT NOT NULL DEFAULT '',
    modified REAL NOT NULL,
    revision INTEGER NOT NULL DEFAULT 1,
    etag TEXT NOT NULL
)
"""


# --------------------------------------------------------------------------- models


class Note(BaseModel):
    """A full note, as returned by get/create/update/append."""

    id: int = Field(description="Note id")
    title: str = Field(description="Note title")
    content: str = Field(description="Markdown content")
    category: str = Field(description="Category (empty string when uncategorised)")
    etag: str = Field(description="Version tag; pass it to update_note")
    modified: str = Field(description="Last modification time, ISO 8601 UTC")


class NoteSummary(BaseModel):
    """A search hit: everything but the content."""

    id: int
    title: str
    category: str
    etag: str
    modified: str


class SearchResult(BaseModel):
    notes: list[NoteSummary]


class Category(BaseModel):
    name: str
    note_count: int


class CategoryList(BaseModel):
    categories: list[Category]


class DeleteResult(BaseModel):
    deleted: int = Field(description="Id of the deleted note")
    title: str = Field(description="Title the deleted note had")


# --------------------------------------------------------------------------- storage


def compute_etag(content: str, modified: float, revision: int) -> str:
    """The etag of a note version: a hash of its content, modification time and revision."""
    digest = hashlib.sha256(f"{revision}\x00{modified!r}\x00{content}".encode()).hexdigest()
    return digest[:16]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _note_from_row(row: sqlite3.Row) -> Note:
    return Note(
        id=row["id"],
        title=row["title"],
        content=row["content"],
        category=row["category"],
        etag=row["etag"],
        modified=_iso(row["modified"]),
    )


class NoteNotFound(ToolError):
    def __init__(self, note_id: int) -> None:
        super().__init__(f"Note {note_id} not found")


class NotesStore:
    """All SQLite access. One short-lived connection per operation (tools may run in worker threads)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    @staticmethod
    def _get_row(conn: sqlite3.Connection, note_id: int) -> sqlite3.Row:
        row: sqlite3.Row | None = conn.execute("SELECT * FROM notes WHERE id = ?", (note_id,)).fetchone()
        if row is None:
            raise NoteNotFound(note_id)
        return row

    @staticmethod
    def _write(conn: sqlite3.Connection, row: sqlite3.Row, content: str) -> Note:
        modified = time.time()
        revision = row["revision"] + 1
        etag = compute_etag(content, modified, revision)
        conn.execute(
            "UPDATE notes SET content = ?, modified = ?, revision = ?, etag = ? WHERE id = ?",
            (content, modified, revision, etag, row["id"]),
        )
        return _note_from_row(conn.execute("SELECT * FROM notes WHERE id = ?", (row["id"],)).fetchone())

    def search(self, query: str) -> list[NoteSummary]:
        escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT * FROM notes WHERE title LIKE ? ESCAPE '\\' OR content LIKE ? ESCAPE '\\'"
                " ORDER BY id",
                (pattern, pattern),
            ).fetchall()
        return [
            NoteSummary(
                id=r["id"],
                title=r["title"],
                category=r["category"],
                etag=r["etag"],
                modified=_iso(r["modified"]),
            )
            for r in rows
        ]

    def get(self, note_id: int) -> Note:
        with self._connect() as conn:
            return _note_from_row(self._get_row(conn, note_id))

    def create(self, title: str, content: str, category: str) -> Note:
        modified = time.time()
        etag = compute_etag(content, modified, 1)
        with self._connect() as conn:
            cur = conn.execute(
                "INSERT INTO notes (title, content, category, modified, revision, etag)"
                " VALUES (?, ?, ?, ?, 1, ?)",
                (title, content, category, modified, etag),
            )
            return _note_from_row(self._get_row(conn, int(cur.lastrowid or 0)))

    def update(self, note_id: int, content: str, etag: str) -> Note:
        with self._connect() as conn:
            row = self._get_row(conn, note_id)
            if row["etag"] != etag:
                raise ToolError(
                    f"Note {note_id} ({row['title']!r}) has changed since you read it: "
                    f"etag {etag!r} is stale, the current etag is {row['etag']!r}. "
                    "Fetch it again with get_note and retry."
                )
            return self._write(conn, row, content)

    def append(self, note_id: int, text: str) -> Note:
        with self._connect() as conn:
            row = self._get_row(conn, note_id)
            content = row["content"]
            if content and not content.endswith("\n"):
                content += "\n"
            return self._write(conn, row, content + text)

    def delete(self, note_id: int) -> DeleteResult:
        with self._connect() as conn:
            row = self._get_row(conn, note_id)
            conn.execute("DELETE FROM notes WHERE id = ?", (note_id,))
            return DeleteResult(deleted=note_id, title=row["title"])

    def categories(self) -> list[Category]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT category, COUNT(*) AS n FROM notes WHERE category != ''"
                " GROUP BY category ORDER BY category"
            ).fetchall()
        return [Category(name=r["category"], note_count=r["n"]) for r in rows]


# --------------------------------------------------------------------------- server

NoteId = Annotated[int, Field(description="The id of the note")]


def build_server(db_path: str | Path = DEFAULT_DB) -> MCPServer:
    """Build the notes server over the SQLite file ``db_path`` (created if missing)."""
    store = NotesStore(db_path)
    server = MCPServer(
        SERVER_NAME,
        title="Toolkeeper demo notes",
        instructions=INSTRUCTIONS,
        version="0.1.0",
    )

    @server.tool(
        title="Search Notes",
        description=(
            "Search notes by title or content, returning id, title, category and etag of each match. "
            "Use get_note to retrieve the full content of a match. An empty query lists all notes."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def search_notes(
        query: Annotated[
            str, Field(description="Search term matched (case-insensitively) against note titles and content")
        ],
    ) -> SearchResult:
        return SearchResult(notes=store.search(query))

    @server.tool(title="Get Note", annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def get_note(note_id: NoteId) -> Note:
        """Get one note with its full content and current etag."""
        return store.get(note_id)

    @server.tool(
        title="Create Note",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    )
    def create_note(
        title: Annotated[str, Field(description="The title of the note")],
        content: Annotated[str, Field(description="Markdown content of the note")],
        category: str = "",  # DELIBERATE GAP: no parameter description (see module docstring).
    ) -> Note:
        """Create a new note. Each call creates another note."""
        return store.create(title, content, category)

    @server.tool(
        title="Update Note",
        description=(
            "Replace a note's content. The etag prevents overwriting concurrent changes: if the note "
            "has been modified since you read it, the update fails and the error reports the current etag."
        ),
        # DELIBERATE GAP: misleading hint - this tool overwrites a note's content.
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=False, open_world_hint=False),
    )
    def update_note(
        note_id: Annotated[int, Field(description="The id of the note to update")],
        content: Annotated[str, Field(description="New markdown content; replaces the whole content")],
        etag: Annotated[
            str, Field(description="Etag from get_note; the update fails if the note changed since then")
        ],
    ) -> Note:
        return store.update(note_id, content, etag)

    # DELIBERATE GAP: no title, no annotations.
    @server.tool()
    def append_to_note(
        note_id: Annotated[int, Field(description="The id of the note to append to")],
        text: Annotated[str, Field(description="Text to append on a new line at the end of the note")],
    ) -> Note:
        """Append text to the end of a note. Each call adds the text again."""
        return store.append(note_id, text)

    @server.tool(
        title="Delete Note",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    def delete_note(
        note_id: Annotated[int, Field(description="The id of the note to delete permanently")],
    ) -> DeleteResult:
        """Delete a note permanently."""
        return store.delete(note_id)

    # DELIBERATE GAP: no title, no annotations.
    @server.tool()
    def list_categories() -> CategoryList:
        """List the categories in use, with the number of notes in each."""
        return CategoryList(categories=store.categories())

    return server


# --------------------------------------------------------------------------- entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m toolkeeper.demo.notes", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--db", default=DEFAULT_DB, help=f"SQLite file holding the notes (default: ./{DEFAULT_DB})"
    )
    add_transport_arguments(parser, default_port=8765)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    log_to_stderr()
    server = build_server(args.db)
    logger.info("notes database: %s", Path(args.db).resolve())
    serve(server, args, logger=logger)


if __name__ == "__main__":
    main()
