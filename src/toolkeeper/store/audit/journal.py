"""The audit journal: the records of calls that are not reliably read-only, kept where a crash of
the gateway cannot lose them, from before each call is forwarded until the store has them.

One file per gateway process, in the toolkeeper home (`audit-journal/`), mapped into the
process's memory. Keeping a record is a copy into that memory: no system call, no lock, nothing
the event loop can wait on. The pages belong to the kernel's cache of the file, so the records
of a gateway that is killed (`kill -9`) or crashes stay in the file. The machine losing power
is another matter, as it is for the store's own commits (SQLite's `synchronous=NORMAL`).

The audit writer's thread moves the records into the store with its next write and frees
their slots once that has committed. A running gateway holds an exclusive lock on its file; a
file whose lock can be taken belongs to a gateway that ended before every slot was freed. Its
records are added to the store as "started, outcome unknown" (`Orphans`, `add_missing`), by the
next gateway to start on that store or by `toolkeeper audit`.

The file: a header (a magic line, then the label of the store the records belong to), then
fixed-size slots. A slot is a state byte (free or held), the payload's length and CRC-32, and the
payload: the record as JSON. A slot is written payload first and marked held last, so that a
slot torn by a crash reads as free; the CRC catches the rest.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import secrets
import struct
import zlib
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from toolkeeper.config.model import GatewaySettings
from toolkeeper.store.audit.append import append
from toolkeeper.store.audit.key import ChainKey
from toolkeeper.store.audit.log import NO_VALUES, hints_text
from toolkeeper.store.audit.record import STARTED, STARTED_COLUMNS
from toolkeeper.store.db import default_home
from toolkeeper.store.tables import audit_log

try:  # POSIX only; without it there is no journal and the writer commits before forwarding
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

JOURNAL_FOLDER = "audit-journal"
SUFFIX = ".journal"
# Version 2: a record is a JSON list of the values the header's second line names (a list
# encodes in half the time of an object, on every journaled call). Version 1 files, whose
# records are objects, are still read.
MAGIC = b"toolkeeper audit journal 2\n"
MAGIC_V1 = b"toolkeeper audit journal 1\n"
HEADER_BYTES = 4096
SLOT_BYTES = 2048
SLOTS = 512  # calls recorded and not yet in the store; beyond this, calls wait for the store
_FREE, _HELD = 0, 1
_SLOT_HEAD = struct.Struct("<BxxxII")  # state, payload length, CRC-32
_PAYLOAD_BYTES = SLOT_BYTES - _SLOT_HEAD.size
_CUT = 200  # characters a text keeps when a record does not fit its slot otherwise

# What a record keeps in the journal: everything its started entry in the chain covers (a call's
# facts name its remote account), except its arguments, which are only digested on the writer's
# thread (a call's arguments can be large). The header names the columns, so a journal written
# before a column was kept is still read.
JOURNALED = tuple(column for column in STARTED_COLUMNS if column not in ("arguments_sha256", "arguments"))
RECOVERED = (
    "the gateway ended (killed, or crashed) while the call ran, before its record reached the "
    "store; recovered from its journal, which keeps no arguments"
)


def journal_folder(settings: GatewaySettings) -> Path:
    """Where the gateways of these settings keep their journals: beside the audit key."""
    return (settings.home or default_home()) / JOURNAL_FOLDER


class AuditJournal:
    """This process's journal file. `keep` runs on the event loop's thread, `free` on the
    writer's: a slot is either's at a time, and the free slots are a deque, whose appends and
    pops are atomic."""

    def __init__(self, path: Path, descriptor: int, mapped: mmap.mmap) -> None:
        self.path = path
        self._descriptor = descriptor
        self._map = mapped
        self._free: deque[int] = deque(range(SLOTS))

    @classmethod
    def open(cls, folder: Path, store_label: str) -> AuditJournal:
        """A new journal file in `folder` for the records of the store `store_label`, locked
        for as long as this process keeps it open. Raises OSError."""
        if fcntl is None:
            raise OSError("this system has no file locks (fcntl)")
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
        size = HEADER_BYTES + SLOTS * SLOT_BYTES
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(descriptor, size)
            mapped = mmap.mmap(descriptor, size)
        except BaseException:
            os.close(descriptor)
            path.unlink(missing_ok=True)
            raise
        # Every page touched now, so that keeping a record never waits for one to be made.
        mapped[:] = bytes(size)
        names = _ENCODER.encode(JOURNALED).encode() + b"\n"
        room = HEADER_BYTES - len(MAGIC) - len(names) - 1
        label = store_label.encode("utf-8", "backslashreplace")[:room]
        header = MAGIC + label + b"\n" + names
        mapped[: len(header)] = header
        return cls(path, descriptor, mapped)

    @property
    def held(self) -> int:
        return SLOTS - len(self._free)

    def keep(self, record: Mapping[str, Any]) -> int | None:
        """Keep a record (its `JOURNALED` values); its slot, or None when every slot is held or
        the record does not fit one."""
        try:
            slot = self._free.popleft()
        except IndexError:
            return None
        payload = _payload(record)
        if payload is None:
            self._free.append(slot)
            return None
        start = HEADER_BYTES + slot * SLOT_BYTES
        body = start + _SLOT_HEAD.size
        mapped = self._map
        mapped[body : body + len(payload)] = payload
        mapped[start : start + _SLOT_HEAD.size] = _SLOT_HEAD.pack(_HELD, len(payload), zlib.crc32(payload))
        return slot

    def free(self, slot: int) -> None:
        """The slot's record is in the store (or was dropped, and counted in a gap)."""
        self._map[HEADER_BYTES + slot * SLOT_BYTES] = _FREE
        self._free.append(slot)

    def close(self) -> None:
        """Close the file; remove it when no record is left in it. A record left (the store
        did not take it before the gateway stopped) stays for the next gateway to recover."""
        held = self.held
        self._map.close()
        os.close(self._descriptor)  # the lock goes with it
        if held == 0:
            self.path.unlink(missing_ok=True)


