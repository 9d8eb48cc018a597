"""Real servers as they are, behind a real gateway: a server that answers only part of the
protocol, instructions passed on, each client era getting its own fields, error messages that
say the real state, and configuration shown without its secrets."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import (
    MODES,
    PY,
    ROOT,
    controllable,
    free_port,
    gateway_client,
    missing_test_dependency,
    server_everything_entry,
    spawn,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)
from mcp import Client, StdioServerParameters
from test_wire_lanes import ENVELOPE, SERVER_INFO, StdioGateway

HANDSHAKE_INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}


def with_resources() -> dict[str, Any]:
    """The steerable server offering resources and prompts, with no resource templates handler."""
    entry = controllable()
    entry["args"].append("--resources")
    return entry


def run_cli(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "toolkeeper", *args, "--config", str(config)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "300", **(env or {})},
    )


def servers_json(config: Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    result = run_cli(config, "servers", "--json", "--wait", "20", env=env)
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}, result.stderr


def handshake(gateway: StdioGateway) -> dict[str, Any]:
    gateway.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": HANDSHAKE_INIT})
    answer = gateway.answer("init")["result"]
    gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return answer


# --- 15: a server is usable with whatever part of the protocol it answers ----------------------


def test_a_server_without_resource_templates_is_ready_and_says_so_once_in_the_log(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": with_resources()})
    # Not answering a list at all is information, shown with the log at INFO.
    rows, log = servers_json(config, env={"TOOLKEEPER_LOG_LEVEL": "INFO"})
    row = rows["ctl"]
    assert (row["state"], row["lastError"]) == ("ready", None)
    assert (row["resources"], row["resourceTemplates"], row["prompts"]) == (1, 0, 1)
    assert row["tools"] > 0
    warnings = [line for line in log.splitlines() if "resources/templates/list" in line]
    assert len(warnings) == 1, log
    assert "INFO" in warnings[0] and "'ctl'" in warnings[0]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_server_without_resource_templates_serves_tools_resources_and_prompts(
    tmp_path: Path, mode: str
) -> None:
    config = write_config(tmp_path, {"ctl": with_resources()})
    async with gateway_client(config, mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "ctl__echo" in names
        assert (await client.call_tool("ctl__echo", {"text": "hi"})).structured_content == {"echo": "hi"}
        assert [r.uri for r in (await client.list_resources()).resources] == ["memo://notes"]
        assert (await client.list_resource_templates()).resource_templates == []
        read = await client.read_resource("memo://notes")
        assert read.contents[0].text == "the notes"  # type: ignore[union-attr]
        assert [p.name for p in (await client.list_prompts()).prompts] == ["ctl__greet"]


SQLITE_SERVER = ("mcp-server-sqlite==2025.4.25", "mcp<2")


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mcp-server-sqlite` on the oldest SDK still in use (mcp 1.x), in a venv of its own:
    the one scripts/test keeps in .test-deps, or else one made for this test session."""
    cached = ROOT / ".test-deps" / "sqlite-venv" / "bin" / "mcp-server-sqlite"
    if cached.exists():
        return cached
    folder = tmp_path_factory.mktemp("sqlite-venv")
    venv.create(folder, with_pip=True)
    installed = subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", *SQLITE_SERVER],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0:
        missing_test_dependency(
            "mcp-server-sqlite", f" and could not be installed here ({installed.stderr.strip()[-300:]})"
        )
    return folder / "bin" / "mcp-server-sqlite"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_the_real_sqlite_server_on_sdk_1_lists_its_tools_and_answers_a_call(
    tmp_path: Path, mode: str, sqlite_server: Path
) -> None:
    python = sqlite_server.parent / "python"
    sdk = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert sdk.startswith("1."), f"the sqlite server should run on mcp 1.x, found {sdk}"
    config = write_config(
        tmp_path, {"db": {"command": str(sqlite_server), "args": ["--db-path", str(tmp_path / "t.db")]}}
    )
    rows, _ = servers_json(config)
    assert (rows["db"]["state"], rows["db"]["lastError"]) == ("ready", None)
    async with gateway_client(config, mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"db__read_query", "db__write_query", "db__create_table", "db__list_tables"} <= names
        await client.call_tool("db__create_table", {"query": "CREATE TABLE pets (name TEXT)"})
        await client.call_tool("db__write_query", {"query": "INSERT INTO pets VALUES ('Rex')"})
        result = await client.call_tool("db__read_query", {"query": "SELECT name FROM pets"})
        assert not result.is_error
        assert "Rex" in result.content[0].text  # type: ignore[union-attr]


