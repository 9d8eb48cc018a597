"""Stopping the gateway: a signal (or, over stdio, the end of stdin) ends the client streams,
answers every call in flight with an error that says the gateway is shutting down, stops every
downstream child (killing one that ignores SIGTERM) and exits 0.

The time bounds here are liveness bounds (a gateway that hangs fails instead of hanging the
suite), not speed benchmarks."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from conftest import (
    controllable,
    free_port,
    spawn_http_gateway,
    spawn_stdio_gateway,
    wait_port,
    write_config,
)
from mcp import Client
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

# How long a stopping gateway may take before the test calls it hung.
EXIT_BOUND_SECONDS = 10.0
SHUTTING_DOWN = "shutting down"


def downstream_children(pid: int, count: int) -> list[psutil.Process]:
    """The gateway's controllable children, once `count` of them run."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = [
            p
            for p in psutil.Process(pid).children(recursive=True)
            if "controllable.py" in " ".join(p.cmdline())
        ]
        if len(children) >= count:
            return children
        time.sleep(0.1)
    raise AssertionError(f"expected {count} downstream children of {pid}")


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(children: list[psutil.Process]) -> list[int]:
    # A child killed with its parent gone is reaped by init a moment later; give it that moment.
    deadline = time.monotonic() + 2
    while any(alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [c.pid for c in children if alive(c)]


def wait_for_record(record: Path, method: str) -> None:
    """Until the controllable server recorded a request (the call is in flight downstream)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if record.exists() and method in recorded(record):
            return
        time.sleep(0.05)
    raise AssertionError(f"the server never received {method}")


def recorded(record: Path) -> list[str]:
    return [json.loads(line)["method"] for line in record.read_text().splitlines()]


def exit_code_within(process: subprocess.Popen[bytes], seconds: float) -> int | None:
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def kill_all(process: subprocess.Popen[bytes], children: list[psutil.Process]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
    for child in children:
        if alive(child):
            child.kill()


def stopping_line(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "INFO" in line and "stopping" in line]


# ------------------------------------------------------------------------------------------ HTTP


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
async def test_http_gateway_stops_with_a_held_get_stream_and_a_call_in_flight(tmp_path, sig):
    record = tmp_path / "record.jsonl"
    config = write_config(
        tmp_path,
        {
            "ctl": controllable(server_args={"record": record}),
            "stubborn": controllable(server_args={"on-stop": "ignore"}),
        },
    )
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as log_file:
        gateway = spawn_http_gateway(config, port, stderr=log_file)
    children: list[psutil.Process] = []
    try:
        wait_port(port)
        children = downstream_children(gateway.pid, 2)
        outcome: dict[str, Any] = {}
        # A handshake-era client opens its GET stream after the handshake and holds it.
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
            assert "ctl__sleep" in {t.name for t in (await client.list_tools()).tools}

            async def call_in_flight() -> None:
                try:
                    outcome["result"] = await client.call_tool("ctl__sleep", {"seconds": 120})
                except MCPError as exc:
                    outcome["error"] = exc.error.message
                except Exception as exc:  # the transport may fail instead
                    outcome["transport"] = repr(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_in_flight)
                await anyio.to_thread.run_sync(wait_for_record, record, "tools/call")
                gateway.send_signal(sig)
                code = await anyio.to_thread.run_sync(exit_code_within, gateway, EXIT_BOUND_SECONDS)
                with anyio.move_on_after(5):
                    while not outcome:
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
        assert code is not None, f"the gateway still ran {EXIT_BOUND_SECONDS:g}s after {sig.name}"
        assert code == 0
        result = outcome.get("result")
        message = result.content[0].text if result is not None and result.is_error else outcome.get("error")
        assert message and SHUTTING_DOWN in message, outcome
        assert survivors(children) == []
        assert "notifications/cancelled" in recorded(record)
        stopping = stopping_line(log)
        assert len(stopping) == 1 and sig.name in stopping[0], log.read_text()
    finally:
        kill_all(gateway, children)


# ----------------------------------------------------------------------------------------- stdio


class StdioGateway:
    """A gateway over stdio, spoken to in JSON lines."""

    def __init__(self, config: Path, log: Path) -> None:
        with log.open("wb") as log_file:
            self.process = spawn_stdio_gateway(config, env={"TOOLKEEPER_LOG_LEVEL": "INFO"}, stderr=log_file)

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def messages(self) -> list[dict[str, Any]]:
        """Every message the gateway wrote until it closed stdout."""
        assert self.process.stdout is not None
        return [json.loads(line) for line in self.process.stdout.read().splitlines() if line.strip()]

    def answer(self, request_id: Any) -> dict[str, Any]:
        assert self.process.stdout is not None
        while line := self.process.stdout.readline():
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return message
        raise AssertionError(f"the gateway closed stdout before answering {request_id!r}")


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "shutdown-test", "version": "1"},
}


def open_session(gateway: StdioGateway, era: str) -> dict[str, Any]:
    """Start a session in `era`; the `params` extras its calls carry."""
    if era == "modern":
        return {"_meta": MODERN_META}
    gateway.send(
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "shutdown-test", "version": "1"},
            },
        }
    )
    gateway.answer("init")
    gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return {}


STDIO_STOPS = {
    "sigterm": lambda gateway: gateway.process.send_signal(signal.SIGTERM),
    "sigint": lambda gateway: gateway.process.send_signal(signal.SIGINT),
    "stdin-closed": lambda gateway: gateway.process.stdin.close(),
}


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("how", list(STDIO_STOPS))
def test_stdio_gateway_answers_the_call_in_flight_and_leaves_no_child(tmp_path, how, era):
    record = tmp_path / "record.jsonl"
    config = write_config(
        tmp_path,
        {
            "ctl": controllable(server_args={"record": record}),
            "stubborn": controllable(server_args={"on-stop": "ignore"}),
        },
    )
    log = tmp_path / "gateway.log"
    gateway = StdioGateway(config, log)
    children: list[psutil.Process] = []
    try:
        children = downstream_children(gateway.process.pid, 2)
        extras = open_session(gateway, era)
        # The call waits for start-up, so it reaches the server once the gateway is up.
        gateway.send(
            {
                "jsonrpc": "2.0",
                "id": "slow",
                "method": "tools/call",
                "params": {"name": "ctl__sleep", "arguments": {"seconds": 120}, **extras},
            }
        )
        wait_for_record(record, "tools/call")
        STDIO_STOPS[how](gateway)
        code = exit_code_within(gateway.process, EXIT_BOUND_SECONDS)
        assert code is not None, f"the gateway still ran {EXIT_BOUND_SECONDS:g}s after {how}"
        assert code == 0
        answers = [m for m in gateway.messages() if m.get("id") == "slow"]
        assert len(answers) == 1, answers
        answer = answers[0]
        if "error" in answer:
            message = answer["error"]["message"]
        else:
            assert answer["result"]["isError"] is True, answer
            message = answer["result"]["content"][0]["text"]
        assert SHUTTING_DOWN in message, answer
        assert survivors(children) == []
        assert "notifications/cancelled" in recorded(record)
        assert len(stopping_line(log)) == 1, log.read_text()
    finally:
        kill_all(gateway.process, children)


def test_a_child_that_ignores_sigterm_is_killed(tmp_path):
    """A server that ignores both the end of its stdin and SIGTERM is killed after the grace."""
    config = write_config(tmp_path, {"stubborn": controllable(server_args={"on-stop": "ignore"})})
    gateway = StdioGateway(config, tmp_path / "gateway.log")
    children: list[psutil.Process] = []
    try:
        children = downstream_children(gateway.process.pid, 1)
        open_session(gateway, "legacy")
        gateway.process.send_signal(signal.SIGTERM)
        code = exit_code_within(gateway.process, EXIT_BOUND_SECONDS)
        assert code == 0
        assert survivors(children) == []
        log = (tmp_path / "gateway.log").read_text()
        assert "SIGKILL" in log, log
    finally:
        kill_all(gateway.process, children)
