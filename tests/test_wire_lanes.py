"""The gateway's call lanes on the wire: JSON lines written to a real `toolkeeper serve` over
stdio, and POSTs to a real one over HTTP. What the SDK's client would hide (which fields a
result carries, what happens before `initialize`) is checked on the raw messages."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    SERVED_METHODS,
    controllable,
    free_port,
    spawn_http_gateway,
    spawn_stdio_gateway,
    stop,
    wait_port,
    write_config,
)

from toolkeeper.edge.guard import HostGuard
from toolkeeper.jsonwire import MAX_NESTING

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
        self.process = spawn_stdio_gateway(config)

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
    config = write_config(tmp_path, {"ctl": controllable()}, http={"maxRequestBytes": 4096})
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
        # A call the fast lane would take but for its size is refused under the request limit.
        oversized = {**call, "params": {**call["params"], "arguments": {"text": "x" * 8000}}}
        status, _, body = post(oversized)
        assert status == 413 and "x" * 100 not in body
        assert post(call)[0] == 200  # and the next is served
    finally:
        stop(gateway)


def test_a_modern_http_call_whose_client_leaves_is_cancelled_downstream(tmp_path: Path) -> None:
    """The fast lane answers a plain modern call on its POST alone: a client that closes the
    connection has given up on the call, and the server is told so."""
    record = tmp_path / "record.jsonl"
    config = write_config(tmp_path, {"ctl": controllable(server_args={"record": record})})
    port = free_port()
    gateway = spawn_http_gateway(config, port)

    def methods() -> list[str]:
        lines = record.read_text().splitlines() if record.exists() else []
        return [json.loads(line)["method"] for line in lines]

    def request(tool: str, arguments: dict[str, Any]) -> bytes:
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": ENVELOPE},
        }
        body = json.dumps(call).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            f"accept: application/json, text/event-stream\r\nmcp-protocol-version: {MODERN}\r\n"
            f"mcp-method: tools/call\r\nmcp-name: {tool}\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    try:
        wait_port(port)
        deadline = time.monotonic() + 20
        answer = b""
        # Until the gateway has started, a call is the SDK's; the fast lane answers with JSON.
        while b"application/json" not in answer and time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(request("ctl__echo", {"text": "ready"}))
                answer = b""
                while b"}" not in answer and (chunk := client.recv(65536)):
                    answer += chunk
            time.sleep(0.1)
        assert b"application/json" in answer and b"ready" in answer
        calls = methods().count("tools/call")
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(request("ctl__sleep", {"seconds": 30}))
            while methods().count("tools/call") == calls and time.monotonic() < deadline:
                time.sleep(0.05)
        while "notifications/cancelled" not in methods() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert methods()[-2:] == ["tools/call", "notifications/cancelled"]
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
        ("localhost:8765", "http://[::1].evil.com", False),
        ("localhost:8765", "http://[::1]:8765.evil.com", False),
        ("localhost:8765", "http://[::1]evil.com:8765", False),
        ("localhost:8765", "http://[::1]:8765", True),
        ("localhost:8765", "http://LOCALHOST:8765", True),
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
    assert (guard.problem(host, origin) is None) is allowed


# --- Hardening: bad input is answered for that request alone, at the transport's edge ---

HANDSHAKE_INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "wire-test", "version": "1"},
}


def open_handshake(gateway: StdioGateway) -> None:
    """Open a handshake-era session on a stdio gateway: initialize, then initialized."""
    gateway.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": HANDSHAKE_INIT})
    gateway.answer("init")
    gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


def ready_in(gateway: StdioGateway, era: str) -> dict[str, Any]:
    """A stdio gateway ready for calls in `era` ("modern" or "handshake"), its tools listed: the
    `_meta` its calls carry."""
    meta = ENVELOPE if era == "modern" else {}
    if era == "handshake":
        open_handshake(gateway)
    wait_for_tools(gateway, meta or None)
    return meta


SURROGATE_TEXT = '"\\ud800"'  # JSON's escape for a lone UTF-16 surrogate, which has no UTF-8 form


def surrogate_call(request_id: Any, meta: dict[str, Any], where: str) -> str:
    """A tools/call line whose arguments or `_meta` hold a lone surrogate (as the raw escape)."""
    arguments = '{"text":' + SURROGATE_TEXT + "}" if where == "arguments" else '{"text":"fine"}'
    meta_json = json.dumps(meta)
    if where == "_meta":
        meta_json = meta_json[:-1] + (", " if meta else "") + '"com.example/note":' + SURROGATE_TEXT + "}"
    return (
        f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"method":"tools/call","params":'
        f'{{"name":"ctl__echo","arguments":{arguments},"_meta":{meta_json}}}}}'
    )


def pid_of(result: dict[str, Any]) -> str:
    return str(result["result"]["content"][0]["text"])


@pytest.mark.parametrize("era", ["modern", "handshake"])
def test_a_lone_surrogate_is_refused_for_that_request_alone_and_the_shared_server_lives_on_over_stdio(
    tmp_path: Path, era: str
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = StdioGateway(config)
    try:
        meta = ready_in(gateway, era)
        pid_before = pid_of(gateway.call("pid-1", {"name": "ctl__pid", "arguments": {}, "_meta": meta}))
        # A slow call in flight on the same downstream must come back whole.
        slow = {"name": "ctl__sleep", "arguments": {"seconds": 1.5}, "_meta": {**meta, "progressToken": "p"}}
        gateway.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call", "params": slow})
        # The plain call (the modern client's fast lane) and one with a progress token (the
        # SDK's path and its relay), each with the surrogate in its arguments and in `_meta`.
        for number, (extra, where) in enumerate(
            [
                ({}, "arguments"),
                ({}, "_meta"),
                ({"progressToken": 9}, "arguments"),
                ({"progressToken": 9}, "_meta"),
            ]
        ):
            gateway.send(surrogate_call(f"bad-{number}", {**meta, **extra}, where))
            refused = gateway.answer(f"bad-{number}")
            assert refused["error"]["code"] == -32602, refused
            assert "surrogate" in refused["error"]["message"]
        assert gateway.answer("slow")["result"]["content"][0]["text"] == "slept"
        pid_after = pid_of(gateway.call("pid-2", {"name": "ctl__pid", "arguments": {}, "_meta": meta}))
        assert pid_after == pid_before  # the downstream was never restarted
    finally:
        gateway.close()


class HttpGateway:
    """A gateway over HTTP spoken to with raw requests (any Host header, any body)."""

    def __init__(self, config: Path, port: int | None = None, **spawned: Any) -> None:
        self.port = port or free_port()
        self.process = spawn_http_gateway(config, self.port, **spawned)
        wait_port(self.port)

    def request(
        self,
        body: bytes | str | dict[str, Any] | list[Any] = b"",
        method: str = "POST",
        path: str = "/mcp",
        **headers: str,
    ) -> tuple[int, dict[str, str], str]:
        import http.client

        data = (
            body
            if isinstance(body, bytes)
            else (body if isinstance(body, str) else json.dumps(body)).encode()
        )
        wire_headers = {
            "host": f"127.0.0.1:{self.port}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            **{k.replace("_", "-"): v for k, v in headers.items()},
        }
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for key, value in wire_headers.items():
                connection.putheader(key, value)
            connection.putheader("content-length", str(len(data)))
            connection.endheaders(data)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
        finally:
            connection.close()

    def rpc(self, body: Any, **headers: str) -> dict[str, Any]:
        """The one JSON-RPC message a POST was answered with (plain JSON or one SSE event)."""
        status, _, text = self.request(body, **headers)
        messages = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
        answers = [m for m in messages if "method" not in m] if messages else [json.loads(text)]
        assert len(answers) == 1, (status, text)
        return answers[0]

    def handshake(self) -> dict[str, str]:
        """A fresh handshake-era session: the headers its requests carry."""
        status, headers, _ = self.request(
            {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": HANDSHAKE_INIT}
        )
        assert status == 200
        session = {"mcp_session_id": headers["mcp-session-id"], "mcp_protocol_version": "2025-06-18"}
        self.request({"jsonrpc": "2.0", "method": "notifications/initialized"}, **session)
        return session

    def close(self) -> None:
        stop(self.process)


def modern_headers(name: str) -> dict[str, str]:
    return {"mcp_protocol_version": MODERN, "mcp_method": "tools/call", "mcp_name": name}


def wait_for_http_tools(gateway: HttpGateway) -> None:
    for _ in range(100):
        answer = gateway.rpc(
            {
                "jsonrpc": "2.0",
                "id": "w",
                "method": "tools/call",
                "params": {"name": "ctl__pid", "arguments": {}, "_meta": ENVELOPE},
            },
            **modern_headers("ctl__pid"),
        )
        if "result" in answer and not answer["result"].get("isError"):
            return
        time.sleep(0.1)
    raise AssertionError("the downstream's tools never showed")


def test_a_lone_surrogate_over_http_is_refused_for_that_request_alone_in_both_eras(tmp_path: Path) -> None:
    import threading

    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = HttpGateway(config)
    try:
        wait_for_http_tools(gateway)
        pid_call = {"name": "ctl__pid", "arguments": {}, "_meta": ENVELOPE}
        pid_before = pid_of(
            gateway.rpc(
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": pid_call},
                **modern_headers("ctl__pid"),
            )
        )
        # Another client's call in flight on the shared downstream.
        slow: dict[str, Any] = {}
        slow_call = {"name": "ctl__sleep", "arguments": {"seconds": 1.5}, "_meta": ENVELOPE}
        in_flight = threading.Thread(
            target=lambda: slow.update(
                gateway.rpc(
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": slow_call},
                    **modern_headers("ctl__sleep"),
                )
            )
        )
        in_flight.start()
        session = gateway.handshake()
        for number, (meta, headers) in enumerate(
            [
                (ENVELOPE, modern_headers("ctl__echo")),  # the fast lane
                ({**ENVELOPE, "progressToken": 5}, modern_headers("ctl__echo")),  # the SDK's modern path
                ({"progressToken": 5}, session),  # a handshake-era session
                ({}, session),
            ]
        ):
            for where in ("arguments", "_meta"):
                refused = gateway.rpc(surrogate_call(f"bad-{number}-{where}", meta, where), **headers)
                assert refused["id"] == f"bad-{number}-{where}"
                assert refused["error"]["code"] == -32602, refused
        in_flight.join(30)
        assert slow["result"]["content"][0]["text"] == "slept"
        pid_after = pid_of(
            gateway.rpc(
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": pid_call},
                **modern_headers("ctl__pid"),
            )
        )
        assert pid_after == pid_before
    finally:
        gateway.close()


def test_the_exact_host_and_origin_check_decides_for_every_http_request(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = HttpGateway(config)
    port = gateway.port
    initialize = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": HANDSHAKE_INIT}
    try:
        session = gateway.handshake()
        bad = [
            ({"host": f"localhost:{port}@evil.com"}, 421),
            ({"host": f"localhost:{port}, evil.example.com"}, 421),
            ({"origin": f"http://localhost:{port}.evil.com"}, 403),
            ({"origin": "http://[::1].evil.com"}, 403),
        ]
        for headers, status in bad:
            # An initialize POST (the SDK's path) and a GET of the session's stream.
            answered, _, text = gateway.request(initialize, **headers)
            assert (answered, text) == (
                status,
                "Invalid Host header" if status == 421 else "Invalid Origin header",
            )
            answered, _, _ = gateway.request(method="GET", accept="text/event-stream", **session, **headers)
            assert answered == status
            answered, _, _ = gateway.request(method="DELETE", **session, **headers)
            assert answered == status
        # Good names still pass.
        assert (
            gateway.request(initialize, host=f"localhost:{port}", origin=f"http://localhost:{port}")[0] == 200
        )
    finally:
        gateway.close()


# (line, the error code, the id the answer carries)
MALFORMED = [
    *[
        (
            json.dumps({"jsonrpc": "2.0", "id": f"{method}-{kind}", "method": method, "params": params}),
            -32602,
            f"{method}-{kind}",
        )
        for method in SERVED_METHODS
        for kind, params in (("array", []), ("string", "str"), ("number", 1))
    ],
    ('{"jsonrpc":"2.0","id":', -32700, None),
    ("[]", -32600, None),
    ('[{"jsonrpc":"2.0","id":"in-batch","method":"ping"}]', -32600, None),
    ('"a string"', -32600, None),
    (json.dumps({"jsonrpc": "1.0", "id": "v1", "method": "ping"}), -32600, "v1"),
    (json.dumps({"id": "no-version", "method": "ping"}), -32600, "no-version"),
    (json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), -32600, None),
    (json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}), -32600, None),
    (json.dumps({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}), -32600, None),
    (json.dumps({"jsonrpc": "2.0", "id": True, "method": "ping"}), -32600, None),
    (json.dumps({"jsonrpc": "2.0", "id": "no-method"}), -32600, "no-method"),
    (
        '{"jsonrpc":"2.0","id":"sur-param","method":"ping","params":{"x":' + SURROGATE_TEXT + "}}",
        -32602,
        "sur-param",
    ),
    (
        '{"jsonrpc":"2.0","id":"sur-key","method":"tools/list","params":{' + SURROGATE_TEXT + ":1}}",
        -32602,
        "sur-key",
    ),
    ('{"jsonrpc":"2.0","id":' + SURROGATE_TEXT + ',"method":"ping"}', -32602, "\ud800"),
    (
        '{"jsonrpc":"2.0","id":"deep","method":"ping","params":{"x":' + "[" * 10_000 + "]" * 10_000 + "}}",
        -32602,
        "deep",
    ),
]


def test_every_malformed_request_over_stdio_gets_one_answer_and_the_session_reads_on(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = StdioGateway(config)
    try:
        wait_for_tools(gateway, ENVELOPE)
        for line, code, request_id in MALFORMED:
            gateway.send(line)
            # Malformed notifications get no answer (JSON-RPC answers no notification); the
            # session must still read on, so a good request follows each.
            gateway.send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":[]}')
            gateway.send('{"jsonrpc":"2.0","method":"notifications/x","params":{"x":' + SURROGATE_TEXT + "}}")
            gateway.send(
                {"jsonrpc": "2.0", "id": "after", "method": "tools/list", "params": {"_meta": ENVELOPE}}
            )
            answers = next_messages(gateway, 2)
            assert answers[0]["id"] == request_id and answers[0]["error"]["code"] == code, (
                line[:80],
                answers,
            )
            assert answers[1]["id"] == "after" and "result" in answers[1], (line[:80], answers)
    finally:
        gateway.close()


@pytest.mark.parametrize("limit", [None, 32768])
def test_a_stdio_line_past_the_limit_is_answered_naming_the_setting_and_the_gateway_reads_on(
    tmp_path: Path, limit: int | None
) -> None:
    settings = {"stdio": {"maxMessageBytes": limit}} if limit else {}
    config = write_config(tmp_path, {"ctl": controllable()}, **settings)
    expected = limit or 4 * 1024 * 1024
    gateway = StdioGateway(config)
    try:
        wait_for_tools(gateway, ENVELOPE)
        gateway.send(
            '{"jsonrpc":"2.0","id":"long","method":"ping","params":{"x":"' + "y" * (expected + 10) + '"}}'
        )
        too_long = next_messages(gateway, 1)[0]
        assert too_long["id"] is None and too_long["error"]["code"] == -32600
        assert str(expected) in too_long["error"]["message"]
        assert "toolkeeper.stdio.maxMessageBytes" in too_long["error"]["message"]
        result = gateway.call(
            "good", {"name": "ctl__echo", "arguments": {"text": "still here"}, "_meta": ENVELOPE}
        )
        assert result["result"]["structuredContent"] == {"echo": "still here"}
    finally:
        gateway.close()


def next_messages(gateway: StdioGateway, count: int) -> list[dict[str, Any]]:
    """The next `count` responses the gateway writes (notifications skipped)."""
    assert gateway.process.stdout is not None
    answers: list[dict[str, Any]] = []
    while len(answers) < count:
        # Bounded, so a gateway that never answers fails the test instead of hanging it.
        ready, _, _ = select.select([gateway.process.stdout], [], [], 30)
        assert ready, f"no answer within 30 s; got answers to {[a.get('id') for a in answers]}"
        line = gateway.process.stdout.readline()
        assert line, "the gateway closed stdout"
        message = json.loads(line)
        if "method" not in message:
            answers.append(message)
    return answers


def test_every_malformed_post_over_http_gets_a_json_rpc_answer(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = HttpGateway(config)
    try:
        session = gateway.handshake()
        for line, code, request_id in MALFORMED:
            for headers in (session, {"mcp_protocol_version": MODERN}):
                status, _, text = gateway.request(line, **headers)
                answer = json.loads(text)
                assert status == 400 and answer["error"]["code"] == code, (line[:80], status, text[:300])
                assert answer["id"] == request_id
        # The session still serves its client.
        assert gateway.rpc({"jsonrpc": "2.0", "id": "after", "method": "ping"}, **session)["result"] == {}
    finally:
        gateway.close()


def test_two_calls_in_flight_with_one_id_in_one_http_session_both_get_an_answer(tmp_path: Path) -> None:
    import threading

    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = HttpGateway(config)
    try:
        wait_for_http_tools(gateway)
        session = gateway.handshake()
        first: dict[str, Any] = {}
        slow = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "ctl__sleep", "arguments": {"seconds": 1.5}},
        }
        in_flight = threading.Thread(target=lambda: first.update(gateway.rpc(slow, **session)))
        in_flight.start()
        time.sleep(0.5)  # lets the first call reach the server (the assertions do not depend on it)
        echo = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "ctl__echo", "arguments": {"text": "x"}},
        }
        second = gateway.rpc(echo, **session)
        in_flight.join(30)
        assert first["id"] == 7 and first["result"]["content"][0]["text"] == "slept"
        assert second["id"] == 7
        assert ("error" in second and "still in flight" in second["error"]["message"]) or second["result"][
            "structuredContent"
        ] == {"echo": "x"}
    finally:
        gateway.close()


def test_a_second_initialize_is_refused_and_the_version_stays_over_stdio_and_http(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    older = {**HANDSHAKE_INIT, "protocolVersion": "2024-11-05"}
    gateway = StdioGateway(config)
    try:
        # Before initialize, no method but ping is served.
        for method in ("tools/list", "resources/list", "prompts/list", "tools/call"):
            gateway.send({"jsonrpc": "2.0", "id": method, "method": method, "params": {}})
            assert "error" in gateway.answer(method)
        gateway.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HANDSHAKE_INIT})
        assert gateway.answer(1)["result"]["protocolVersion"] == "2025-06-18"
        gateway.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        gateway.send({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": older})
        again = gateway.answer(2)
        assert again["error"]["code"] == -32600 and "already initialized" in again["error"]["message"]
        wait_for_tools(gateway)
        # Still the first version: a 2025-06-18 result carries structuredContent.
        assert gateway.call(3, {"name": "ctl__echo", "arguments": {"text": "v"}})["result"][
            "structuredContent"
        ] == {"echo": "v"}
    finally:
        gateway.close()
    http = HttpGateway(config)
    try:
        session = http.handshake()
        again = http.rpc({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": older}, **session)
        assert again["error"]["code"] == -32600 and "already initialized" in again["error"]["message"]
        # Before initialize over HTTP there is no session to send a call on.
        call = {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "ctl__pid", "arguments": {}},
        }
        assert "error" in http.rpc(call, mcp_protocol_version="2025-06-18")
    finally:
        http.close()


@pytest.mark.parametrize("stdin_kind", ["a file", "/dev/null"])
def test_a_gateway_reading_a_file_and_writing_a_file_answers_every_line_as_over_pipes(
    tmp_path: Path, stdin_kind: str
) -> None:
    """`toolkeeper serve < requests.jsonl > answers.jsonl`: the event loop cannot drive files
    as pipes (libuv's loop aborted the process), so they are copied through pipes."""
    config = write_config(tmp_path, {"ctl": controllable()})
    requests = tmp_path / "requests.jsonl"
    listing = {"jsonrpc": "2.0", "method": "tools/list", "params": {"_meta": ENVELOPE}}
    requests.write_text(f"{json.dumps({**listing, 'id': 1})}\nnot json\n{json.dumps({**listing, 'id': 2})}\n")
    answers = tmp_path / "answers.jsonl"
    source = requests if stdin_kind == "a file" else Path("/dev/null")
    with source.open("rb") as stdin, answers.open("wb") as stdout:
        process = spawn_stdio_gateway(config, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert b"the client closed stdin" in stderr
    got = [json.loads(line) for line in answers.read_text().splitlines()]
    if stdin_kind == "/dev/null":
        assert got == []
        return
    by_id = {message.get("id"): message for message in got}
    assert len(got) == 3, got
    assert by_id[None]["error"]["code"] == -32700
    assert all(isinstance(by_id[i]["result"]["tools"], list) for i in (1, 2)), got


# --- Nesting: a message nested past the limit is refused under its own id, everywhere ---

# The message, its params and the arguments object take the first three levels.
ARGUMENTS_AT_THE_LIMIT = MAX_NESTING - 3
# Past the limit: about where Python's recursion limit lies, past what orjson reads, far past.
PAST_THE_LIMIT = (1_000, 1_030, 20_000)


def nested_call(request_id: str, depth: int, meta: dict[str, Any]) -> str:
    """A call of echo whose `text` is `depth` arrays inside each other (valid JSON)."""
    arguments = '{"text":' + "[" * depth + "]" * depth + "}"
    return (
        f'{{"jsonrpc":"2.0","id":"{request_id}","method":"tools/call","params":'
        f'{{"name":"ctl__echo","arguments":{arguments},"_meta":{json.dumps(meta)}}}}}'
    )


def check_refused_for_nesting(answer: dict[str, Any], request_id: str) -> None:
    assert answer["id"] == request_id, answer
    assert answer["error"]["code"] == -32602, answer
    assert f"deeper than the {MAX_NESTING} levels" in answer["error"]["message"], answer


@pytest.mark.parametrize("era", ["modern", "handshake"])
def test_a_call_nested_past_the_limit_is_refused_under_its_own_id_over_stdio(
    tmp_path: Path, era: str
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = StdioGateway(config)
    try:
        meta = ready_in(gateway, era)
        # A plain call (the modern client's fast lane) and one with a progress token (the SDK's path).
        for extra in ({}, {"progressToken": 1}):
            for depth in PAST_THE_LIMIT:
                request_id = f"deep-{depth}-{len(extra)}"
                gateway.send(nested_call(request_id, depth, {**meta, **extra}))
                check_refused_for_nesting(gateway.answer(request_id), request_id)
            request_id = f"at-limit-{len(extra)}"
            gateway.send(nested_call(request_id, ARGUMENTS_AT_THE_LIMIT, {**meta, **extra}))
            echoed = gateway.answer(request_id)["result"]["structuredContent"]["echo"]
            assert echoed == "[" * ARGUMENTS_AT_THE_LIMIT + "]" * ARGUMENTS_AT_THE_LIMIT
    finally:
        gateway.close()


def test_a_call_nested_past_the_limit_is_refused_under_its_own_id_over_http_in_both_eras(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    gateway = HttpGateway(config)
    try:
        wait_for_http_tools(gateway)
        session = gateway.handshake()
        for number, (meta, headers) in enumerate(
            [
                (ENVELOPE, modern_headers("ctl__echo")),  # the fast lane
                ({**ENVELOPE, "progressToken": 5}, modern_headers("ctl__echo")),  # the SDK's modern path
                ({}, session),  # a handshake-era session
            ]
        ):
            for depth in PAST_THE_LIMIT:
                request_id = f"deep-{number}-{depth}"
                check_refused_for_nesting(
                    gateway.rpc(nested_call(request_id, depth, meta), **headers), request_id
                )
            at_limit = gateway.rpc(nested_call(f"at-limit-{number}", ARGUMENTS_AT_THE_LIMIT, meta), **headers)
            assert at_limit["result"]["structuredContent"]["echo"] == "[" * ARGUMENTS_AT_THE_LIMIT + "]" * (
                ARGUMENTS_AT_THE_LIMIT
            )
    finally:
        gateway.close()
