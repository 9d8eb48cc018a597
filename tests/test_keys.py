"""Client keys: the service and its key ring on a real SQLite file and the real PostgreSQL server,
`toolkeeper keys` as a person runs it, migration 0006 over a store with data, and keys in backups."""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import controllable, write_config
from sqlalchemy import MetaData, select, text
from test_cli_toolsets import tk
from test_store import POSTGRES, store_url  # noqa: F401 - the fixture: SQLite and PostgreSQL

from tests.postgres import drop_schema
from toolkeeper.catalog import ServerTools, build_catalog
from toolkeeper.config.model import Config, GatewaySettings, ServerConfig
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.audit import AuditService, parse_since
from toolkeeper.services.durations import parse_duration
from toolkeeper.services.keys import PREFIX_LENGTH, TOKEN_LENGTH, ClientKey, KeyRing, KeyService
from toolkeeper.services.toolsets import ToolsetService
from toolkeeper.store import Store
from toolkeeper.store.migrations import SCHEMA_HEAD

pytestmark = pytest.mark.anyio

CONFIG = Config(
    None,
    tuple(ServerConfig(name=name, transport="stdio", command="true") for name in ("files", "notes")),
    GatewaySettings(),
    skipped={"broken": "no command"},
    disabled=("resting",),
)


async def with_toolset(store: Store, name: str = "dev") -> None:
    catalog = build_catalog(
        [ServerTools("ctl", "ctl", True, [{"name": "echo", "inputSchema": {"type": "object"}}])]
    )
    await ToolsetService(store, lambda: catalog).build(name, ["ctl.echo"], by_person=True)


async def everything_stored(store: Store) -> str:
    """Every row of every table, as text: what anyone who can read the store can read."""

    def tables(sync_conn: Any) -> list[Any]:
        found = MetaData()
        found.reflect(sync_conn)
        return list(found.sorted_tables)

    async with store.read() as conn:
        rows = [(await conn.execute(select(table))).all() for table in await conn.run_sync(tables)]
    return repr(rows)


# -- the service ---------------------------------------------------------------------------


async def test_keys_are_made_listed_and_revoked_and_the_store_keeps_no_token(
    store_url: str,  # noqa: F811
) -> None:
    async with Store(store_url) as store:
        await with_toolset(store)
        keys = KeyService(store, CONFIG)
        start = await store.revision()
        alice = await keys.create("alice")
        assert alice.token.startswith("tk_") and len(alice.token) == TOKEN_LENGTH == 46
        assert alice.key.prefix == alice.token[:PREFIX_LENGTH] and len(alice.key.prefix) == 11
        assert (alice.key.toolsets, alice.key.servers, alice.key.admin) == ((), (), False)
        assert alice.key.expires_at is None and alice.key.last_used_at is None
        # What people see of a key never holds its token or its digest.
        assert alice.token not in repr(alice) and alice.key.token_sha256 not in repr(alice.key)
        bob = await keys.create(
            "bob@ci.example",
            toolsets=["dev", "dev"],
            servers=["files", "resting"],
            admin=True,
            expires="30d",
        )
        assert bob.key.toolsets == ("dev",) and bob.key.servers == ("files", "resting") and bob.key.admin
        assert bob.key.expires_at == bob.key.created_at + timedelta(days=30)
        assert await store.revision() == start + 2  # running gateways reload their key rings

        listed = await keys.list()
        assert [key.name for key in listed] == ["alice", "bob@ci.example"]
        assert (
            listed[1] == bob.key and listed[1].token_sha256 == hashlib.sha256(bob.token.encode()).hexdigest()
        )
        stored = await everything_stored(store)
        assert alice.key.prefix in stored and alice.key.token_sha256 in stored  # the right rows are read
        assert alice.token not in stored and bob.token not in stored

        revoked = await keys.revoke("alice")
        assert revoked == alice.key and [key.name for key in await keys.list()] == ["bob@ci.example"]
        assert await store.revision() == start + 3
        with pytest.raises(ServiceError) as unknown:
            await keys.revoke("alice")
        assert unknown.value.kind is ErrorKind.NOT_FOUND and "'alice'" in str(unknown.value)
        assert await store.revision() == start + 3


