"""`toolkeeper doctor`, run as a real process: each check producing its message and its fix."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import ROOT, controllable, free_port, write_config
from oauth_servers import running_protected_server
from test_signin_faces import UNHEARD_CALLBACK, opened_service, redirect_of

from toolkeeper.cli.live import running_gateway
from toolkeeper.config import load_config
from toolkeeper.config.loader import demo_config_path
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.services.doctor import Finding, Level, check_store, clients_pointing_nowhere
from toolkeeper.store import Store


@pytest.fixture(autouse=True)
def _free_http_port(monkeypatch: pytest.MonkeyPatch) -> None:
    # The default port may be taken on the machine running the tests; one test takes it itself.
    monkeypatch.setenv("TOOLKEEPER_HTTP_PORT", str(free_port()))


def tk(*args: str, code: int = 0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "toolkeeper", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", **(env or {})},
    )
    assert done.returncode == code, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return done


def doctor(*args: str, code: int = 0, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    findings: list[dict[str, Any]] = json.loads(tk("doctor", "--json", *args, code=code, env=env).stdout)[
        "findings"
    ]
    return findings


def of(findings: list[dict[str, Any]], check: str, subject: str | None = None) -> list[dict[str, Any]]:
    return [f for f in findings if f["check"] == check and (subject is None or f["subject"] == subject)]


def test_an_invalid_configuration_file_is_a_problem_with_the_loaders_message(tmp_path: Path) -> None:
    config = tmp_path / "toolkeeper.json"
    config.write_text('{"mcpServers": {"a": {"command": "x",}}}')
    shown = tk("doctor", "--config", str(config), code=1).stdout
    assert "problem" in shown and "config" in shown
    assert f"{config}:1:" in shown and "invalid JSON" in shown and "trailing comma" in shown
    (found,) = of(doctor("--config", str(config), code=1), "config")
    assert found["level"] == "problem" and "found (--config) but cannot be used" in found["message"]


def test_a_command_not_on_path_is_a_problem_with_its_fix(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"gone": {"command": "toolkeeper-no-such-command"}})
    findings = doctor("--config", str(config), "--wait", "5", code=1)
    (command,) = of(findings, "command", "gone")
    assert command["level"] == "problem"
    assert "'toolkeeper-no-such-command' is not on PATH" in command["message"]
    assert "mcpServers.gone" in command["next"]
    assert of(findings, "server", "gone") == []  # said once, by the command check


def test_a_server_that_exits_at_once_shows_its_last_stderr_lines(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text(
        "import sys\n"
        "print('starting the broken server', file=sys.stderr)\n"
        "print('error: DATABASE_URL points at nothing', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    config = write_config(tmp_path, {"broken": {"command": sys.executable, "args": [str(script)]}})
    shown = tk("doctor", "--config", str(config), "--wait", "5", code=1).stdout
    assert "error: DATABASE_URL points at nothing" in shown
    (server,) = of(doctor("--config", str(config), "--wait", "5", code=1), "server", "broken")
    assert server["level"] == "problem" and "does not answer" in server["message"]
    assert "error: DATABASE_URL points at nothing" in server["details"]
    assert str(script) in server["next"]


def test_an_unset_variable_is_named_with_where_it_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = controllable(env={"TOKEN": "${DOCTOR_TEST_UNSET}", "MODE": "${DOCTOR_TEST_MODE:-fast}"})
    config = write_config(tmp_path, {"steer": entry})
    monkeypatch.delenv("DOCTOR_TEST_UNSET", raising=False)
    findings = doctor("--config", str(config), "--wait", "5", code=1)
    (unset,) = of(findings, "variables")
    assert unset["level"] == "problem" and unset["subject"] == "DOCTOR_TEST_UNSET"
    assert unset["message"] == "${DOCTOR_TEST_UNSET} in mcpServers.steer.env.TOKEN is not set"
    assert "export DOCTOR_TEST_UNSET=" in unset["next"]
    # The loader skipped the server for it: that is said too.
    assert "DOCTOR_TEST_UNSET is not set" in of(findings, "command", "steer")[0]["message"]
    set_now = doctor("--config", str(config), "--wait", "5", env={"DOCTOR_TEST_UNSET": "x"})
    assert [f["level"] for f in of(set_now, "variables")] == ["ok"]


def test_a_store_that_cannot_be_written_is_a_problem(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"steer": controllable()})
    if os.geteuid() == 0:
        # Permissions do not hold root back: a folder that is a file does.
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("")
        home = blocker / "home"
        why = "is a file, not a folder"
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        home = locked / "home"
        why = "cannot be written by you"
    findings = doctor("--config", str(config), env={"TOOLKEEPER_HOME": str(home)}, code=1)
    (store,) = of(findings, "store")
    assert store["level"] == "problem" and why in store["message"]
    assert "TOOLKEEPER_HOME" in store["next"]
    assert not home.exists()
    (asked,) = of(findings, "approvals", "steer")
    assert asked["message"].endswith(
        "; by the configuration alone, without the store's confirm modes and rules"
    )


def test_an_unreachable_database_is_a_problem_named_by_its_address(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"steer": controllable()}, databaseUrl="postgresql://postgres:secret@127.0.0.1:1/test"
    )
    done = tk("doctor", "--config", str(config), code=1)
    assert "Traceback" not in done.stderr and "secret" not in done.stdout
    (store,) = of(doctor("--config", str(config), code=1), "store")
    assert store["level"] == "problem" and "127.0.0.1:1" in store["message"]
    assert "databaseUrl" in store["next"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only file")
def test_a_read_only_store_file_is_a_problem(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"steer": controllable()})
    home = tmp_path / "home"
    tk("policy", "modes", "--config", str(config), env={"TOOLKEEPER_HOME": str(home)})  # makes the store
    (home / "toolkeeper.db").chmod(0o444)
    home.chmod(0o555)
    try:
        findings = doctor("--config", str(config), env={"TOOLKEEPER_HOME": str(home)}, code=1)
    finally:
        home.chmod(0o755)
    (store,) = of(findings, "store")
    assert store["level"] == "problem" and "read-only" in store["message"]


def test_an_existing_store_is_probed_and_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path, {"steer": controllable()})
    home = tmp_path / "home"
    monkeypatch.setenv("TOOLKEEPER_HOME", str(home))
    tk("policy", "confirm", "steer.echo", "always", "--config", str(config))
    before = revision(home / "toolkeeper.db")

    async def probe() -> list[Finding]:
        store, findings = await check_store(load_config(config))
        assert store is not None
        await store.close()
        return findings

    (store,) = anyio.run(probe)
    assert (store.level, store.message) == (Level.OK, "reachable and writable")
    # The probe's write was rolled back: a running gateway has nothing to reload.
    assert revision(home / "toolkeeper.db") == before
    assert "steer.echo" in tk("policy", "modes", "--config", str(config)).stdout
    (shown,) = of(doctor("--config", str(config)), "store")
    assert (shown["level"], shown["subject"]) == ("ok", str(home / "toolkeeper.db"))


def revision(store: Path) -> int:
    with closing(sqlite3.connect(store)) as db:
        value: int = db.execute("SELECT value FROM store_revision").fetchone()[0]
        return value


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def test_a_port_in_use_is_a_warning(tmp_path: Path, taken_port: int) -> None:
    config = write_config(tmp_path, {"steer": controllable()})
    env = {"TOOLKEEPER_HTTP_PORT": str(taken_port)}
    shown = tk("doctor", "--config", str(config), env=env).stdout  # a warning: exit 0
    assert f"127.0.0.1:{taken_port}: in use or not available (Address already in use)" in shown
    (port,) = of(doctor("--config", str(config), env=env), "port")
    assert port["level"] == "warning" and "--port N" in port["next"]


def test_the_demo_servers_ask_counts_agree_with_policy_explain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLKEEPER_CONFIRM")  # the policy as a person gets it
    findings = doctor("--demo")
    asked = {f["subject"]: f for f in of(findings, "approvals")}
    assert asked["notes"]["message"] == "7 of its 7 tool(s) would be asked about"
    assert asked["files"]["message"] == (
        "1 of its 1 tool(s) would be asked about (1 of them may not be, depending on a call's arguments)"
    )
    assert asked["time"]["message"] == "0 of its 2 tool(s) would be asked about"
    assert asked["files"]["next"] == (
        "toolkeeper policy explain files.manage_files '<the arguments as JSON>' --demo"
    )
    # The command shown explains the same decision.
    for server, decision in (("notes", "ask"), ("time", "allow")):
        command = shlex.split(asked[server]["next"])
        assert command[:3] == ["toolkeeper", "policy", "explain"] and command[-1] == "--demo"
        explained = json.loads(tk(*command[1:], "--json").stdout)
        assert explained["decision"] == decision
    # A file deleted is asked about; the call's arguments decide that for files.manage_files.
    delete = json.dumps({"action": "delete", "path": "a.txt"})
    explained = json.loads(tk("policy", "explain", "files.manage_files", delete, "--demo", "--json").stdout)
    assert explained["decision"] == "ask"


def test_a_clean_configuration_exits_0(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"steer": controllable()})
    home = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    done = tk("doctor", "--config", str(config), env=home)
    assert "problem" not in done.stdout
    findings = doctor("--config", str(config), env=home)
    assert {f["level"] for f in findings} <= {"ok", "skipped"}
    assert of(findings, "server", "steer")[0]["message"].startswith("answers: ")
    assert of(findings, "approvals", "steer")[0]["next"].startswith("toolkeeper policy explain steer.")
    (clients,) = of(findings, "clients")
    assert clients["message"] == "no client's file starts toolkeeper yet"


def test_a_client_file_starting_a_toolkeeper_that_is_gone_is_a_problem(tmp_path: Path) -> None:
    """Read from the client's own file at its place under HOME, as `toolkeeper install` wrote it."""
    config = write_config(tmp_path, {"steer": controllable()})
    gone = tmp_path / "old-venv" / "bin" / "toolkeeper"
    settings = tmp_path / ".config" / "Claude" / "claude_desktop_config.json"
    settings.parent.mkdir(parents=True)
    entry = {"command": str(gone), "args": ["serve", "--config", str(config)]}
    settings.write_text(json.dumps({"mcpServers": {"toolkeeper": entry}}))
    home = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    findings = doctor("--config", str(config), code=1, env=home)
    (clients,) = of(findings, "clients")
    assert clients["level"] == "problem" and str(gone) in clients["message"], clients
    assert clients["next"] == "toolkeeper install claude-desktop"