# --- 16: each server's instructions reach the clients ---------------------------------------


def _has_section(instructions: str | None, server: str, text: str) -> bool:
    return f"\n\n## {server}\n{text}" in (instructions or "")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_each_servers_instructions_reach_the_client_one_section_each(tmp_path: Path, mode: str) -> None:
    everything = server_everything_entry()
    if everything is None:
        missing_test_dependency("@modelcontextprotocol/server-everything (or node to run it)")
    servers = {
        "ctl": controllable(server_args={"instructions": "Call echo to hear yourself."}),
        "plain": controllable(),
        "everything": everything,
    }
    config = write_config(tmp_path, servers)
    # A modern client reads them from server/discover ("auto" asks it; a fixed version does not).
    async with gateway_client(config, "legacy" if mode == "legacy" else "auto") as client:
        if mode != "legacy":
            assert client.protocol_version == mode
        instructions = client.instructions or ""
    assert instructions.startswith("toolkeeper is a gateway")
    assert _has_section(instructions, "ctl", "Call echo to hear yourself.\n\n## ")
    assert "## plain" not in instructions  # a server without instructions adds nothing
    # server-everything's own text (long): passed on whole under the default cap.
    async with Client(StdioServerParameters(**everything), mode="legacy") as direct:
        assert direct.instructions and len(direct.instructions) > 200
        assert instructions.endswith(f"\n\n## everything\n{direct.instructions.strip()}")


@pytest.mark.anyio
async def test_server_instructions_are_cut_to_the_setting_with_a_mark_and_0_turns_them_off(
    tmp_path: Path,
) -> None:
    long_text = "word " * 200
    servers = {"ctl": controllable(server_args={"instructions": long_text})}
    config = write_config(tmp_path, servers, maxServerInstructions=40)
    async with gateway_client(config, "legacy") as client:
        instructions = client.instructions or ""
    section = instructions[instructions.index("\n## ctl\n") + len("\n## ctl\n") :]
    assert section.startswith("word word") and section.endswith("\n[… truncated]")
    assert len(section) <= 40 + len("\n[… truncated]")

    config = write_config(tmp_path, servers, maxServerInstructions=0)
    async with gateway_client(config, "legacy") as client:
        assert "## ctl" not in (client.instructions or "")


@pytest.mark.anyio
async def test_a_server_that_connects_later_is_in_the_instructions_of_clients_that_come_after(
    tmp_path: Path,
) -> None:
    downstream_port, port = free_port(), free_port()
    servers = {
        "early": controllable(server_args={"instructions": "I was here first."}),
        "late": {"url": f"http://127.0.0.1:{downstream_port}/mcp", "protocol": "legacy"},
    }
    config = write_config(tmp_path, servers)
    gateway = spawn_http_gateway(config, port)
    late_server = None
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(url, mode="legacy") as before:
            assert _has_section(before.instructions, "early", "I was here first.")
            assert "## late" not in (before.instructions or "")
            late_server = spawn(
                [
                    PY,
                    str(ROOT / "tests" / "servers" / "controllable.py"),
                    "--http",
                    str(downstream_port),
                    "--instructions",
                    "I came late.",
                ],
                cwd=tmp_path,
            )
            with anyio.fail_after(60):
                while True:
                    async with Client(url, mode="legacy") as after:
                        if _has_section(after.instructions, "late", "I came late."):
                            break
                    await anyio.sleep(0.2)
            # A modern client asks again whenever it wants: server/discover answers the present.
            async with Client(url, mode="auto") as modern:
                assert modern.protocol_version == "2026-07-28"
                assert _has_section(modern.instructions, "late", "I came late.")
            # A handshake-era client keeps what its initialize said (the protocol has no update).
            assert "## late" not in (before.instructions or "")
    finally:
        stop(gateway)
        if late_server is not None:
            stop(late_server)


# --- 17: each client gets the fields of its own era ------------------------------------------


