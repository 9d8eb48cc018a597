"""Signed-in accounts in the store, sealed with signin.key: on a real SQLite file and the real
PostgreSQL server; never in clear in the store or a backup made by the real `toolkeeper backup`;
a store restored without its key reads as needing a sign-in, logged, never an exception."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import controllable, drop_postgres_schema, write_config
from sqlalchemy import text, update

from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignedIn
from toolkeeper.store import Store, StoreError
from toolkeeper.store.migrations import SCHEMA_HEAD
from toolkeeper.store.signin_key import KEY_FILE
from toolkeeper.store.signin_tokens import StoreTokenShelf, accounts
from toolkeeper.store.tables import signin_tokens

pytestmark = pytest.mark.anyio
POSTGRES = os.environ.get("TOOLKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
SHELF_LOG = "toolkeeper.store.signin_tokens"

ACCESS = "at-7Hq2ZxK9-visible-only-if-in-clear"
REFRESH = "rt-Pw4mV8sL-visible-only-if-in-clear"
CLIENT_SECRET = "cs-3nBv6Yt1-visible-only-if-in-clear"
SECRETS = (ACCESS, REFRESH, CLIENT_SECRET)


def tk(config: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def account(access: str = ACCESS, **changes: Any) -> SignedIn:
    values: dict[str, Any] = {
        "access_token": access,
        "refresh_token": REFRESH,
        "expires_at": 1_900_000_000.5,
        "scope": "read write",
        "subject": "alice@tracker.example",
        "issuer": "https://auth.tracker.example",
        "client_info": {"client_id": "toolkeeper-client", "client_secret": CLIENT_SECRET},
        "registration": "preregistered",
        "signed_in_at": 1_800_000_000.0,
    }
    return SignedIn(**{**values, **changes})


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    schema = f"tk_signin_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES}?schema={schema}"
    await drop_postgres_schema(POSTGRES, schema)


async def test_save_load_forget_round_trip_each_write_bumping_the_revision(
    store_url: str, tmp_path: Path
) -> None:
    async with Store(store_url) as store:
        shelf = StoreTokenShelf(store, tmp_path / "home" / KEY_FILE)
        assert await shelf.load() == {}
        before = await store.revision()
        await shelf.save("tracker", SHARED_ACCOUNT, account())
        await shelf.save("tracker", "key:bob", account("bobs-token", subject="bob"))
        await shelf.save("wiki", SHARED_ACCOUNT, account("wiki-token", refresh_token=None, expires_at=None))
        assert await store.revision() == before + 3
        # Saved again: replaced, not added.
        await shelf.save("tracker", SHARED_ACCOUNT, account("renewed"))

        # Another process's shelf (another engine, the same key file) reads what was saved.
        async with Store(store_url) as other:
            loaded = await StoreTokenShelf(other, shelf.key_path).load()
        assert loaded == {
            ("tracker", SHARED_ACCOUNT): account("renewed"),
            ("tracker", "key:bob"): account("bobs-token", subject="bob"),
            ("wiki", SHARED_ACCOUNT): account("wiki-token", refresh_token=None, expires_at=None),
        }
        async with store.read() as conn:
            listed = await accounts(conn)
        assert [(a.server, a.account, a.subject, a.registration) for a in listed] == [
            ("tracker", "gateway", "alice@tracker.example", "preregistered"),
            ("tracker", "key:bob", "bob", "preregistered"),
            ("wiki", "gateway", "alice@tracker.example", "preregistered"),
        ]
        assert all(a.updated_at.tzinfo is not None for a in listed)

        revision = await store.revision()
        await shelf.forget("tracker", "key:bob")
        assert await store.revision() == revision + 1
        assert set(await shelf.load()) == {("tracker", SHARED_ACCOUNT), ("wiki", SHARED_ACCOUNT)}


async def test_the_key_is_made_at_the_first_save_for_its_owner_alone(tmp_path: Path) -> None:
    key_path = tmp_path / "home" / KEY_FILE
    old_umask = os.umask(0o022)
    try:
        async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
            shelf = StoreTokenShelf(store, key_path)
            await shelf.load()
            assert not key_path.exists()  # reading makes no key
            await shelf.save("tracker", SHARED_ACCOUNT, account())
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert len(key_path.read_bytes().strip()) == 44
    assert not [p.name for p in key_path.parent.iterdir() if p.name != KEY_FILE]  # no draft left


async def test_the_sqlite_file_holds_no_token_in_clear(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    async with Store(f"sqlite:///{db}") as store:
        await StoreTokenShelf(store, tmp_path / KEY_FILE).save("tracker", SHARED_ACCOUNT, account())
    raw = b"".join(path.read_bytes() for path in tmp_path.glob("store.db*"))
    # The file is the one written: what listings show is there in clear.
    assert b"alice@tracker.example" in raw and b"preregistered" in raw
    for secret in SECRETS:
        assert secret.encode() not in raw


async def test_a_store_restored_without_its_key_loads_nothing_and_says_so_once(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=SHELF_LOG)
    async with Store(store_url) as store:
        await StoreTokenShelf(store, tmp_path / "first" / KEY_FILE).save("tracker", SHARED_ACCOUNT, account())

        # No key at all in this home.
        missing = StoreTokenShelf(store, tmp_path / "second" / KEY_FILE)
        assert await missing.load() == {}
        # Another key: made by this home's first sign-in, to another server.
        await missing.save("wiki", SHARED_ACCOUNT, account("wiki-token"))
        assert set(await missing.load()) == {("wiki", SHARED_ACCOUNT)}
        assert set(await missing.load()) == {("wiki", SHARED_ACCOUNT)}

    said = [record.getMessage() for record in caplog.records if record.name == SHELF_LOG]
    assert said == [
        f"sign-in: the saved sign-in of tracker (account gateway) cannot be used: the sign-in key "
        f"{tmp_path / 'second' / KEY_FILE} is missing; sign in again (`toolkeeper login tracker`)",
        "sign-in: the saved sign-in of tracker (account gateway) cannot be used: it was signed in with "
        "another key; sign in again (`toolkeeper login tracker`)",
    ]
    assert not any(secret in caplog.text for secret in SECRETS)


async def test_a_sealed_value_copied_onto_another_account_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=SHELF_LOG)
    async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        shelf = StoreTokenShelf(store, tmp_path / KEY_FILE)
        await shelf.save("tracker", "key:alice", account())
        await shelf.save("tracker", "key:mallory", account("mallorys-token", subject="mallory"))
        async with store.write() as conn:
            alices = (
                await conn.execute(
                    text("SELECT sealed FROM signin_tokens WHERE account = 'key:alice'"),
                )
            ).scalar_one()
            await conn.execute(
                update(signin_tokens).where(signin_tokens.c.account == "key:mallory").values(sealed=alices)
            )
        assert set(await shelf.load()) == {("tracker", "key:alice")}
    assert "cannot be used: its tokens were saved for another server or account" in caplog.text


async def test_a_key_file_that_is_not_a_key_fails_the_save_not_the_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=SHELF_LOG)
    key_path = tmp_path / KEY_FILE
    async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        shelf = StoreTokenShelf(store, key_path)
        await shelf.save("tracker", SHARED_ACCOUNT, account())
        key_path.write_text("not a key\n")
        assert await StoreTokenShelf(store, key_path).load() == {}
        with pytest.raises(StoreError, match="is not a key toolkeeper made"):
            await StoreTokenShelf(store, key_path).save("wiki", SHARED_ACCOUNT, account())
    assert f"The sign-in key {key_path} is not a key toolkeeper made" in caplog.text


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_backup_holds_no_token_in_clear_nor_the_key_and_restored_elsewhere_needs_a_sign_in(
    tmp_path: Path, backend: str
) -> None:
    schema = f"tk_signin_backup_{uuid.uuid4().hex[:8]}"
    settings: dict[str, Any] = {}
    if backend == "postgresql":
        settings["databaseUrl"] = f"{POSTGRES}?schema={schema}"
    config = write_config(tmp_path, {"ctl": controllable()}, **settings)
    home = tmp_path / "toolkeeper-home"  # TOOLKEEPER_HOME of every test
    url = settings.get("databaseUrl", f"sqlite:///{home / 'toolkeeper.db'}")
    try:
        async with Store(url) as store:
            await StoreTokenShelf(store, home / KEY_FILE).save("tracker", SHARED_ACCOUNT, account())
        backup = tmp_path / "backup"
        tk(config, "backup", str(backup))
        raw = backup.read_bytes()
        assert b"alice@tracker.example" in raw  # the account's row is in the backup ...
        for secret in SECRETS:  # ... sealed
            assert secret.encode() not in raw
        assert (home / KEY_FILE).read_bytes().strip() not in raw

        # Restored into another home: the account is listed, and reads as needing a sign-in.
        other = tmp_path / "other"
        other.mkdir()
        fresh = write_config(other, {"ctl": controllable()}, databaseUrl=f"sqlite:///{other / 'tk.db'}")
        tk(fresh, "restore", str(backup))
        async with Store(f"sqlite:///{other / 'tk.db'}") as restored:
            assert await StoreTokenShelf(restored, other / KEY_FILE).load() == {}
            async with restored.read() as conn:
                assert [(a.server, a.subject) for a in await accounts(conn)] == [
                    ("tracker", "alice@tracker.example")
                ]
            # With the key brought along, the tokens come back.
            assert await StoreTokenShelf(restored, home / KEY_FILE).load() == {
                ("tracker", SHARED_ACCOUNT): account()
            }
    finally:
        if backend == "postgresql":
            await drop_postgres_schema(POSTGRES, schema)


async def test_a_store_at_0009_is_migrated_and_keeps_what_it_held(store_url: str, tmp_path: Path) -> None:
    async with await Store(store_url).open(up_to="0009") as old, old.write() as conn:
        await conn.execute(text("INSERT INTO gateway_state (key, value) VALUES ('equipped', 'kept')"))
    async with Store(store_url) as store:
        async with store.read() as conn:
            assert (
                await conn.execute(text("SELECT version_num FROM alembic_version"))
            ).scalar_one() == SCHEMA_HEAD
            assert (await conn.execute(text("SELECT value FROM gateway_state"))).scalar_one() == "kept"
            assert await accounts(conn) == []
        shelf = StoreTokenShelf(store, tmp_path / KEY_FILE)
        await shelf.save("tracker", SHARED_ACCOUNT, account())
        assert await shelf.load() == {("tracker", SHARED_ACCOUNT): account()}
