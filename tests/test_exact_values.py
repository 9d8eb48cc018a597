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

from toolkeeper import jsonwire

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
# The arguments where the SDK's own models carry them: the decimal as the nearest double.
ROUNDED = {**ARGUMENTS, "precise": Decimal("0.1")}
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


def assert_exact_both_ways(call: Any, server: str, arguments: dict[str, Any] = ARGUMENTS) -> None:
    """`call(request_id, tool, arguments_text)` returns a raw answer: the arguments reach the
    server as `arguments`, and big integers in its result reach the client exactly."""
    assert received_arguments(call(f"echo-{server}", f"{server}__raw_echo", ARGUMENTS_TEXT)) == arguments
    result = exact(call(f"big-{server}", f"{server}__big_numbers", "{}"))["result"]
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


def wait_for(call: Any, tools: list[str], arguments: str = "{}") -> None:
    """Until each of `tools` answers (the gateway connects to its servers after it starts)."""
    for attempt in range(200):
        answers = [json.loads(call(f"ready-{attempt}-{tool}", tool, arguments)) for tool in tools]
        if all("result" in a and not a["result"].get("isError") for a in answers):
            return
        time.sleep(0.1)
    raise AssertionError(f"{tools} never answered")


@pytest.mark.parametrize("progress", [False, True], ids=["plain", "progress"])
@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_numbers_pass_exactly_over_stdio(config: Path, era: str, progress: bool) -> None:
    """A plain call takes the raw lanes; one with a progress token the SDK's session to the
    server, whose models write a decimal as the nearest double (integers stay exact)."""
    gateway = StdioGateway(config)
    meta: dict[str, Any] = {
        **(ENVELOPE if era == "modern" else {}),
        **({"progressToken": 1} if progress else {}),
    }
    if era == "handshake":
        open_handshake(gateway)

    def call(request_id: str, tool: str, arguments: str) -> str:
        gateway.send(call_text(request_id, tool, meta, arguments))
        return stdio_raw_answer(gateway, request_id)

    try:
        wait_for(call, ["ctl__big_numbers", "web__big_numbers"])
        assert_exact_both_ways(call, "ctl", ROUNDED if progress else ARGUMENTS)
        assert_exact_both_ways(call, "web", ROUNDED if progress else ARGUMENTS)
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

    # A handshake-era session over HTTP is the SDK's own transport, which reads a decimal as the
    # nearest double: integers stay exact, the long decimal arrives as that double's digits.
    arguments = ARGUMENTS if era == "modern" else ROUNDED
    try:
        wait_for(call, ["ctl__big_numbers", "web__big_numbers"])
        assert_exact_both_ways(call, "ctl", arguments)
        assert_exact_both_ways(call, "web", arguments)
    finally:
        gateway.close()


# -- to a REST API ------------------------------------------------------------------------------

NUMBERS_API = {
    "openapi": "3.1.0",
    "info": {"title": "Numbers", "version": "1"},
    "paths": {
        "/numbers": {
            "post": {
                "operationId": "store",
                "parameters": [
                    {"name": "n", "in": "query", "schema": {"type": "integer"}},
                    {"name": "at", "in": "query", "schema": {"type": "number"}},
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        }
    },
}


@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_numbers_pass_exactly_to_a_rest_api_and_back(tmp_path: Path, era: str) -> None:
    from echo_api import running_echo

    with running_echo() as api:
        api.answer = b'{"id":18446744073709551617,"balance":0.1000000000000000055511151231257827}'
        spec = tmp_path / "numbers.json"
        spec.write_text(json.dumps({**NUMBERS_API, "servers": [{"url": api.url}]}))
        config = write_config(tmp_path, {"numbers": {"type": "openapi", "spec": str(spec), "prefix": "api"}})
        gateway = StdioGateway(config)
        meta = ENVELOPE if era == "modern" else {}
        try:
            if era == "handshake":
                open_handshake(gateway)

            def call(request_id: str, tool: str, arguments: str) -> str:
                gateway.send(call_text(request_id, tool, meta, arguments))
                return stdio_raw_answer(gateway, request_id)

            wait_for(call, ["api__store"], '{"body":{}}')
            query = '"n":18446744073709551617,"at":0.1000000000000000055511151231257827'
            answer = exact(call("store", "api__store", f'{{{query},"body":{ARGUMENTS_TEXT}}}'))
            assert exact(api.received[-1].body.decode()) == ARGUMENTS
            assert api.received[-1].query == "n=18446744073709551617&at=0.1000000000000000055511151231257827"
            assert answer["result"]["structuredContent"] == {
                "id": 2**64 + 1,
                "balance": Decimal("0.1000000000000000055511151231257827"),
            }
        finally:
            gateway.close()


# -- the codec itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "18446744073709551615",  # the largest integer orjson keeps
        "18446744073709551616",
        "-9223372036854775809",
        "1" + "0" * 400,
        "0.1000000000000000055511151231257827",
        "1e400",
        "-1E+400",
        "1e-400",
        "2.4703282292062328e-324",
        "123456789.123456789",
    ],
)
def test_the_codec_writes_every_number_as_it_read_it(text: str) -> None:
    message = f'{{"jsonrpc":"2.0","id":1,"result":{{"n":{text},"list":[{text}],"plain":1.5}}}}'.encode()
    value, surrogate_at = jsonwire.read(message)
    assert surrogate_at is None
    assert jsonwire.dumps(value) == message
    assert jsonwire.dumps(jsonwire.loads(message)) == message


def test_the_codec_reads_ordinary_numbers_as_plain_values() -> None:
    value = jsonwire.loads(b'{"a":0.1,"b":1e300,"c":-7,"d":12345678901234567890123,"e":"12345678901234567"}')
    assert value == {"a": 0.1, "b": 1e300, "c": -7, "d": 12345678901234567890123, "e": "12345678901234567"}
    assert type(value["a"]) is float and type(value["b"]) is float  # only inexact ones are kept as text
