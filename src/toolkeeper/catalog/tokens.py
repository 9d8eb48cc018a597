"""What a tool's definition costs the model: an estimate of its tokens, as the client receives it.

The count is of the `tools/list` entry exactly as sent (name, title, description with the
toolset's notes, schemas, annotations), serialized compactly, under one named encoding whose
tables ship inside the tokenizer's package: nothing is downloaded, ever. Models differ in their
tokenizers, so every figure shown is labelled an estimate and names `ENCODING`.

Loading the tables takes about half a second of CPU and holds the interpreter, so counts are
remembered per distinct entry (by a digest of its bytes), in memory and in a small file in the
user's cache folder that every toolkeeper process shares: a gateway whose tools were counted
before, by it or by another process, never loads the tables. A miss loads them (in a worker
thread where the caller can wait for one) and counts only what changed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from toolkeeper import jsonwire

if TYPE_CHECKING:
    from quicktok import Tokenizer

ENCODING = "o200k_base"
ESTIMATE = f"estimated tokens ({ENCODING})"
# Distinct entries remembered; a catalog of 20,000 tools fits, and a rebuild reuses them.
_REMEMBERED = 200_000
# One remembered count on disk: the entry's digest and its count. A file grown past the limit
# (about 400,000 counts) is started again.
_RECORD = struct.Struct("<16sI")
_MAX_FILE_BYTES = 8 * 1024 * 1024

logger = logging.getLogger(__name__)
_lock = threading.Lock()
_encoder: Tokenizer | None = None
_counted: dict[bytes, int] = {}
_file_read = False


def counts_file() -> Path:
    """Where counts are remembered between processes (`TOOLKEEPER_TOKEN_COUNTS` moves it)."""
    moved = os.environ.get("TOOLKEEPER_TOKEN_COUNTS")
    if moved:
        return Path(moved)
    return Path(platformdirs.user_cache_dir("toolkeeper")) / f"token-counts-{ENCODING}-v1.bin"


def load() -> Tokenizer:
    """The encoder, loaded on first use (safe from any thread)."""
    global _encoder
    if _encoder is None:
        with _lock:
            if _encoder is None:
                import quicktok

                _encoder = quicktok.get_encoding(ENCODING)
    return _encoder


def loaded() -> bool:
    """Whether the tables are in memory: counting then never waits for them."""
    return _encoder is not None


def count_text(text: str) -> int:
    return int(load().count(text))


def tokens_of(entry: Mapping[str, Any]) -> int:
    """The estimated tokens of one `tools/list` entry as a client receives it."""
    wire = jsonwire.dumps(entry)
    digest = hashlib.blake2b(wire, digest_size=16).digest()
    known = _counted.get(digest)
    if known is None and not _file_read:
        _read_file()
        known = _counted.get(digest)
    if known is None:
        known = int(load().count(wire.decode("utf-8", "replace")))
        if len(_counted) >= _REMEMBERED:
            _counted.clear()
        _counted[digest] = known
        _write(digest, known)
    return known


def _read_file() -> None:
    """The counts other processes (and earlier runs) remembered, once per process. A file that
    cannot be read, or holds a torn last record, costs a count, never a wrong one: each record
    is whole or skipped."""
    global _file_read
    with _lock:
        if _file_read:
            return
        _file_read = True
        try:
            data = counts_file().read_bytes()
        except OSError:
            return
        whole = len(data) - len(data) % _RECORD.size
        for digest, count in _RECORD.iter_unpack(data[:whole]):
            _counted.setdefault(digest, count)


def _write(digest: bytes, count: int) -> None:
    """Append one count for the next process. One write of one record to a file opened to
    append, so records of processes counting at once never interleave within a record."""
    path = counts_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.fstat(descriptor).st_size > _MAX_FILE_BYTES:
                os.ftruncate(descriptor, 0)
            os.write(descriptor, _RECORD.pack(digest, count))
        finally:
            os.close(descriptor)
    except OSError as exc:  # remembered in memory all the same
        logger.debug("cannot remember a token count in %s: %s", path, exc)


def total_of(entries: Iterable[Mapping[str, Any]]) -> int:
    return sum(tokens_of(entry) for entry in entries)


def short(tokens: int) -> str:
    """`~840 tokens`, `~3.1k tokens`, `~1.2M tokens`: a figure a person reads at a glance."""
    if tokens < 1000:
        figure = str(tokens)
    elif tokens < 1_000_000:
        figure = f"{tokens / 1000:.1f}".removesuffix(".0") + "k"
    else:
        figure = f"{tokens / 1_000_000:.1f}".removesuffix(".0") + "M"
    return f"~{figure} tokens"