# One encoder for every record: `json.dumps` with its own separators makes one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_HINTS = JOURNALED.index("hints")


def _payload(record: Mapping[str, Any]) -> bytes | None:
    """The record's `JOURNALED` values as JSON (ASCII: a lone surrogate is escaped, not an
    error); texts cut when the whole does not fit a slot."""
    values = [record.get(name) for name in JOURNALED]
    hints = values[_HINTS]
    if isinstance(hints, tuple):  # as the column holds them (remembered per tool's hints)
        values[_HINTS] = hints_text(hints)
    payload = _ENCODER.encode(values).encode()
    if len(payload) <= _PAYLOAD_BYTES:
        return payload
    cut = [value[:_CUT] if isinstance(value, str) else value for value in values]
    payload = _ENCODER.encode(cut).encode()
    return payload if len(payload) <= _PAYLOAD_BYTES else None


# -- recovering the journals of gateways that ended ---------------------------------------------


@dataclass
class Orphans:
    """The journal files of gateways that ended without emptying them, locked by this process
    while it adds their records to the store, in a `with` block: left without an error, the
    records are in and the files are removed; with one, they are released for the next try."""

    files: list[tuple[Path, int]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0  # slots marked held whose content did not check out
    _locked: bool = True

    @classmethod
    def find(cls, folder: Path, store_label: str) -> Orphans:
        """Every journal file in `folder` for the store `store_label` whose lock can be taken and
        that holds records; such a file holding none is removed on the way."""
        found = cls()
        if fcntl is None or not folder.is_dir():
            return found
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            try:
                descriptor = os.open(path, os.O_RDWR)
            except OSError:
                continue  # gone meanwhile (its gateway stopped, or another process recovered it)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                with open(descriptor, "rb", closefd=False) as file:
                    content = file.read()
            except OSError:  # its gateway runs, or another process is recovering it
                os.close(descriptor)
                continue
            label, records, unreadable = _read(content)
            if label != store_label:
                os.close(descriptor)
                continue
            if not records and not unreadable:  # its gateway ended with every record stored
                path.unlink(missing_ok=True)
                os.close(descriptor)
                continue
            found.files.append((path, descriptor))
            found.records += records
            found.unreadable += unreadable
        return found

    def __bool__(self) -> bool:
        return bool(self.files)

    def names(self) -> str:
        return ", ".join(str(path) for path, _ in self.files)

    def told(self, added: int) -> str:
        """What adding these files' records to the store did, for the log or a person."""
        text = (
            f"{added} calls that were running when their gateway ended were added from {self.names()} "
            "(started, outcome unknown)"
        )
        if len(self.records) > added:
            text += f"; {len(self.records) - added} were in the store already"
        if self.unreadable:
            text += f"; {self.unreadable} records were torn by the crash and could not be read"
        return text

    def __enter__(self) -> Orphans:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.discard()
        else:
            self.release()

    def discard(self) -> None:
        """The records are in the store: the files go (their names stay, for `told`)."""
        self._close(remove=True)

    def release(self) -> None:
        """The files stay for the next try, unlocked."""
        self._close(remove=False)

    def _close(self, *, remove: bool) -> None:
        if not self._locked:
            return
        self._locked = False
        for path, descriptor in self.files:
            if remove:
                path.unlink(missing_ok=True)
            os.close(descriptor)


def _read(content: bytes) -> tuple[str | None, list[dict[str, Any]], int]:
    """A journal file's store label, its held records, and how many held slots did not read."""
    names: list[str] | None = None
    if content.startswith(MAGIC):
        lines = content[len(MAGIC) : HEADER_BYTES].split(b"\n", 2)
        try:
            names = json.loads(lines[1]) if len(lines) > 2 else None
        except ValueError:
            names = None
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            return None, [], 0  # a header cut short: whatever wrote it was not a gateway
        label_line = lines[0]
    elif content.startswith(MAGIC_V1):
        label_line = content[len(MAGIC_V1) : HEADER_BYTES].split(b"\n", 1)[0]
    else:
        return None, [], 0
    label = label_line.decode("utf-8", "backslashreplace")
    records: list[dict[str, Any]] = []
    unreadable = 0
    for start in range(HEADER_BYTES, len(content) - _SLOT_HEAD.size + 1, SLOT_BYTES):
        state, length, crc = _SLOT_HEAD.unpack_from(content, start)
        if state != _HELD:
            continue
        payload = content[start + _SLOT_HEAD.size : start + _SLOT_HEAD.size + length]
        try:
            if length > _PAYLOAD_BYTES or zlib.crc32(payload) != crc:
                raise ValueError("torn")
            record = json.loads(payload)
            if names is not None and isinstance(record, list) and len(record) == len(names):
                record = dict(zip(names, record, strict=True))
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ValueError("not a record")
        except ValueError:
            unreadable += 1
            continue
        records.append(record)
    return label, records, unreadable


def add_missing(conn: Connection, key: ChainKey, records: Sequence[Mapping[str, Any]]) -> int:
    """Append, as started with their outcome unknown, the recovered records the store does not
    have yet (a gateway can end between its commit and freeing the slot); how many."""
    ids = [record["id"] for record in records]
    present: set[str] = set()
    for chunk in _chunks(ids, 500):
        present.update(conn.execute(select(audit_log.c.id).where(audit_log.c.id.in_(chunk))).scalars())
    rows = [_recovered_row(record) for record in records if record["id"] not in present]
    rows.sort(key=lambda row: row["at"])
    append(conn, key, rows)
    return len(rows)


def _recovered_row(record: Mapping[str, Any]) -> dict[str, Any]:
    row = {**NO_VALUES, **{name: record.get(name) for name in JOURNALED}}
    at = record.get("at")
    row["at"] = datetime.fromtimestamp(at if isinstance(at, int | float) else 0, UTC)
    row["kind"] = "call"
    row["exposed_name"] = row["exposed_name"] or ""
    row["decision"] = row["decision"] or ""
    row["arguments_sha256"] = ""
    row["outcome"] = STARTED
    row["detail"] = RECOVERED
    return row


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
