"""The audit fails closed for risky calls: a real gateway over stdio, a real downstream and a real
SQLite store whose chain was changed behind the gateway's back. A destructive call is refused
with an error naming the problem and the commands, and never reaches the server; read-only calls
go on, and the records they could not keep are counted by a gap record once a person repaired
the chain with `toolkeeper audit repair`, after which risky calls run again."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PY, ROOT, eventually, gateway_params, write_config
from mcp import Client
from test_audit_writer import GATED, store_file

pytestmark = pytest.mark.anyio


def audit(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkeeper", "audit", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"},
    )


def gaps(tmp_path: Path) -> list[str]:
    with sqlite3.connect(store_file(tmp_path)) as db:
        return [row[0] for row in db.execute("SELECT facts FROM audit_log WHERE kind = 'gap'")]


async def test_a_changed_chain_refuses_risky_calls_and_lets_read_only_ones_run(tmp_path: Path) -> None:
    entry = {"command": PY, "args": [GATED], "trust": "trusted", "confirm": "never"}
    config = write_config(tmp_path, {"gated": entry}, auditMaxWaiting=2)
    release = tmp_path / "release"
    release.touch()
    async with Client(gateway_params(config), mode="legacy") as client:
        assert not (await client.call_tool("gated__change", {"release": str(release)})).is_error
    with sqlite3.connect(store_file(tmp_path)) as db:  # one byte of the chain's head, changed
        db.execute(
            "UPDATE audit_chain SET mac = CASE WHEN mac LIKE 'f%' THEN 'e' ELSE 'f' END || substr(mac, 2)"
        )

    risky = tmp_path / "risky"
    async with Client(gateway_params(config), mode="legacy") as client:
        refused = await client.call_tool("gated__change", {"release": str(risky)})
        assert refused.is_error
        said = refused.content[0].text  # type: ignore[union-attr]
        assert "did not run 'gated__change'" in said and "audit record cannot be written" in said
        assert "does not match its newest record" in said
        assert "toolkeeper audit verify" in said and "toolkeeper audit repair" in said
        assert not Path(f"{risky}.arrived").exists()  # the server never received it
        for _ in range(4):  # read-only calls go on; their records wait, then the oldest go
            assert not (await client.call_tool("gated__look", {"release": str(release)})).is_error

        assert audit(config, "verify").returncode == 1
        repaired = audit(config, "repair", "--reason", "head edited in the test")
        assert repaired.returncode == 0, repaired.stderr
        # The gateway tries again within seconds: the waiting records go into the new segment,
        # after a gap record that counts those dropped meanwhile.
        await eventually(lambda: gaps(tmp_path), timeout=60)
        (facts,) = gaps(tmp_path)
        assert json.loads(facts)["dropped"] == 3  # five records waited, two are kept

        async def runs_again() -> bool:
            result = await client.call_tool("gated__change", {"release": str(release)})
            return not result.is_error

        await eventually(runs_again, timeout=30)
    listed = [json.loads(line) for line in audit(config, "--json").stdout.splitlines()]
    outcomes = [(r["exposedName"], r["outcome"]) for r in listed if r["kind"] == "call"]
    assert ("gated__change", "ok") in outcomes
    assert audit(config, "verify").returncode == 0


async def test_a_key_that_is_not_the_chains_refuses_risky_calls(tmp_path: Path) -> None:
    entry = {"command": PY, "args": [GATED], "trust": "trusted", "confirm": "never"}
    config = write_config(tmp_path, {"gated": entry})
    release = tmp_path / "release"
    release.touch()
    async with Client(gateway_params(config), mode="legacy") as client:
        assert not (await client.call_tool("gated__change", {"release": str(release)})).is_error
    other = write_config(
        tmp_path, {"gated": entry}, auditKey="another key, long enough to be a key: 0123456789"
    )
    risky = tmp_path / "risky"
    async with Client(gateway_params(other), mode="legacy") as client:
        refused = await client.call_tool("gated__change", {"release": str(risky)})
        said = refused.content[0].text  # type: ignore[union-attr]
        assert refused.is_error and "started with another key" in said and "toolkeeper audit verify" in said
        assert not Path(f"{risky}.arrived").exists()
        assert not (await client.call_tool("gated__look", {"release": str(release)})).is_error
