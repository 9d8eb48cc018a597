"""One audit chain, several writers: gateway processes of one store (replicas), each serving its
own clients over HTTP, append to one chain that `toolkeeper audit verify` proves whole, and each
record names the replica that made it, under its MAC."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path

import anyio
import pytest
from conftest import (
    MODES,
    controllable,
    free_port,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)
from mcp import Client
from test_audit_chain import (
    EXIT_BROKEN,
    EXIT_WHOLE,
    POSTGRES,
    Place,
    append,
    call_row,
    place,  # noqa: F401 - the fixture: SQLite and PostgreSQL
    toolkeeper,
    verify,
)

from tests.postgres import drop_schema
from toolkeeper.store import Store
from toolkeeper.store.audit import append as audit_append
from toolkeeper.store.audit import key as audit_key

pytestmark = pytest.mark.anyio

REPLICAS = ("a", "b", "c")
CALLS = 6  # per client; each replica serves a client of each era


@pytest.fixture(params=["postgresql", "sqlite"])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Place]:
    """One store for every replica, with the configuration file and key they share."""
    home = Path(os.environ["TOOLKEEPER_HOME"])
    schema: str | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{home / 'toolkeeper.db'}"
    else:
        schema = f"tk_replicas_{uuid.uuid4().hex[:12]}"
        url = f"{POSTGRES}?schema={schema}"
    config = write_config(tmp_path, {"ctl": controllable()}, databaseUrl=url)
    async with Store(url):
        pass  # made, with its schema, before the replicas race to make it
    yield Place(url, config, home, audit_key.load_chain_key(home), schema)
    if schema is not None:
        await drop_schema(schema)


def replicas_serving(config: Path, stack: ExitStack) -> dict[str, str]:
    """A gateway per replica name, each on a port of its own: their MCP addresses, by name."""
    ports = {name: free_port() for name in REPLICAS}
    for name, port in ports.items():
        process = spawn_http_gateway(config, port, env={"TOOLKEEPER_REPLICA": name})
        stack.callback(stop, process)  # stopped gracefully: each writes its last records
    for port in ports.values():
        wait_port(port, timeout=60)
    return {name: f"http://127.0.0.1:{port}/mcp" for name, port in ports.items()}


async def calls_of_a_client(url: str, mode: str, said: str) -> None:
    async with Client(url, mode=mode) as client:
        for number in range(CALLS):
            if number % 2:  # not read-only: recorded as started before it runs, completed after
                result = await client.call_tool("ctl__sleep", {"seconds": 0.01})
                assert not result.is_error
                continue
            result = await client.call_tool("ctl__echo", {"text": f"{said}-{number}"})
            assert result.content[0].text == f"{said}-{number}"


def records(where: Place) -> list[dict[str, object]]:
    listed = toolkeeper(where, "--json", "-n", "1000")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


async def test_replicas_append_to_one_chain_and_name_themselves(shared: Place) -> None:
    with ExitStack() as stack:
        addresses = replicas_serving(shared.config, stack)
        async with anyio.create_task_group() as tg:
            for name, url in addresses.items():
                for mode in MODES:
                    tg.start_soon(calls_of_a_client, url, mode, f"{name}-{mode}")
    # Every replica stopped, each having written its records: one chain, whole.
    code, said = verify(shared)
    assert code == EXIT_WHOLE, said
    calls = [record for record in records(shared) if record["kind"] == "call"]
    assert Counter(record["replica"] for record in calls) == {name: CALLS * len(MODES) for name in REPLICAS}
    ahead = [record for record in calls if record["exposedName"] == "ctl__sleep"]
    assert len(ahead) == len(REPLICAS) * len(MODES) * (CALLS // 2)
    assert all(record["outcome"] == "ok" and record["seq"] is not None for record in ahead)
    shown = toolkeeper(shared, "-n", "1000").stdout
    assert "replica" in shown  # the column, since more than one replica wrote

    # A record's replica is under its MAC: naming another one breaks the chain at that record.
    moved = next(record for record in calls if record["replica"] == "a")
    await shared.sql("UPDATE audit_log SET replica = 'b' WHERE id = :id", id=moved["id"])
    code, said = verify(shared)
    assert code == EXIT_BROKEN and str(moved["id"]) in said, said


async def test_records_without_a_replica_verify_beside_those_naming_one(
    place: Place,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Records written before records named their replica (the first format) stay whole beside
    # the ones that name it, in the store and in an export; neither format can pass for the other.
    older = [call_row(number) for number in range(3)]
    newer = [call_row(number, replica="b") for number in range(3, 6)]
    await append(place, older)
    await append(place, newer[:2])
    async with Store(place.url) as store, store.write(bump_revision=False) as conn:
        await conn.run_sync(audit_append.append, place.key, newer[2:], replica="a")  # named already: kept
        await conn.run_sync(audit_append.append, place.key, [call_row(6)], replica="c")
    code, said = verify(place)
    assert code == EXIT_WHOLE, said
    named = {record["exposedName"]: record["replica"] for record in records(place)}
    assert [named[f"ctl__tool_{number}"] for number in range(7)] == [None, None, None, "b", "b", "b", "c"]
    export = tmp_path / "audit.jsonl"
    assert toolkeeper(place, "export", "--format", "jsonl", "--output", str(export)).returncode == 0
    assert json.loads(export.read_text().splitlines()[0])["version"] == 2
    code, said = verify(place, "--file", str(export))
    assert code == EXIT_WHOLE, said

    await place.sql("UPDATE audit_log SET replica = 'b' WHERE id = :id", id=older[1]["id"])
    code, said = verify(place)
    assert code == EXIT_BROKEN and older[1]["id"] in said, said
    await place.sql("UPDATE audit_log SET replica = NULL WHERE id = :id", id=older[1]["id"])
    await place.sql("UPDATE audit_log SET replica = NULL WHERE id = :id", id=newer[0]["id"])
    code, said = verify(place)
    assert code == EXIT_BROKEN and newer[0]["id"] in said, said
