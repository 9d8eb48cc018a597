"""bench/replicas.py, tiny: two replicas on one PostgreSQL serve a few sessions of each era with no
error, the table shows both, and each job's schema is gone afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from conftest import ROOT
from test_store import POSTGRES

BENCH = ROOT / "bench" / "replicas.py"
SESSIONS, CALLS = 4, 3


@pytest.mark.anyio
async def test_a_tiny_run_serves_every_call_in_both_eras_and_leaves_no_schema(tmp_path: Path) -> None:
    out = tmp_path / "replicas.json"
    argv = [
        sys.executable, str(BENCH), "--sessions", str(SESSIONS), "--calls", str(CALLS), "--rounds", "1",
        "--replicas", "2", "--database", POSTGRES, "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600, cwd=ROOT)

    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"legacy ×2", "2026-07-28 ×2"}
    for [row] in results.values():
        assert (row["errors"], row["error_examples"]) == (0, [])
        assert row["calls"] == SESSIONS * CALLS
        assert len(row["rss_mib"]) == row["replicas"]
        assert 0 < row["p50_ms"] <= row["p99_ms"]
    table = [
        line for line in done.stdout.splitlines() if line.startswith("| legacy") or line.startswith("| 2026")
    ]
    assert len(table) == 2
    connection = await asyncpg.connect(POSTGRES)
    try:
        left = await connection.fetch(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ANY($1::text[])",
            [row["schema"] for [row] in results.values()],
        )
    finally:
        await connection.close()
    assert left == []
