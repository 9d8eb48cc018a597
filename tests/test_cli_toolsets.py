"""The CLI face of toolsets and notes, run as a real `toolkeeper` process on a real store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import controllable, write_config
from tests.test_toolsets_mcp import menu_client, names, two_servers

pytestmark = pytest.mark.anyio


def tk(config: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def test_cli_build_equip_notes_export_import(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    built = json.loads(
        tk(
            config,
            "toolsets",
            "build",
            "cli-kit",
            "ctl.echo",
            "notes__create_note",
            "-d",
            "from the CLI",
            "--equip",
            "--json",
        ).stdout
    )
    assert built["autoEquipped"] is True
    assert [t["namespacedName"] for t in built["toolset"]["tools"]] == ["ctl.echo", "notes.create_note"]

    tk(config, "notes", "add", "ctl.echo", "be-brief", "Keep echoes short.")
    again = tk(config, "notes", "add", "ctl.echo", "be-brief", "Different text")
    assert "already exists" in again.stderr
    notes = json.loads(tk(config, "notes", "list", "--json").stdout)
    assert notes["toolNotes"] == [
        {
            "toolRef": {"namespacedName": "ctl.echo", "refId": built["toolset"]["tools"][0]["refId"]},
            "notes": [{"name": "be-brief", "note": "Keep echoes short."}],
        }
    ]
    missing = tk(config, "notes", "add", "ctl.pid", "x", "y", ok=False)
    assert missing.returncode == 1 and 'not in the toolset "cli-kit"' in missing.stderr

    listed = json.loads(tk(config, "toolsets", "list", "--json").stdout)
    assert listed["equipped"] == "cli-kit"
    shown = json.loads(tk(config, "toolsets", "show", "cli-kit", "--json").stdout)
    assert [t["status"] for t in shown["tools"]] == ["ok", "ok"]
    assert "cli-kit (equipped)" in tk(config, "toolsets", "show", "cli-kit", "--offline").stdout

    exported = tmp_path / "cli-kit.json"
    tk(config, "toolsets", "export", "cli-kit", "-o", str(exported))
    assert json.loads(exported.read_text())["toolNotes"][0]["notes"][0]["name"] == "be-brief"
    tk(config, "toolsets", "import", str(exported), "--name", "cli-copy")
    clash = tk(config, "toolsets", "import", str(exported), ok=False)
    assert clash.returncode == 1 and "already exists" in clash.stderr
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x",\n  "tools": [}')
    bad = tk(config, "toolsets", "import", str(broken), ok=False)
    assert bad.returncode == 1 and f"{broken}:2:" in bad.stderr

    tk(config, "notes", "remove", "ctl.echo", "be-brief")
    assert json.loads(tk(config, "notes", "list", "--json").stdout)["toolNotes"] == []
    refused = tk(config, "toolsets", "delete", "cli-copy", ok=False)
    assert refused.returncode == 1 and "--yes" in refused.stderr
    tk(config, "toolsets", "delete", "cli-copy", "--yes")
    tk(config, "toolsets", "unequip")
    assert json.loads(tk(config, "toolsets", "list", "--json").stdout)["equipped"] is None
    unknown = tk(config, "toolsets", "equip", "nope", ok=False)
    assert (
        unknown.returncode == 1 and 'Toolset "nope" not found. Available toolsets: cli-kit' in unknown.stderr
    )


def test_cli_repin_after_a_schema_change(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "pin", "ctl.echo")
    changed = write_config(tmp_path, {"ctl": controllable(server_args={"echo-variant": "loud"})})
    shown = json.loads(tk(changed, "toolsets", "show", "pin", "--json").stdout)
    assert shown["tools"][0]["status"] == "changed"
    assert "toolsets repin pin" in tk(changed, "toolsets", "show", "pin").stderr
    assert "Re-pinned 1 tool(s) in pin: ctl.echo" in tk(changed, "toolsets", "repin", "pin").stdout
    assert json.loads(tk(changed, "toolsets", "show", "pin", "--json").stdout)["tools"][0]["status"] == "ok"


def test_import_hypertool_config(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    hypertool = tmp_path / "config.json"
    hypertool.write_text(
        json.dumps(
            {
                "toolsets": {
                    "dev-essentials": {
                        "name": "dev-essentials",
                        "description": "From hypertool",
                        "version": "1.0.0",
                        "createdAt": "2025-08-20T10:15:30.123Z",
                        "tools": [
                            {"namespacedName": "ctl.echo"},
                            {"namespacedName": "notes.create_note", "refId": "3f1c" * 16},
                            {"refId": "a94b" * 16},
                        ],
                        "toolNotes": [
                            {
                                "toolRef": {"namespacedName": "ctl.echo", "refId": "a94b" * 16},
                                "notes": [{"name": "usage-tips", "note": "Run before committing"}],
                            }
                        ],
                        "lastModified": "2025-08-20T10:20:01.000Z",
                    },
                    "Bad Name": {"name": "Bad Name", "tools": [{"namespacedName": "ctl.echo"}]},
                },
                "version": "1.0.0",
                "lastEquippedToolset": "dev-essentials",
                "mcpConfigPath": "/Users/me/.claude/mcp.json",
            }
        )
    )
    result = json.loads(tk(config, "import-hypertool", str(hypertool), "--json").stdout)
    assert result["imported"] == ["dev-essentials"] and result["equipped"] == "dev-essentials"
    assert result["skipped"][0]["name"] == "Bad Name"
    assert any("refId" in w for w in result["warnings"])
    shown = json.loads(tk(config, "toolsets", "show", "dev-essentials", "--json").stdout)
    assert [(t["namespacedName"], t["status"]) for t in shown["tools"]] == [
        ("ctl.echo", "ok"),
        ("notes.create_note", "ok"),
    ]
    assert shown["toolNotes"][0]["notes"] == [{"name": "usage-tips", "note": "Run before committing"}]
    assert shown["createdAt"] == "2025-08-20T10:15:30.123000Z"
    again = json.loads(tk(config, "import-hypertool", str(hypertool), "--json").stdout)
    assert again["imported"] == [] and "exists" in again["skipped"][-1]["reason"]
    not_hypertool = tmp_path / "other.json"
    not_hypertool.write_text('{"mcpServers": {}}')
    wrong = tk(config, "import-hypertool", str(not_hypertool), ok=False)
    assert wrong.returncode == 1 and "not a hypertool config.json" in wrong.stderr


async def test_a_running_gateway_follows_the_cli(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    tk(config, "toolsets", "build", "from-cli", "ctl.echo")
    async with menu_client(config, "legacy") as (client, changes):
        assert "build-toolset" in await names(client)  # nothing equipped: configuration mode
        before = changes.count
        tk(config, "toolsets", "equip", "from-cli")
        await changes.after(before)
        # Equipping, however it is reached, returns the gateway to normal mode.
        assert await names(client) == ["ctl__echo", "enter-configuration-mode"]
        before = changes.count
        tk(config, "notes", "add", "ctl.echo", "from-cli", "Added while the gateway ran.")
        await changes.after(before)
        echo = next(t for t in (await client.list_tools()).tools if t.name == "ctl__echo")
        assert echo.description.endswith("• **from-cli**: Added while the gateway ran.")


def test_store_errors_exit_with_the_file_named(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"ctl": controllable()}, databaseUrl="postgresql://postgres@127.0.0.1:1/test"
    )
    done = tk(config, "toolsets", "list", ok=False)
    assert done.returncode == 2 and "127.0.0.1:1/test" in done.stderr and "Traceback" not in done.stderr