async def test_a_refused_key_writes_nothing(store_url: str) -> None:  # noqa: F811
    async with Store(store_url) as store:
        await with_toolset(store)
        keys = KeyService(store, CONFIG)
        await keys.create("alice")
        before = (await store.revision(), await keys.list())
        refusals: list[tuple[dict[str, Any], ErrorKind, tuple[str, ...]]] = [
            ({"name": "alice"}, ErrorKind.CONFLICT, ("'alice' exists", "revoke it first")),
            ({"name": "carol", "toolsets": ["dev", "ops"]}, ErrorKind.NOT_FOUND, ("'ops'", "toolsets: dev")),
            (
                {"name": "carol", "servers": ["files", "mail"]},
                ErrorKind.NOT_FOUND,
                ("'mail'", "configured servers: broken, files, notes, resting"),
            ),
            ({"name": "carol", "expires": "next week"}, ErrorKind.INVALID, ("'next week'", "30s, 15m")),
            ({"name": "carol", "expires": "0d"}, ErrorKind.INVALID, ("'0d'",)),
            ({"name": "carol", "expires": "9" * 30 + "w"}, ErrorKind.INVALID, ("expires",)),
            ({"name": "local"}, ErrorKind.INVALID, ("'local'", "local user")),
            ({"name": "Anonymous"}, ErrorKind.INVALID, ("'Anonymous'", "anonymous")),
            ({"name": "oauth:someone"}, ErrorKind.INVALID, ("'oauth:'", "OAuth")),
            ({"name": ""}, ErrorKind.INVALID, ("1 to 100",)),
            ({"name": "a b"}, ErrorKind.INVALID, ("'a b'", "letters, digits")),
            ({"name": "x" * 101}, ErrorKind.INVALID, ("1 to 100",)),
            ({"name": "ünïcode"}, ErrorKind.INVALID, ("letters, digits",)),
        ]
        for arguments, kind, words in refusals:
            with pytest.raises(ServiceError) as refused:
                await keys.create(**arguments)
            message = str(refused.value)
            assert refused.value.kind is kind, (arguments, message)
            assert all(word in message for word in words), (arguments, message)
            assert "\n" not in message
        assert (await store.revision(), await keys.list()) == before
        # Names at the edges of the rule are taken.
        for name in ("x" * 100, "a", "ci-bot_1.prod@example.org", "localhost", "oauth"):
            await keys.create(name)


async def test_without_a_configuration_servers_are_not_checked(tmp_path: Path) -> None:
    async with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        created = await KeyService(store).create("later", servers=["not-configured-yet"])
        assert created.key.servers == ("not-configured-yet",)


async def test_the_key_ring_lets_in_only_a_whole_unexpired_current_token(
    store_url: str,  # noqa: F811
) -> None:
    async with Store(store_url) as store:
        keys = KeyService(store, CONFIG)
        alice = await keys.create("alice", servers=["files"])
        brief = await keys.create("brief", expires="1h")
        ring = await keys.ring()
        now = datetime.now(UTC)
        assert len(ring) == 2

        found = ring.verify(alice.token, now)
        assert found is not None and (found.name, found.servers) == ("alice", ("files",))
        assert ring.verify(brief.token, now + timedelta(minutes=59)) == brief.key
        assert ring.verify(brief.token, now + timedelta(minutes=61)) is None  # expired
        assert ring.verify(brief.token, brief.key.created_at + timedelta(hours=1)) is None

        other_tail = alice.token[:PREFIX_LENGTH] + secrets.token_urlsafe(32)
        last_changed = alice.token[:-1] + ("A" if alice.token[-1] != "A" else "B")
        for wrong in (
            other_tail,  # a known prefix, the rest guessed
            last_changed,
            brief.token[:PREFIX_LENGTH] + alice.token[PREFIX_LENGTH:],  # two keys spliced
            "",
            "tk_",
            alice.token[:-1],
            alice.token + "x",
            "Bearer " + alice.token,
            "xx_" + alice.token[3:],
            alice.token[:-1] + "é",  # the right length, not ASCII
            alice.token[:-1] + "\ud800",  # a lone surrogate cannot even be encoded
            "tk_" + secrets.token_urlsafe(32),  # a well-formed token nobody made
        ):
            assert ring.verify(wrong, now) is None, wrong

        # The ring is a snapshot: revoking changes the store, the next ring, not this one.
        await keys.revoke("alice")
        assert ring.verify(alice.token, now) is not None
        fresh = await keys.ring()
        assert fresh.verify(alice.token, now) is None and len(fresh) == 1
        # Checking a token reads nothing: the ring works with its store closed.
        await store.close()
        assert fresh.verify(brief.token, now) == brief.key
    assert len(KeyRing.empty()) == 0 and KeyRing.empty().verify(alice.token, now) is None