def test_a_client_pointing_at_a_toolkeeper_that_is_gone(tmp_path: Path) -> None:
    present = tmp_path / "bin" / "toolkeeper"
    present.parent.mkdir()
    present.write_text("#!/bin/sh\n")
    present.chmod(0o755)
    gone = tmp_path / "old-venv" / "bin" / "toolkeeper"
    settings = tmp_path / "claude_desktop_config.json"
    found = clients_pointing_nowhere(
        [("claude-desktop", settings, str(gone)), ("cursor", settings, str(present))]
    )
    assert [(f.subject, f.level) for f in found] == [("claude-desktop", Level.PROBLEM), ("cursor", Level.OK)]
    assert str(gone) in found[0].message and found[0].next == "toolkeeper install claude-desktop"


@pytest.mark.anyio
async def test_counting_without_arguments_decides_as_policy_explain_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For every demo tool whose hints do not depend on its arguments, the count's decision is
    the one `policy explain TOOL` gives; the one that depends on them is marked so."""
    monkeypatch.delenv("TOOLKEEPER_CONFIRM")
    config = load_config(demo_config_path(), kinds=KINDS.entries)
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    async with await store.open(), running_gateway(config, 30.0, store) as gateway:
        assert gateway.services is not None
        counted = await gateway.services.policy.without_arguments()
        assert {v["tool"] for v in counted} == {t.namespaced_name for t in gateway.catalog.tools}
        for verdict in counted:
            if verdict["dependsOnArguments"]:
                assert verdict["tool"] == "files.manage_files"
                continue
            explained = await gateway.services.policy.explain(verdict["tool"], {})
            assert (verdict["decision"], verdict["madeBy"], verdict["reason"]) == (
                explained["decision"],
                explained["madeBy"],
                explained["reason"],
            ), verdict["tool"]
    assert {v["decision"] for v in counted} == {"ask", "allow"}


async def signed_in(config: Path, server: str, account: str | None = None) -> None:
    """`account` of `server` signed in through the service, its tokens kept in the store."""
    service, store = await opened_service(config)
    try:
        pending = await service.begin(server, account, UNHEARD_CALLBACK)
        answer = redirect_of(pending.url)
        await service.complete(answer["state"], code=answer["code"], iss=answer.get("iss"), error=None)
    finally:
        await store.close()


@pytest.mark.anyio
async def test_each_remote_server_that_signs_in_is_named_with_its_accounts_live_state(tmp_path: Path) -> None:
    with running_protected_server(tmp_path, "--auto-approve", "--jwt") as protected:
        config = write_config(
            tmp_path,
            {
                "tracker": {"url": protected.url},
                "wiki": {"url": protected.url},
                "team": {"url": protected.url, "signIn": "perPrincipal"},
                "local": controllable(),
            },
        )
        await signed_in(config, "tracker")
        protected.next_sign_in_as("ci-bot")
        await signed_in(config, "team", "key:ci")
        # A sign-in still needed is a warning: the command exits 0.
        findings = doctor("--config", str(config))
        shown = tk("doctor", "--config", str(config)).stdout

    login = f"toolkeeper login wiki --config {shlex.quote(str(config))}"
    assert [(f["subject"], f["level"], f["message"], f["next"]) for f in of(findings, "sign-in")] == [
        ("tracker", "ok", "signed in as alice", None),
        ("wiki", "warning", "needs a sign-in: its tools are not served until then", login),
        (
            "team",
            "warning",
            "account local:local: needs a sign-in: its tools are not served until then; "
            "also signed in: key:ci",
            login.replace("wiki", "team"),
        ),
    ]
    # A server waiting for its sign-in is the sign-in check's, not a server that does not answer.
    assert {f["subject"] for f in of(findings, "server")} == {"tracker", "team", "local"}
    assert "wiki: needs a sign-in" in shown and f"fix: {login}" in shown
