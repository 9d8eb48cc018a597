"""`toolkeeper search`, run as a real process: against the bundled demo and the npm reference
server, as JSON and as a table; the notes and the equipped toolset read from a real store;
refusals of a bad query or limit before any server starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, missing_test_dependency, server_everything_entry, write_config

from toolkeeper.catalog.search import MAX_QUERY_CHARS
from toolkeeper.catalog.tokens import ENCODING

MATCH_KEYS = {"name", "title", "description", "tokens", "listed"}


def tk(*args: str, code: int = 0, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **env},
    )
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return done


def searched(*args: str, **env: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(tk("search", *args, "--json", **env).stdout)
    return answer


def names(answer: dict[str, Any]) -> list[str]:
    return [match["name"] for match in answer["matches"]]


def test_the_demo_finds_a_note_tool_with_its_cost_and_whether_it_is_listed() -> None:
    answer = searched("write", "a", "note", "--demo", "--limit", "7")
    assert answer["query"] == "write a note"
    assert answer["encoding"] == ENCODING
    assert "notes__create_note" in names(answer)
    assert len(answer["matches"]) <= 7
    for match in answer["matches"]:
        assert set(match) == MATCH_KEYS
        assert match["name"].startswith("notes__")  # only the notes server's tools are about notes
        assert isinstance(match["tokens"], int) and 20 < match["tokens"] < 2000
        assert match["listed"] is True  # no toolset and no menu (the tests' setting): all are listed
    create = next(m for m in answer["matches"] if m["name"] == "notes__create_note")
    assert create["title"] == "Create Note"
    assert create["description"].startswith("Create a new note.")
    assert "\n" not in create["description"]


def test_the_table_shows_rank_name_description_cost_and_listing() -> None:
    table = tk("search", "what time is it", "--demo", "-n", "2", COLUMNS="60").stdout
    assert "Best matches for 'what time is it'" in table
    for heading in ("#", "tool", "description", "tokens", "listed"):
        assert heading in table
    rows = [line for line in table.splitlines() if "time__" in line]
    assert len(rows) == 2 and all("~" in row and "✓" in row for row in rows)
    assert rows[0].split("│")[1].strip() == "1"
    # A narrow terminal folds a long name onto the next line instead of cutting it.
    tool_cells = [line.split("│")[2] for line in table.splitlines() if line.count("│") > 2]
    assert "".join(cell.strip() for cell in tool_cells).count("time__get_current_time") == 1
    assert f"estimated ({ENCODING} encoding)" in table


def test_a_query_that_matches_nothing_says_so_and_names_the_way_to_every_tool() -> None:
    done = tk("search", "zqxjv", "--demo")
    assert done.stdout.startswith("No tool matches 'zqxjv'. Try other words")
    assert "`toolkeeper tools` lists the tools the servers offer." in done.stdout
    assert searched("zqxjv", "--demo")["matches"] == []


def test_the_notes_and_the_equipped_toolset_come_from_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU", "true")
    tk("toolsets", "build", "writing", "notes.create_note", "--equip", "--demo")
    tk("notes", "add", "notes.create_note", "journal", "Use it for the daily zeppelin journal.", "--demo")
    found = searched("zeppelin", "journal", "--demo")
    assert names(found) == ["notes__create_note"]  # its note is searched with it
    assert found["matches"][0]["listed"] is True
    others = searched("note", "--demo", "-n", "20")
    assert {m["name"] for m in others["matches"] if m["listed"]} == {"notes__create_note"}
    assert len(others["matches"]) > 1  # the rest are found, though not listed


def test_the_npm_reference_server_tools_are_found_by_what_they_do(tmp_path: Path) -> None:
    everything = server_everything_entry()
    if everything is None:
        missing_test_dependency("@modelcontextprotocol/server-everything (or node to run it)")
    config = write_config(tmp_path, {"everything": everything})
    assert names(searched("add two numbers", "--config", str(config), "-n", "1")) == ["everything__get-sum"]
    assert names(searched("environment variables", "--config", str(config), "-n", "1")) == [
        "everything__get-env"
    ]


# -- refusals: exit 1, a clear message on stderr, nothing on stdout, no server started --------


@pytest.fixture
def marked_config(tmp_path: Path) -> tuple[Path, Path]:
    """A configuration whose one server leaves a file behind when it is started."""
    marker = tmp_path / "started"
    server = {"command": PY, "args": ["-c", f"open({str(marker)!r}, 'w').close()"]}
    return write_config(tmp_path, {"marks": server}), marker


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([""], "error: The search query is empty: say in a few words what the tool should do."),
        (["   "], "error: The search query is empty"),
        (["x" * (MAX_QUERY_CHARS + 1)], f"characters long; at most {MAX_QUERY_CHARS} are searched."),
        (["note", "--limit", "0"], "error: limit must be a whole number from 1 to 20, got 0."),
        (["note", "-n", "21"], "error: limit must be a whole number from 1 to 20, got 21."),
    ],
)
def test_a_bad_query_or_limit_is_refused_before_any_server_starts(
    marked_config: tuple[Path, Path], args: list[str], message: str
) -> None:
    config, marker = marked_config
    done = tk("search", *args, "--config", str(config), code=1)
    assert done.stdout == ""
    assert message in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert not marker.exists()


def test_a_limit_that_is_not_a_number_is_a_usage_error(marked_config: tuple[Path, Path]) -> None:
    config, _ = marked_config
    done = tk("search", "note", "--limit", "many", "--config", str(config), code=2)
    assert "Invalid value for '--limit'" in done.stderr
    assert tk("search", "--config", str(config), code=2).stderr.count("Missing argument 'QUERY'") == 1
