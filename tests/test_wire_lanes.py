"""The gateway's call lanes on the wire: JSON lines written to a real `toolkeeper serve` over
stdio, and POSTs to a real one over HTTP. What the SDK's client would hide (which fields a
result carries, what happens before `initialize`) is checked on the raw messages."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, ROOT, controllable, free_port, spawn_http_gateway, stop, wait_port, write_config

from toolkeeper.gateway.http_fastlane import HostGuard

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "wire-test", "version": "1"},
}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


class StdioGateway:
    """A gateway process spoken to in JSON lines."""

    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen(
            [PY, "-m", "toolkeeper", "serve", "--config", str(config)],
            cwd=config.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )

    def send(self, message: dict[str, Any] | str) -> None:
        assert self.process.stdin is not None
        line = message if isinstance(message, str) else json.dumps(message)
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def answer(self, request_id: Any) -> dict[str, Any]:
        """The next response to `request_id` (notifications in between are skipped)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            assert line, "the gateway closed stdout"
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return message
        raise AssertionError(f"no answer to {request_id!r}")

    def call(self, request_id: Any, params: dict[str, Any]) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        return self.answer(request_id)

    def close(self) -> None:
        stop(self.process)


def wait_for_tools(gateway: StdioGateway, meta: dict[str, Any] | None = None) -> None:
    params: dict[str, Any] = {"_meta": meta} if meta else {}
    for attempt in range(100):
        gateway.send({"jsonrpc": "2.0", "id": f"list-{attempt}", "method": "tools/list", "params": params})
        names = [t["name"] for t in gateway.answer(f"list-{attempt}")["result"]["tools"]]
        if "ctl__echo" in names:
            return
        time.sleep(0.1)
    raise AssertionError("the downstream's tools never showed")


def recorded_calls(record: Path) -> list[str]:
    if not record.exists():
        return []
    return [json.loads(line)["method"] for line in record.read_text().splitlines() if "tools/call" in line]


def test_a_handshake_era_call_before_initialize_is_refused_and_never_runs(tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    config = write_config(tmp_path, {"ctl": controllable(server_args={"record": record})})
    gateway = StdioGateway(config)
    try:
        answer = gateway.call(1, {"name": "ctl__echo", "arguments": {"text": "too early"}})
        assert "error" in answer and "result" not in answer
        # The gateway is still there and serves the client once it has initialized.
        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        gateway.send({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": init})
        assert gateway.answer(2)["result"]["protocolVersion"] == "2025-06-18"
        gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        wait_for_tools(gateway)
        result = gateway.call(3, {"name": "ctl__echo", "arguments": {"text": "now"}})["result"]
        # A handshake-era client gets the fields of its era only, as from a direct connection.
        assert "resultType" not in result
        assert SERVER_INFO not in (result.get("_meta") or {})
        assert result["structuredContent"] == {"echo": "now"}
    finally:
        gateway.close()
    assert recorded_calls(record) == ["tools/call"]  # only the call after initialize ran


def test_a_modern_call_on_the_fast_lane_gets_its_era_fields_and_bad_text_hurts_nobody(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = StdioGateway(config)
    try:
        wait_for_tools(gateway, ENVELOPE)
        pid_before = gateway.call(1, {"name": "ctl__pid", "arguments": {}, "_meta": ENVELOPE})["result"]
        result = gateway.call(2, {"name": "ctl__echo", "arguments": {"text": "hi"}, "_meta": ENVELOPE})[
            "result"
        ]
        assert result["resultType"] == "complete"
        assert result["_meta"][SERVER_INFO]["name"] == "toolkeeper"  # the server this client talks to
        assert result["structuredContent"] == {"echo": "hi"}

        # Text with no UTF-8 form is refused for this request alone; the shared downstream and
        # its state survive.
        bad = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ctl__echo",'
        bad += '"arguments":{"text":"\\ud800"},"_meta":' + json.dumps(ENVELOPE) + "}}"
        gateway.send(bad)
        refused = gateway.answer(3)
        assert refused["error"]["code"] == -32602
        assert "cannot be encoded" in refused["error"]["message"]
        pid_after = gateway.call(4, {"name": "ctl__pid", "arguments": {}, "_meta": ENVELOPE})["result"]
        assert pid_after["content"] == pid_before["content"]

        unknown = gateway.call(5, {"name": "ctl__nothing", "arguments": {}, "_meta": ENVELOPE})
        assert (
            unknown["error"]["code"] == -32602
            and "Unknown tool 'ctl__nothing'" in unknown["error"]["message"]
        )
    finally:
        gateway.close()


def test_the_http_fast_lane_answers_plain_modern_calls_and_leaves_the_rest_to_the_sdk(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    port = free_port()
    gateway = spawn_http_gateway(config, port)
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": "ctl__echo",
    }

    def post(body: dict[str, Any], **extra: str) -> tuple[int, str, str]:
        request = urllib.request.Request(url, json.dumps(body).encode(), {**headers, **extra})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.headers["content-type"], response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("content-type", ""), exc.read().decode()

    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ctl__echo", "arguments": {"text": "over http"}, "_meta": ENVELOPE},
    }
    try:
        wait_port(port)
        for _ in range(100):
            status, kind, body = post(call)
            if kind.startswith("application/json") and '"result"' in body:
                break
            time.sleep(0.1)
        assert status == 200
        result = json.loads(body)["result"]
        assert result["structuredContent"] == {"echo": "over http"}
        assert result["_meta"][SERVER_INFO]["name"] == "toolkeeper"

        # Headers that disagree with the body: the SDK's refusal, not the fast lane's answer.
        status, _, body = post(call, **{"mcp-name": "ctl__other"})
        assert status >= 400 or '"error"' in body
        assert '"over http"' not in body
        # A foreign Host is never served.
        assert post(call, host="evil.example.com")[0] == 421
    finally:
        stop(gateway)


@pytest.mark.parametrize(
    ("host", "origin", "allowed"),
    [
        ("localhost:8765", None, True),
        ("127.0.0.1:8765", "http://localhost:3000", True),
        ("[::1]:8765", None, True),
        ("localhost", None, True),
        ("evil.example.com", None, False),
        ("localhost:8765@evil.com", None, False),
        ("localhost:8765, evil.example.com", None, False),
        ("localhost:8765", "http://localhost:8765.evil.com", False),
        ("localhost:8765", "http://user@localhost:8765", False),
        ("localhost:8765", "http://evil.example.com", False),
        (None, None, False),
    ],
)
def test_the_fast_lanes_host_check_parses_instead_of_matching_prefixes(
    host: str | None, origin: str | None, allowed: bool
) -> None:
    names = ["localhost", "127.0.0.1", "[::1]"]
    guard = HostGuard(
        [h for name in names for h in (name, f"{name}:*")],
        [o for name in names for o in (f"http://{name}", f"http://{name}:*")],
    )
    assert guard.allows(host, origin) is allowed
