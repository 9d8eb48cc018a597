"""The real `toolkeeper` command on bad configuration: clear message, exit 2; one bad entry only skips it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PY, controllable, write_config

CTL_TOOLS = [
    "echo",
    "add_tool",
    "set_hints",
    "set_resolution",
    "crash",
    "sleep",
    "progress",
    "mixed_content",
    "fail",
    "pid",
]


def clean_env() -> dict[str, str]:
    """The test process's environment without any TOOLKEEPER_* setting that could steer the run."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TOOLKEEPER_")}


def toolkeeper(command: str, config: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkeeper", command, "--config", str(config), "--json", "--wait", "10"],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- file-level problems: exit 2, the message on stderr, nothing on stdout ----------------------


def test_invalid_json_exits_2_naming_file_line_and_column(tmp_path):
    (tmp_path / "toolkeeper.json").write_text('{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}\n')
    result = toolkeeper("servers", "toolkeeper.json", tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("configuration error: ")
    flat = " ".join(result.stderr.split())
    assert "configuration error: toolkeeper.json:3:26: invalid JSON: Expecting property name" in flat
    assert "Traceback" not in result.stderr


def test_unknown_top_level_key_exits_2_naming_key_and_line(tmp_path):
    (tmp_path / "toolkeeper.json").write_text('{\n  "mcpServers": {},\n  "logLevel": "debug"\n}\n')
    result = toolkeeper("servers", "toolkeeper.json", tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    flat = " ".join(result.stderr.split())
    assert flat.startswith("configuration error: toolkeeper.json:3: unknown top-level key 'logLevel'.")
    assert "gateway settings go under 'toolkeeper'" in flat


def test_missing_file_exits_2(tmp_path):
    result = toolkeeper("servers", "missing.json", tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert " ".join(result.stderr.split()).startswith("configuration error: missing.json: no such file.")


def test_file_that_is_not_utf8_exits_2(tmp_path):
    (tmp_path / "latin1.json").write_bytes(b'{"mcpServers": {"caf\xe9": {"command": "x"}}}')
    result = toolkeeper("tools", "latin1.json", tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "configuration error: latin1.json: not UTF-8 text" in " ".join(result.stderr.split())


def test_bad_gateway_setting_exits_2(tmp_path):
    (tmp_path / "toolkeeper.json").write_text('{"mcpServers": {}, "toolkeeper": {"http": {"port": null}}}')
    result = toolkeeper("servers", "toolkeeper.json", tmp_path)
    assert result.returncode == 2
    assert "the HTTP port must be a whole number between 1 and 65535, got None." in " ".join(
        result.stderr.split()
    )


# --- one good server, bad entries, a disabled one -----------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mixed")
    marker = directory / "disabled-was-started"
    config = write_config(
        directory,
        {
            "ctl": controllable(),
            "broken": {"args": ["--no-command"]},
            "typo": {"type": ["stdio"], "command": PY},
            "off": {"command": PY, "args": ["-c", f"open({str(marker)!r}, 'w')"], "disabled": True},
        },
    )
    servers = toolkeeper("servers", config, directory)
    tools = toolkeeper("tools", config, directory)
    return config, marker, servers, tools


def test_servers_lists_the_good_one_ready_and_the_bad_ones_invalid(mixed):
    _, _, result, _ = mixed
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert list(rows) == ["ctl", "broken", "typo", "off"]
    ctl = rows["ctl"]
    assert (ctl["state"], ctl["transport"], ctl["tools"], ctl["trust"], ctl["prefix"], ctl["lastError"]) == (
        "ready",
        "stdio",
        len(CTL_TOOLS),
        "untrusted",
        "ctl",
        None,
    )
    assert rows["broken"] == {
        "name": "broken",
        "state": "invalid",
        "lastError": "neither 'command' (stdio) nor 'url' (http/sse) is given",
        "tools": 0,
    }
    assert rows["typo"] == {
        "name": "typo",
        "state": "invalid",
        "lastError": "'type' must be a string such as 'stdio', 'http', 'sse' or 'openapi', got ['stdio']",
        "tools": 0,
    }


def test_skipped_entries_are_warned_about_by_name(mixed):
    config, _, result, _ = mixed
    assert (
        f"{config}: server 'broken' skipped: neither 'command' (stdio) nor 'url' (http/sse) is given"
        in result.stderr
    )
    assert f"{config}: server 'typo' skipped: 'type' must be a string" in result.stderr


def test_disabled_entry_is_listed_and_never_started(mixed):
    _, marker, servers, tools = mixed
    rows = {row["name"]: row for row in json.loads(servers.stdout)}
    assert rows["off"] == {"name": "off", "state": "disabled", "lastError": None, "tools": 0}
    assert not marker.exists()
    assert all(row["server"] == "ctl" for row in json.loads(tools.stdout))


def test_tools_lists_the_good_servers_tools_with_hints_as_declared(mixed):
    _, _, _, result = mixed
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert list(rows) == [f"ctl__{name}" for name in CTL_TOOLS]
    echo = rows["ctl__echo"]
    assert echo["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
    assert (echo["namespacedName"], echo["server"], echo["title"], echo["available"]) == (
        "ctl.echo",
        "ctl",
        "Echo",
        True,
    )
    assert re.fullmatch(r"[0-9a-f]{64}", echo["refId"])
    assert rows["ctl__crash"]["annotations"] == {}
    assert rows["ctl__crash"]["title"] is None
    assert len({row["refId"] for row in rows.values()}) == len(CTL_TOOLS)


# --- console output: long paths stay on one line, brackets are printed verbatim ---------------------


def test_long_config_path_is_printed_on_one_line(tmp_path):
    directory = tmp_path / ("a_directory_name_long_enough_to_push_the_message_past_eighty_columns_" * 2)
    directory.mkdir()
    path = directory / "toolkeeper.json"
    path.write_text('{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}\n')
    result = toolkeeper("servers", path, tmp_path)
    assert result.returncode == 2
    assert f"{path}:3:26: invalid JSON" in result.stderr


def test_message_with_square_brackets_is_printed_verbatim(tmp_path):
    (tmp_path / "toolkeeper.json").write_text('{\n  "mcpServers": {},\n  "[/x]": {}\n}\n')
    result = toolkeeper("servers", "toolkeeper.json", tmp_path)
    assert result.returncode == 2
    assert "toolkeeper.json:3: unknown top-level key '[/x]'." in result.stderr