async def test_last_use_is_recorded_without_making_gateways_reload(store_url: str) -> None:  # noqa: F811
    async with Store(store_url) as store:
        keys = KeyService(store, CONFIG)
        await keys.create("alice")
        await keys.create("bob")
        revision = await store.revision()
        used = datetime(2026, 11, 25, 12, 0, 0, 123456, tzinfo=UTC)
        # Any zone is taken; a key revoked meanwhile is passed over.
        paris = timezone(timedelta(hours=1))
        await keys.touch({"alice": used, "bob": used.astimezone(paris), "gone": used})
        assert [key.last_used_at for key in await keys.list()] == [used, used]
        # Another gateway's older report does not move a later use back.
        await keys.touch({"alice": used - timedelta(minutes=5), "bob": used + timedelta(minutes=5)})
        assert [key.last_used_at for key in await keys.list()] == [used, used + timedelta(minutes=5)]
        await keys.touch({})
        assert await store.revision() == revision


def test_one_duration_reader_for_since_and_expires() -> None:
    assert parse_duration("90m") == timedelta(minutes=90)
    assert parse_duration(" 2W ") == timedelta(weeks=2)
    assert parse_duration("12 h") == timedelta(hours=12)
    for not_one in ("", "30", "d", "1.5h", "-1d", "30 days", "9" * 5000 + "d", "9" * 30 + "w"):
        assert parse_duration(not_one) is None, not_one
    # A `since` further back than the calendar goes is every record, not a crash.
    assert parse_since("999999999d") == datetime.min.replace(tzinfo=UTC)


# -- the schema ----------------------------------------------------------------------------


async def test_the_migrated_schema_is_the_declared_one(store_url: str) -> None:  # noqa: F811
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from toolkeeper.store.tables import metadata

    def differences(sync_conn: Any) -> Any:
        context = MigrationContext.configure(sync_conn, opts={"compare_type": True})
        return compare_metadata(context, metadata)

    async with Store(store_url) as store, store.read() as conn:
        assert await conn.run_sync(differences) == []


# The store as the release before migration 0006 left it, in plain SQL: a toolset, a call that
# waited for approval, and an audit record.
ROWS_OF_0005 = (
    "INSERT INTO toolsets (id, name, description, created_at, updated_at) "
    "VALUES (1, 'kept', '', '2026-11-20 10:00:00+00', '2026-11-20 10:00:00+00')",
    "INSERT INTO pending_approvals (id, created_at, expires_at, status, client, exposed_name, "
    "namespaced_name, ref_id, call_hash, question, answer, decided_by, decided_at, channel) VALUES "
    "('call1', '2026-11-20 10:00:00+00', '2026-11-20 10:05:00+00', 'approved', "
    "'{\"name\": \"c\"}', 'ctl__pid', 'ctl.pid', 'ref', 'hash', '{}', 'once', 'person via cli', "
    "'2026-11-20 10:01:00+00', 'cli')",
    "INSERT INTO audit_log (id, at, client_name, exposed_name, server, tool, arguments_sha256, "
    "decision, decided_by, outcome, latency_ms) VALUES ('rec1', '2026-11-20 10:01:01+00', 'c', "
    "'ctl__pid', 'ctl', 'pid', 'digest', 'allow', 'person via cli', 'ok', 7)",
)


