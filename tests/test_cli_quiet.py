"""A command that connects the servers answers without their start-up log: warnings and errors
only on stderr (every line with -v), a status line while they connect when stderr is a terminal,
and stdout holds only the answer."""

from __future__ import annotations

import errno
import json
import os
import pty
import subprocess
from pathlib import Path

from conftest import PY, ROOT, controllable, write_config

READY_LINE = "ready ("
STATUS = "Connecting to 4 servers…"


def environment(home: Path, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKEEPER_")}
    return {
        **clean,
        "PYTHONPATH": str(ROOT / "src"),
        "TOOLKEEPER_HOME": str(home),
        "COLUMNS": "100",
        "TERM": "xterm-256color",
        **extra,
    }


def toolkeeper(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PY, "-m", "toolkeeper", *args],
        env=environment(home, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def on_a_terminal(home: Path, *args: str) -> str:
    """Everything the command writes to a terminal (stdout and stderr both on one pseudo-terminal),
    in the order it was written."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [PY, "-m", "toolkeeper", *args],
            env=environment(home),
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=terminal,
        )
    finally:
        os.close(terminal)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError as exc:  # the terminal's other side closed: the command is done
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(controller)
        assert process.wait(timeout=120) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_tools_and_servers_print_the_answer_without_the_start_up_log(tmp_path: Path) -> None:
    tools = toolkeeper(tmp_path, "tools", "--demo")
    assert READY_LINE not in tools.stderr and " INFO " not in tools.stderr, tools.stderr
    assert "notes__search_notes" in tools.stdout
    assert STATUS not in tools.stderr  # stderr is not a terminal: no status line either
    assert tools.stderr == ""
    servers = toolkeeper(tmp_path, "servers", "--demo")
    assert READY_LINE not in servers.stderr and " INFO " not in servers.stderr, servers.stderr
    assert "notes" in servers.stdout and "ready" in servers.stdout


def test_verbose_shows_the_log(tmp_path: Path) -> None:
    for spelling in ("-v", "--verbose"):
        tools = toolkeeper(tmp_path, spelling, "tools", "--demo")
        assert "server 'notes': ready (" in tools.stderr, tools.stderr
        assert "toolkeeper.child: [notes]" in tools.stderr  # a server's own stderr, as INFO
        assert "DEBUG" not in tools.stderr
        assert "notes__search_notes" in tools.stdout and READY_LINE not in tools.stdout


def test_the_environment_names_the_level_for_one_run(tmp_path: Path) -> None:
    tools = toolkeeper(tmp_path, "tools", "--demo", TOOLKEEPER_LOG_LEVEL="INFO")
    assert "server 'notes': ready (" in tools.stderr, tools.stderr


def test_a_server_that_fails_still_shows_its_warning(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "works": controllable(),
            "broken": {"command": PY, "args": ["-c", "import sys; print('boom on stderr', file=sys.stderr)"]},
            "absent": {"command": str(tmp_path / "no-such-server")},
        },
    )
    done = toolkeeper(tmp_path / "home", "servers", "--config", str(config), "--json", "--wait", "30")
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["works"]["state"] == "ready" and rows["broken"]["state"] != "ready"
    assert "WARNING" in done.stderr and "server 'broken':" in done.stderr, done.stderr
    assert "server 'absent': command not found" in done.stderr, done.stderr
    assert READY_LINE not in done.stderr and "boom on stderr" not in done.stderr  # INFO, hidden
    assert "`toolkeeper -v COMMAND` shows the whole log" in done.stderr  # how to see it
    loud = toolkeeper(tmp_path / "home", "-v", "servers", "--config", str(config), "--json", "--wait", "30")
    assert "boom on stderr" in loud.stderr and "server 'works': ready (" in loud.stderr, loud.stderr
    assert "toolkeeper -v COMMAND" not in loud.stderr


def test_json_is_only_json(tmp_path: Path) -> None:
    for command in ("tools", "servers"):
        done = toolkeeper(tmp_path, command, "--demo", "--json")
        assert isinstance(json.loads(done.stdout), list)
    answer = on_a_terminal(tmp_path, "tools", "--demo", "--json")
    assert STATUS not in answer and "Connecting" not in answer
    assert "notes__search_notes" in answer


def test_a_terminal_sees_a_status_line_then_the_answer(tmp_path: Path) -> None:
    screen = on_a_terminal(tmp_path, "tools", "--demo")
    assert STATUS in screen, screen
    assert "4 of 4 ready" in screen, screen
    assert screen.index(STATUS) < screen.index("notes__search_notes")
    assert READY_LINE not in screen


def test_serve_keeps_its_log(tmp_path: Path) -> None:
    """`serve` logs at the configured level (INFO by default) whatever the other commands do."""
    process = subprocess.Popen(
        [PY, "-m", "toolkeeper", "serve", "--demo"],
        env=environment(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None and process.stdin is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "server 'notes': ready (" in line:
            break
    process.stdin.close()  # the client went away: the gateway stops
    process.wait(timeout=60)
    assert any("server 'notes': ready (" in line for line in seen), seen
    assert STATUS not in "".join(seen)
    assert process.stdout is not None and process.stdout.read() == ""  # stdio: stdout is the protocol
