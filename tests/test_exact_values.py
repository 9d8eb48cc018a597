"""Numbers pass through the gateway exactly as written: integers past 64 bits and decimals with
more digits than a double holds, in a tool's arguments and in its results, on every lane (a
client of either era, over stdio and HTTP, to a server over stdio and HTTP). A test server
answers with the raw text it received, so the test sees every digit as it arrived."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import CONTROLLABLE, PY, controllable, free_port, spawn, stop, wait_port, write_config
from test_wire_lanes import ENVELOPE, HttpGateway, StdioGateway, modern_headers, open_handshake

# Written into the request as raw JSON text: `json.dumps` would keep the integers, but the
# decimal is the point, and no float holds it.
ARGUMENTS_TEXT = (
    '{"big":18446744073709551617,"negative":-1180591620717411303424,'
    '"huge":10000000000000000000000000000000000000000,'
    '"precise":0.1000000000000000055511151231257827,"plain":1.5,"small":7}'
)
ARGUMENTS = {
    "big": 2**64 + 1,
    "negative": -(2**70),
    "huge": 10**40,
    "precise": Decimal("0.1000000000000000055511151231257827"),
    "plain": Decimal("1.5"),
    "small": 7,
}
# What the test server's big_numbers returns (tests/servers/controllable.py).
BIG_NUMBERS = {"big": 2**64 + 1, "negative": -(2**70), "huge": 10**40}


def exact(text: str) -> Any:
    """JSON text as data with every number exact: integers as ints, decimals as Decimals."""
    return json.loads(text, parse_float=Decimal)


def call_text(request_id: str, tool: str, meta: dict[str, Any], arguments: str = "{}") -> str:
    meta_text = json.dumps(meta)
    return (
        f'{{"jsonrpc":"2.0","id":"{request_id}","method":"tools/call","params":'
        f'{{"name":"{tool}","arguments":{arguments},"_meta":{meta_text}}}}}'
    )


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    """A gateway's config with the numbers server twice: `ctl` over stdio, `web` over HTTP."""
    port = free_port()
    web = spawn([PY, CONTROLLABLE, "--http", str(port), "--numbers"], cwd=tmp_path)
    try:
        wait_port(port)
        yield write_config(
            tmp_path,
            {
                "ctl": {**controllable(), "args": [CONTROLLABLE, "--numbers"]},
                "web": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"},
            },
        )
    finally:
        stop(web)


def received_arguments(raw_answer: str) -> Any:
    """The arguments as the server received them, from the raw text raw_echo answered with."""
    result = exact(raw_answer)["result"]
    return exact(result["content"][0]["text"])["params"]["arguments"]


def assert_exact_both_ways(call: Any, server: str) -> None:
    """`call(request_id, tool, arguments_text)` returns a raw answer: the arguments reach the
    server exactly, and big integers in its result reach the client exactly."""
    assert received_arguments(call("echo", f"{server}__raw_echo", ARGUMENTS_TEXT)) == ARGUMENTS
    result = exact(call("big", f"{server}__big_numbers", "{}"))["result"]
    assert result["structuredContent"] == BIG_NUMBERS
    assert exact(result["content"][0]["text"]) == BIG_NUMBERS


def stdio_raw_answer(gateway: StdioGateway, request_id: str) -> str:
    """The raw line that answers `request_id` (notifications in between are skipped)."""
    assert gateway.process.stdout is not None
    while True:
        line = gateway.process.stdout.readline().decode()
        assert line, "the gateway closed stdout"
        message = json.loads(line)
        if message.get("id") == request_id and "method" not in message:
            return line


def wait_for_numbers(call: Any) -> None:
    """Until both servers' tools answer (the gateway connects to them after it starts)."""
    for attempt in range(200):
        answers = [json.loads(call(f"ready-{attempt}", f"{s}__big_numbers", "{}")) for s in ("ctl", "web")]
        if all("result" in a and not a["result"].get("isError") for a in answers):
            return
        time.sleep(0.1)
    raise AssertionError("the numbers servers' tools never showed")


@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_numbers_pass_exactly_over_stdio(config: Path, era: str) -> None:
    gateway = StdioGateway(config)
    meta = ENVELOPE if era == "modern" else {}
    if era == "handshake":
        open_handshake(gateway)

    def call(request_id: str, tool: str, arguments: str) -> str:
        gateway.send(call_text(request_id, tool, meta, arguments))
        return stdio_raw_answer(gateway, request_id)

    try:
        wait_for_numbers(call)
        assert_exact_both_ways(call, "ctl")
        assert_exact_both_ways(call, "web")
    finally:
        gateway.close()


def http_raw_answer(text: str) -> str:
    """The one answer in a POST's body: plain JSON or the data of one SSE event."""
    events = [line[5:] for line in text.splitlines() if line.startswith("data:")]
    answers = [event for event in events if '"method"' not in event[:40]] if events else [text]
    assert len(answers) == 1, text
    return answers[0]


@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_numbers_pass_exactly_over_http(config: Path, era: str) -> None:
    gateway = HttpGateway(config)
    session = gateway.handshake() if era == "handshake" else {}
    meta = ENVELOPE if era == "modern" else {}

    def call(request_id: str, tool: str, arguments: str) -> str:
        headers = modern_headers(tool) if era == "modern" else session
        status, _, text = gateway.request(call_text(request_id, tool, meta, arguments), **headers)
        assert status == 200, text
        return http_raw_answer(text)

    try:
        wait_for_numbers(call)
        assert_exact_both_ways(call, "ctl")
        assert_exact_both_ways(call, "web")
    finally:
        gateway.close()
