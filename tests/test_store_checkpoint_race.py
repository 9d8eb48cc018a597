"""A store whose write-ahead log is folded into the file (the checkpointer's thread) while other
commits check the file's identity: the check must never take the file, half-written by the fold,
for another program's, which would refuse the write ("nothing was saved") for nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit import a_record

from toolkeeper.store import Store
from toolkeeper.store import db as store_db
from toolkeeper.store.audit.writer import AuditWriter

pytestmark = pytest.mark.anyio


async def test_commits_during_checkpoints_keep_the_file_as_the_store_opened_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_db, "CHECKPOINT_SECONDS", 0.0)  # a fold after every commit
    async with Store(f"sqlite:///{tmp_path / 'busy.db'}") as store:
        writer = AuditWriter(store, 30, home=tmp_path, batch_size=10)
        for _ in range(300):
            for _ in range(10):
                writer.add(a_record())
            assert await writer.flush() is True, "a write was refused"
            # The gateway's own writes check the file too, on the loop's thread.
            async with store.write(bump_revision=False):
                pass
        await writer.stop()
