"""Downstream crashes and restarts, change propagation, and no orphan processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
import psutil
import pytest
from conftest import (
    MODES,
    PY,
    controllable,
    eventually,
    free_port,
    gateway_client,
    spawn_stdio_gateway,
    write_config,
)

pytestmark = pytest.mark.anyio


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Changes:
    count = 0


@asynccontextmanager
async def counting_list_changes(client, mode, changes: Changes):
    """Legacy clients hear list changes as notifications; modern ones only on a listen stream."""
    if mode == "legacy":
        yield
        return
    async with client.listen(tools_list_changed=True) as subscription, anyio.create_task_group() as tg:

        async def count():
            async for _ in subscription:
                changes.count += 1

        tg.start_soon(count)
        yield
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("mode", MODES)
async def test_crash_and_restart_are_seen_as_two_list_changes(tmp_path, mode):
    delay_file = tmp_path / "delay"
    config = write_config(
        tmp_path,
        {"ctl": controllable(server_args={"start-delay-file": delay_file}), "other": controllable()},
    )
    changes = Changes()

    async def on_message(message):
        # Modern clients also see listen-stream notifications here; they are counted there.
        if mode == "legacy" and isinstance(message, types.ToolListChangedNotification):
            changes.count += 1

    async with gateway_client(config, mode, message_handler=on_message) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "ctl__echo" in names and "other__echo" in names
        old_pid = int((await client.call_tool("ctl__pid", {})).content[0].text)

        async with counting_list_changes(client, mode, changes):
            delay_file.write_text("2")  # the restarted server takes 2 s, so the outage is visible
            crashed = await client.call_tool("ctl__crash", {})
            assert crashed.is_error and "ctl" in crashed.content[0].text

            await eventually(lambda: changes.count >= 1)
            names = {t.name for t in (await client.list_tools()).tools}
            assert "ctl__echo" not in names and "other__echo" in names
            down = await client.call_tool("ctl__echo", {"text": "x"})
            assert down.is_error
            assert "server 'ctl' lost its connection and is reconnecting" in down.content[0].text
            assert (await client.call_tool("other__echo", {"text": "ok"})).content[0].text == "ok"

            await eventually(lambda: changes.count >= 2, timeout=30)
            names = {t.name for t in (await client.list_tools()).tools}
            assert "ctl__echo" in names
            assert (await client.call_tool("ctl__echo", {"text": "back"})).content[0].text == "back"
            new_pid = int((await client.call_tool("ctl__pid", {})).content[0].text)
            assert new_pid != old_pid
            assert not [p for p in psutil.process_iter() if p.pid == old_pid and alive(p)]
            await anyio.sleep(0.3)
        assert changes.count == 2


def wait_for_children(pid: int, count: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = [p for p in descendants(pid) if "controllable.py" in " ".join(p.cmdline())]
        if len(children) >= count:
            return children
        time.sleep(0.1)
    raise AssertionError(f"expected {count} downstream children of {pid}")


def assert_no_orphans(config, stop_gateway, *extra: str, children_count: int = 2) -> None:
    """Start the gateway, wait for its children, stop it with `stop_gateway`, and check that
    every child is gone (not running, not a zombie) shortly after."""
    gateway = spawn_stdio_gateway(config, *extra)
    try:
        children = wait_for_children(gateway.pid, children_count)
        time.sleep(0.5)
        stop_gateway(gateway)
        gateway.wait(20)
        deadline = time.monotonic() + 10
        while any(alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c.pid for c in children if alive(c)]
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()


STOPS = {
    "sigterm": lambda gateway: gateway.send_signal(signal.SIGTERM),
    "sigint": lambda gateway: gateway.send_signal(signal.SIGINT),
    "stdin-closed": lambda gateway: gateway.stdin.close(),
    # SIGKILL gives the gateway no chance to clean up; its children see stdin close and exit.
    "sigkill": lambda gateway: os.kill(gateway.pid, signal.SIGKILL),
}


@pytest.mark.parametrize("how", list(STOPS))
def test_no_orphans_after_the_gateway_stops(tmp_path, how):
    config = write_config(tmp_path, {f"s{i}": controllable() for i in range(3)})
    assert_no_orphans(config, STOPS[how], children_count=3)


@pytest.mark.parametrize("how", ["sigterm", "sigint"])
def test_no_orphans_after_the_http_gateway_stops(tmp_path, how):
    config = write_config(tmp_path, {f"s{i}": controllable() for i in range(2)})
    assert_no_orphans(config, STOPS[how], "--transport", "http", "--port", str(free_port()))


def test_child_stderr_goes_to_the_log_prefixed_with_the_server_name(tmp_path):
    config = write_config(tmp_path, {"chatty": controllable()})
    result = subprocess.run(
        # -v: the children's stderr is in the log at INFO, which a command shows only when asked.
        [PY, "-m", "toolkeeper", "-v", "servers", "--config", str(config), "--json", "--wait", "20"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "[chatty] controllable server controllable pid" in result.stderr
    assert "controllable server" not in result.stdout


class QuietListener:
    """Hears a downstream's state changes and nothing else (what `reconnect` needs)."""

    def downstream_changed(self, downstream: object, lists: object = None) -> None:
        return None


async def test_reconnect_skips_the_wait_after_a_failed_attempt(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that cannot start waits a long backoff before its next attempt; asked to
    reconnect, the next attempt starts at once, and a ready server's old process goes."""
    from toolkeeper.config.loader import parse_config_text
    from toolkeeper.downstreams import connection
    from toolkeeper.downstreams.base import State

    monkeypatch.setattr(connection, "INITIAL_BACKOFF", 60.0)
    gate = tmp_path / "delay"
    gate.write_text("not a number")  # the server fails to start while this holds garbage
    entry = controllable(server_args={"start-delay-file": str(gate)})
    config = parse_config_text(json.dumps({"mcpServers": {"ctl": entry}}), environ=os.environ)
    server = connection.McpConnection(config.servers[0], QuietListener())  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.run, anyio.CapacityLimiter(1))
        # Waiting for the next attempt (not making one): "attempt 2, next in 59.9s".
        await eventually(lambda: "next in" in server.describe_unavailable(), 30)
        assert server.connects == 0
        gate.write_text("0")
        server.reconnect()
        await eventually(lambda: server.state is State.READY, 30)  # well before the 60 s wait
        first = await server.call_tool("pid", {})
        server.reconnect()
        await eventually(lambda: server.connects == 2 and server.state is State.READY, 30)
        second = await server.call_tool("pid", {})
        assert first["content"][0]["text"] != second["content"][0]["text"]
        tg.cancel_scope.cancel()