async def test_a_store_of_0005_keeps_its_data_and_gains_keys(store_url: str) -> None:  # noqa: F811
    old = await Store(store_url).open(up_to="0005")
    async with old, old.write() as conn:
        for statement in ROWS_OF_0005:
            await conn.execute(text(statement))
    async with Store(store_url) as store:
        async with store.read() as conn:
            version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
            toolsets = (await conn.execute(text("SELECT name FROM toolsets"))).scalars().all()
            calls = (
                await conn.execute(text("SELECT id, decided_by, channel, principal FROM pending_approvals"))
            ).all()
        assert version == SCHEMA_HEAD and toolsets == ["kept"]
        assert calls == [("call1", "person via cli", "cli", None)]
        (record,) = await AuditService(store).query()
        assert (record["id"], record["decidedBy"], record["latencyMs"]) == ("rec1", "person via cli", 7)
        assert (record["principal"], record["principalClient"]) == (None, None)
        keys = KeyService(store, CONFIG)
        assert await keys.list() == []
        made = await keys.create("alice", toolsets=["kept"])
        assert (await keys.ring()).verify(made.token, datetime.now(UTC)) == made.key


# -- the command ---------------------------------------------------------------------------


def home_store(tmp_path: Path) -> Path:
    return tmp_path / "toolkeeper-home" / "toolkeeper.db"


def token_of(created: str) -> str:
    """The token line of `keys create`'s plain output."""
    (token,) = [line for line in created.splitlines() if line.startswith("tk_")]
    return token


async def test_the_keys_command_shows_a_token_once_and_never_stores_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"files": controllable(), "notes": controllable()})
    async with Store(f"sqlite:///{home_store(tmp_path)}") as store:
        await with_toolset(store)

    made = tk(config, "keys", "create", "alice", "--toolset", "dev", "--server", "files", "--expires", "2w")
    token = token_of(made.stdout)
    assert len(token) == TOKEN_LENGTH and token not in made.stderr
    first, *rest = made.stdout.splitlines()
    assert first.startswith("Made key alice (toolsets dev; servers files, until ") and first.endswith(
        "). Its token:"
    )
    assert "shown only this once" in " ".join(rest)
    as_json = json.loads(tk(config, "keys", "create", "ci", "--admin", "--json").stdout)
    assert list(as_json) == ["name", "token"] and as_json["name"] == "ci"
    assert as_json["token"].startswith("tk_") and len(as_json["token"]) == TOKEN_LENGTH
    tk(config, "keys", "create", "reader")

    # The file (the command folded its log in as it closed the store) holds the key, not the token.
    files = [home_store(tmp_path), Path(f"{home_store(tmp_path)}-wal")]
    stored = b"".join(path.read_bytes() for path in files if path.exists())
    assert token[:PREFIX_LENGTH].encode() in stored
    assert hashlib.sha256(token.encode()).hexdigest().encode() in stored
    assert token.encode() not in stored and as_json["token"].encode() not in stored

    with sqlite3.connect(home_store(tmp_path)) as db:  # one key expired an hour ago
        db.execute("UPDATE client_keys SET expires_at = ? WHERE name = 'reader'", (_stored_time(-1),))
    listed = json.loads(tk(config, "keys", "list", "--json").stdout)
    assert [(key["name"], key["expired"]) for key in listed] == [
        ("alice", False),
        ("ci", False),
        ("reader", True),
    ]
    assert all(not {"token", "tokenSha256"} & set(key) for key in listed) and token not in json.dumps(listed)
    assert listed[0]["toolsets"] == ["dev"] and listed[0]["servers"] == ["files"]
    table = tk(config, "keys", "list").stdout
    rows = {line.split("│")[1].strip(): line for line in table.splitlines() if line.count("│") > 2}
    assert token[:PREFIX_LENGTH] in rows["alice"] and "toolsets dev; servers files" in rows["alice"]
    assert "admin" in rows["ci"] and "never" in rows["ci"]
    assert "all tools" in rows["reader"] and "(expired)" in rows["reader"]
    assert token not in table

    revoked = tk(config, "keys", "revoke", "alice")
    assert "Revoked key alice" in revoked.stdout
    assert [key["name"] for key in json.loads(tk(config, "keys", "list", "--json").stdout)] == [
        "ci",
        "reader",
    ]