def test_results_from_real_pypi_and_sdk_servers_carry_only_the_clients_era_fields(tmp_path: Path) -> None:
    servers = {
        "time": {"command": PY, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "ctl": with_resources(),
    }
    config = write_config(tmp_path, servers)
    requests: list[tuple[str, dict[str, Any]]] = [
        ("tools/call", {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}),
        ("tools/call", {"name": "ctl__echo", "arguments": {"text": "hi"}}),
        ("resources/read", {"uri": "memo://notes"}),
        ("prompts/get", {"name": "ctl__greet"}),
        ("tools/list", {}),
        ("resources/list", {}),
        ("prompts/list", {}),
    ]

    gateway = StdioGateway(config)
    try:
        handshake(gateway)
        for i, (method, params) in enumerate(requests):
            gateway.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
            answer = gateway.answer(i)
            assert "result" in answer, (method, answer)
            result = answer["result"]
            assert "resultType" not in result, method
            assert SERVER_INFO not in (result.get("_meta") or {}), method
        time_result = gateway.call("t", requests[0][1])["result"]
        assert json.loads(time_result["content"][0]["text"])["timezone"] == "UTC"
    finally:
        gateway.close()

    gateway = StdioGateway(config)
    try:
        for i, (method, params) in enumerate(requests):
            params = {**params, "_meta": ENVELOPE}
            gateway.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
            answer = gateway.answer(i)
            assert "result" in answer, (method, answer)
            result = answer["result"]
            assert result["resultType"] == "complete", method
            if not method.endswith("/list"):
                # The server a modern client talks to is the gateway, not the one behind it.
                assert result["_meta"][SERVER_INFO]["name"] == "toolkeeper", method
    finally:
        gateway.close()


# --- 13: an error says the state the server is really in -------------------------------------


@pytest.mark.anyio
async def test_a_call_right_after_the_connection_is_lost_says_it_is_reconnecting(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    async with gateway_client(config, "legacy") as client:
        # The server stops answering but its process lingers for seconds, as one that is slow to
        # exit does: the gateway closes the old connection meanwhile.
        hung_up = await client.call_tool("ctl__crash", {"linger": 8})
        assert hung_up.is_error
        with anyio.fail_after(30):
            while True:
                result = await client.call_tool("ctl__echo", {"text": "anyone?"})
                text = result.content[0].text  # type: ignore[union-attr]
                if "closed the connection during" not in text:
                    break
        assert result.is_error
        assert "is ready" not in text
        assert "server 'ctl' lost its connection and is reconnecting (attempt 1, next in" in text
        assert "connection closed by the server" in text


# --- 4: the configuration is shown without its secrets ---------------------------------------

SECRETS = {
    "CRED_USER": "user-s3cr3t-a",
    "CRED_PW": "pw-s3cr3t-b",
    "CRED_TOKEN": "tok-s3cr3t-c",
    "CRED_BEARER": "bearer-s3cr3t-d",
    "CRED_DIR": "/tmp/dir-s3cr3t-e",
    "CRED_ENVVAL": "env-s3cr3t-f",
}
LITERAL_SECRETS = ("literal-pw-9911", "literal-key-7733", "literal-flag-5522", "literal-header-4411")


def test_servers_shows_the_configuration_without_its_secrets(tmp_path: Path) -> None:
    nobody = free_port()  # nothing listens: the remote servers fail and say why
    servers = {
        "remote": {
            "url": f"http://${{CRED_USER}}:${{CRED_PW}}@127.0.0.1:{nobody}/mcp?token=${{CRED_TOKEN}}",
            "headers": {"Authorization": "Bearer ${CRED_BEARER}", "X-Api-Key": "literal-header-4411"},
        },
        "literal": {"url": f"http://alice:literal-pw-9911@127.0.0.1:{nobody}/mcp?api_key=literal-key-7733"},
        "local": {
            "command": "${CRED_DIR}/missing-server",
            "args": [
                "--token",
                "${CRED_TOKEN}",
                "--api-key",
                "literal-flag-5522",
                "postgresql://u:${CRED_PW}@h/db",
            ],
            "env": {"API_KEY": "${CRED_ENVVAL}"},
        },
        "ctl": {**controllable(), "env": {"SOME_KEY": "${CRED_ENVVAL}"}},
    }
    config = write_config(tmp_path, servers)
    rows, log = servers_json(config, env=SECRETS)
    table = run_cli(config, "servers", "--wait", "20", env=SECRETS)
    assert table.returncode == 0, table.stderr
    shown = "\n".join([json.dumps(rows), log, table.stdout, table.stderr])
    for secret in (*SECRETS.values(), *LITERAL_SECRETS):
        assert secret not in shown, secret
    # The configuration as written, with the credentials written in it masked.
    assert rows["remote"]["target"] == f"http http://${{CRED_USER}}:***@127.0.0.1:{nobody}/mcp?token=***"
    assert rows["literal"]["target"] == f"http http://alice:***@127.0.0.1:{nobody}/mcp?api_key=***"
    assert rows["local"]["target"] == (
        "${CRED_DIR}/missing-server --token ${CRED_TOKEN} --api-key *** postgresql://u:***@h/db"
    )
    assert "${CRED_DIR}/missing-server" in rows["local"]["lastError"]
    assert rows["ctl"]["state"] == "ready"  # the servers work with the secrets all the same
