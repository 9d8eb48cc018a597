"""A remote server waiting for a person's sign-in is counted as such wherever servers' states are
shown, never as failed: the status line a terminal sees while a command connects and the hint
after it, `serve`'s start-up line, `toolkeeper servers`, and the dashboard overview's counts.
Against a real protected server (tests/servers/protected_mcp.py) nobody has signed in to, beside
a stdio server that is ready."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PY, controllable, write_config
from oauth_servers import ProtectedServer, running_protected_server
from test_cli_quiet import environment, on_a_terminal, toolkeeper
from web_support import config_for, running_dashboard

from toolkeeper.cli.connecting import NOT_READY_HINT


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[ProtectedServer]:
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as server:
        yield server


def servers_of(protected: ProtectedServer) -> dict[str, object]:
    return {"remote": {"url": protected.url}, "ctl": controllable()}


def test_the_status_line_counts_a_server_waiting_for_its_sign_in_apart(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    config = write_config(tmp_path, servers_of(protected))
    screen = on_a_terminal(tmp_path / "home", "tools", "--config", str(config))
    assert "Connecting to 2 servers…" in screen, screen
    assert "1 of 2 ready, 1 needs a sign-in" in screen, screen
    assert "failed" not in screen
    # After it, the command that signs in, not the advice to read the log (it has nothing more).
    assert "1 server needs a sign-in (remote): `toolkeeper login remote`" in screen, screen
    assert NOT_READY_HINT not in screen.replace("\r\n", "\n")
    assert "ctl__echo" in screen


def test_servers_names_each_server_that_needs_a_sign_in_once(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    config = write_config(tmp_path, servers_of(protected))
    done = toolkeeper(tmp_path / "home", "servers", "--config", str(config))
    assert re.search(r"remote\s+│\s+needs\s", done.stdout), done.stdout
    assert done.stderr.count("needs a sign-in") == 1, done.stderr
    assert "remote needs a sign-in: toolkeeper login remote" in done.stderr


def test_serves_start_up_line_counts_the_servers_that_need_a_sign_in(
    tmp_path: Path, protected: ProtectedServer
) -> None:
    config = write_config(tmp_path, servers_of(protected))
    process = subprocess.Popen(
        [PY, "-m", "toolkeeper", "serve", "--config", str(config)],
        env=environment(tmp_path / "home"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None and process.stdin is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "from 2 servers" in line:
            break
    process.stdin.close()  # the client went away: the gateway stops
    process.wait(timeout=60)
    (serving,) = [line for line in seen if "from 2 servers" in line]
    assert "from 2 servers (1 needs a sign-in: see toolkeeper servers)" in serving, serving


def test_the_overview_counts_the_servers_in_each_state(tmp_path: Path, protected: ProtectedServer) -> None:
    with running_dashboard(config_for(tmp_path, servers_of(protected))) as board:
        page = board.client.get("/", headers=board.auth).text
    counts = re.search(r'<p class="state-counts">(.*?)</p>', page, re.S)
    assert counts, page
    shown = re.sub(r"<[^>]+>|\s+", " ", counts.group(1)).split()
    assert " ".join(shown) == "2 servers: 1 ready · 1 needs sign-in"