def _stored_time(hours_from_now: float) -> str:
    """A time as SQLAlchemy writes one into a SQLite store (UTC, no zone)."""
    moment = datetime.now(UTC) + timedelta(hours=hours_from_now)
    return moment.replace(tzinfo=None).isoformat(sep=" ")


def test_the_keys_command_refuses_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"files": controllable(), "notes": controllable()})
    tk(config, "keys", "create", "alice")
    before = tk(config, "keys", "list", "--json").stdout
    for args, words in (
        (("create", "alice"), "A key named 'alice' exists: revoke it first or pick another name."),
        (("create", "bob", "--server", "mail"), "The configured servers: files, notes."),
        (("create", "bob", "--toolset", "ops"), "No toolset is named 'ops'"),
        (("create", "local"), "'local' cannot name a key"),
        (("create", "bob", "--expires", "soon"), "'soon' is not a duration"),
        (
            ("revoke", "nobody"),
            "No client key is named 'nobody', so none was revoked. `toolkeeper keys list`",
        ),
    ):
        refused = tk(config, "keys", *args, ok=False)
        assert refused.returncode == 1, (args, refused.stderr)
        (line,) = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert words in line, (args, line)
        assert "Traceback" not in refused.stderr and not refused.stdout
    assert tk(config, "keys", "list", "--json").stdout == before
    assert json.loads(before)[0]["name"] == "alice"


# -- keys in backups -----------------------------------------------------------------------


async def verifies(url: str, token: str) -> ClientKey | None:
    async with Store(url) as store:
        return (await KeyService(store).ring()).verify(token, datetime.now(UTC))


async def test_a_backup_keeps_the_keys_and_a_restore_brings_them_back(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"files": controllable()})
    token = token_of(tk(config, "keys", "create", "alice", "--server", "files").stdout)
    backup = tmp_path / "backup.db"
    tk(config, "backup", str(backup))
    assert token.encode() not in backup.read_bytes()
    tk(config, "keys", "revoke", "alice")
    url = f"sqlite:///{home_store(tmp_path)}"
    assert await verifies(url, token) is None
    restored = json.loads(tk(config, "restore", str(backup), "--force", "--json").stdout)
    assert restored["rows"]["client_keys"] == 1
    back = await verifies(url, token)
    assert back is not None and (back.name, back.servers) == ("alice", ("files",))


async def test_a_postgresql_dump_keeps_the_keys_digests_into_sqlite(tmp_path: Path) -> None:
    schema = f"tk_keys_{secrets.token_hex(4)}"
    config = write_config(tmp_path, {"files": controllable()}, databaseUrl=f"{POSTGRES}?schema={schema}")
    try:
        token = token_of(tk(config, "keys", "create", "alice", "--admin", "--expires", "30d").stdout)
        dump = tmp_path / "pg.json"
        tk(config, "backup", str(dump))
        assert token not in dump.read_text()
        (row,) = json.loads(dump.read_text())["tables"]["client_keys"]
        assert row["token_sha256"] == hashlib.sha256(token.encode()).hexdigest() and row["admin"] is True

        lite = tmp_path / "lite"
        lite.mkdir()
        url = f"sqlite:///{lite / 'tk.db'}"
        tk(write_config(lite, {"files": controllable()}, databaseUrl=url), "restore", str(dump))
        back = await verifies(url, token)
        assert back is not None and back.admin and back.expires_at is not None
        assert back.expires_at.tzinfo is not None
    finally:
        await drop_schema(schema)
