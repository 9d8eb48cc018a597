"""The store's files are their owner's alone, like the audit key: a new SQLite store, its -wal and
-shm files and a backup are 0600 whatever the umask, and an existing store others could read is
tightened, with a warning naming it."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from toolkeeper.services.backup import BackupService
from toolkeeper.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _generous_umask() -> Iterator[None]:
    """The common umask lets others read what a process creates; the store must not rely on it."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


def companions(db: Path) -> list[Path]:
    return [db.with_name(db.name + suffix) for suffix in ("-wal", "-shm")]


async def test_a_new_store_and_its_wal_and_shm_are_0600(tmp_path: Path) -> None:
    db = tmp_path / "home" / "toolkeeper.db"
    async with await Store(f"sqlite:///{db}").open() as store:
        async with store.write() as conn:
            await conn.execute(text("SELECT 1"))
        wal, shm = companions(db)
        assert wal.exists() and shm.exists()  # WAL mode: both are there while the store is open
        assert [mode(db), mode(wal), mode(shm)] == [oct(0o600)] * 3


async def test_an_existing_store_others_could_read_is_tightened_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "toolkeeper.db"
    async with await Store(f"sqlite:///{db}").open():
        pass
    db.chmod(0o644)
    with sqlite3.connect(db) as conn:  # an old gateway's log, left readable beside it
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS scratch (x)")
        wal = companions(db)[0]
        wal.chmod(0o644)
        with caplog.at_level(logging.WARNING, logger="toolkeeper.store.db"):
            async with await Store(f"sqlite:///{db}").open():
                assert [mode(db), mode(wal)] == [oct(0o600)] * 2
    warned = [r.getMessage() for r in caplog.records if "could be used by other users" in r.getMessage()]
    assert any(f"{db} could be used by other users (mode 644)" in line for line in warned)
    assert any(f"{wal} could be used by other users (mode 644)" in line for line in warned)


async def test_a_backup_of_the_store_is_0600(tmp_path: Path) -> None:
    db = tmp_path / "toolkeeper.db"
    backup = tmp_path / "backup.db"
    async with await Store(f"sqlite:///{db}").open() as store:
        await BackupService(store).backup(backup)
    assert mode(backup) == oct(0o600)
