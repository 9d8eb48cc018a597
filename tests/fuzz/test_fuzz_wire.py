"""Property-based fuzzing of the gateway's wire: JSON-RPC messages, well-formed and not, for
every method the gateway serves, written to one long-lived gateway over stdio and one over HTTP.

For each message: a request gets exactly one well-formed answer (jsonrpc "2.0", its own id or
null, exactly one of result and error) within a time limit, a notification gets none, the
gateway stays up, and a good call still works after every example.

Bounded for CI: a fixed number of examples, derandomized. `TOOLKEEPER_FUZZ_EXAMPLES=50000`
runs a longer search on demand, with new examples each time.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import select
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ROOT,
    SERVED_METHODS,
    controllable,
    free_port,
    spawn_http_gateway,
    spawn_stdio_gateway,
    stop,
    wait_port,
    write_config,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# CI runs a fixed search (derandomized: the same examples every run); a longer run on demand
# (TOOLKEEPER_FUZZ_EXAMPLES=N) draws new examples each time.
LONG_RUN = os.environ.get("TOOLKEEPER_FUZZ_EXAMPLES")
settings.register_profile(
    "toolkeeper-fuzz",
    max_examples=int(LONG_RUN or 4000),
    derandomize=LONG_RUN is None,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
ANSWER_WITHIN = 30.0  # seconds; a request unanswered by then counts as never answered
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
}
# Every method the gateway serves but subscriptions/listen, whose answer is a stream held open,
# the client notifications it takes, and one it does not know.
METHODS = [
    *(method for method in SERVED_METHODS if method != "subscriptions/listen"),
    "notifications/initialized",
    "notifications/cancelled",
    "no/such-method",
]
ABSENT = object()
ids = itertools.count(1)

# Text, sometimes holding lone surrogates (JSON's \ud800 escapes, which have no UTF-8 form).
texts = st.one_of(
    st.text(max_size=12),
    st.lists(st.sampled_from(["a", "\ud800", "\udfff", "é", "\x00", "\U0001f600"]), max_size=6).map("".join),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)
params_objects = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["ctl__echo", "ctl__pid"]) | texts,
        "arguments": st.dictionaries(texts, json_values, max_size=3) | json_values,
        "uri": texts,
        "level": st.sampled_from(["debug", "info", "error"]) | texts,
        "cursor": texts,
        "protocolVersion": st.sampled_from(["2025-06-18", "2024-11-05", MODERN]) | texts,
        "_meta": st.just(ENVELOPE)
        | st.dictionaries(texts, json_values, max_size=3).map(lambda m: {**ENVELOPE, **m}),
        "extra": json_values,
    },
)


def raw_answer(line: str) -> Any:
    """None (an error with a null id is due) for a raw line that is not a JSON object; ABSENT
    (decided from the message, see answer_due) for one that is: Hypothesis also draws raw lines
    from the code's own string constants, some of which are JSON."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return ABSENT if isinstance(message, dict) else None


@st.composite
def messages(draw: st.DrawFn) -> tuple[str, Any, bool]:
    """(the line, the id its answer must carry or ABSENT for a notification, whether the id is valid)."""
    shape = draw(st.sampled_from(["request", "request", "request", "notification", "raw", "deep"]))
    if shape == "raw":
        line = draw(st.binary(max_size=40).filter(lambda b: b"\n" not in b and b.strip()))
        return line.decode("latin-1"), raw_answer(line.decode("latin-1")), False
    if shape == "deep":
        depth = draw(st.integers(1, 12_000))
        return (
            '{"jsonrpc":"2.0","id":null,"method":"ping","params":{"x":' + "[" * depth + "]" * depth + "}}",
            None,
            False,
        )
    message: dict[str, Any] = {}
    version = draw(st.sampled_from(["2.0"] * 6 + ["1.0", None, 2]))
    if version is not None:
        message["jsonrpc"] = version
    method = draw(st.sampled_from(METHODS) | texts | st.integers())
    message["method"] = method
    params = draw(st.sampled_from([ABSENT, None, [], "str", 1]) | params_objects)
    if params is not ABSENT:
        message["params"] = params
    if shape == "notification":
        return json.dumps(message), ABSENT, False
    kind = draw(st.sampled_from(["int", "str", "str", "float", "null", "bool", "object", "surrogate"]))
    number = next(ids)
    request_id: Any = {
        "int": number,
        "str": f"fuzz-{number}",
        "float": number + 0.5,
        "null": None,
        "bool": True,
        "object": {"n": number},
        "surrogate": f"fuzz-{number}-\ud800",
    }[kind]
    message["id"] = request_id
    valid = kind in ("int", "str", "surrogate")
    return json.dumps(message), request_id if valid else None, valid


def check_well_formed(answer: Any) -> None:
    assert isinstance(answer, dict) and answer.get("jsonrpc") == "2.0", answer
    assert ("result" in answer) != ("error" in answer), answer
    if "error" in answer:
        assert isinstance(answer["error"].get("code"), int) and isinstance(
            answer["error"].get("message"), str
        )


def gateway_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "TOOLKEEPER_HOME": str(home),
        "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "false",
        "TOOLKEEPER_CONFIRM": "never",
    }


def warm_up(wire: StdioWire | HttpWire) -> None:
    """Wait until a good call works: the downstream server is up and listed."""
    for attempt in range(200):
        answer = wire.good_call(f"warm-{attempt}")
        if "result" in answer and not answer["result"].get("isError"):
            return
        time.sleep(0.1)


# --- stdio ---


class StdioWire:
    def __init__(self, config: Path, home: Path) -> None:
        # The gateway's log, for the message of a failure (what it was doing meanwhile).
        self.log = config.parent / "gateway.log"
        with self.log.open("wb") as log:
            self.process = spawn_stdio_gateway(
                config, env={**gateway_env(home), "TOOLKEEPER_LOG_LEVEL": "DEBUG"}, stderr=log
            )
        self.sentinels = itertools.count(1)
        self._pending = b""  # what was read from the gateway's stdout past the last whole line

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode("utf-8", "surrogatepass") + b"\n")
        self.process.stdin.flush()

    def answers_until(self, sentinel: str, also: Any) -> list[dict[str, Any]]:
        """Every response written until the sentinel's answer (and `also`'s, if one is due)."""
        assert self.process.stdout is not None
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + ANSWER_WITHIN
        while not (
            any(a.get("id") == sentinel for a in seen)
            and (also is ABSENT or any(a.get("id") == also for a in seen))
        ):
            line = self._next_line(deadline, seen)
            message = json.loads(line)
            if "method" not in message:
                seen.append(message)
        return seen

    def _next_line(self, deadline: float, seen: list[dict[str, Any]]) -> bytes:
        """The next line the gateway wrote. Read from the pipe itself: a buffered reader may
        already hold the next line while `select` says the pipe has nothing more."""
        assert self.process.stdout is not None
        pipe = self.process.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, (
                f"no answer within {ANSWER_WITHIN}s; answered so far: {[a.get('id') for a in seen]}; "
                "the gateway's log ends with:\n"
                + "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
            )
            chunk = os.read(pipe, 1 << 16)
            assert chunk, "the gateway closed stdout (it is gone)"
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def good_call(self, request_id: str) -> dict[str, Any]:
        params = {"name": "ctl__echo", "arguments": {"text": request_id}, "_meta": ENVELOPE}
        self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}))
        (answer,) = [a for a in self.answers_until(request_id, ABSENT) if a.get("id") == request_id]
        return answer


@pytest.fixture(scope="module")
def stdio_wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioWire]:
    folder = tmp_path_factory.mktemp("fuzz-stdio")
    wire = StdioWire(write_config(folder, {"ctl": controllable()}), folder / "home")
    try:
        warm_up(wire)
        yield wire
    finally:
        stop(wire.process)


def answer_due(line: str, expected: Any) -> Any:
    """The id the one answer to this line carries (None: null), or ABSENT if none is due."""
    if expected is not ABSENT:
        return expected
    message = json.loads(line)
    if message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str):
        return ABSENT  # a notification: JSON-RPC never answers one
    if "method" not in message and ("result" in message or "error" in message):
        # A response, however malformed: never answered over stdio, or two peers could answer
        # each other's bad responses for ever (HTTP answers it with a null id).
        return ABSENT
    return None  # not even a notification: answered with a null id


@settings(settings.get_profile("toolkeeper-fuzz"))
@given(example=messages())
def test_every_request_over_stdio_gets_exactly_one_well_formed_answer(
    stdio_wire: StdioWire, example: tuple[str, Any, bool]
) -> None:
    line, expected, _ = example
    due = answer_due(line, expected)
    sentinel = f"sentinel-{next(stdio_wire.sentinels)}"
    stdio_wire.send(line)
    good = {"jsonrpc": "2.0", "id": sentinel, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    stdio_wire.send(json.dumps(good))
    answers = [a for a in stdio_wire.answers_until(sentinel, due) if a.get("id") != sentinel]
    for answer in answers:
        check_well_formed(answer)
    if due is ABSENT:
        assert answers == [], (line[:200], answers)
    else:
        assert len(answers) == 1 and answers[0]["id"] in (expected, None), (line[:200], answers)
    assert stdio_wire.process.poll() is None


def test_a_good_call_over_stdio_still_works_after_the_fuzzing(stdio_wire: StdioWire) -> None:
    answer = stdio_wire.good_call("after-fuzz")
    assert answer["result"]["structuredContent"] == {"echo": "after-fuzz"}


# --- HTTP ---


class HttpWire:
    def __init__(self, config: Path, home: Path) -> None:
        self.port = free_port()
        self.process = spawn_http_gateway(config, self.port, env=gateway_env(home))
        wait_port(self.port)
        self.session: dict[str, str] = {}

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, list[Any]]:
        """The status and the JSON-RPC responses in the answer (plain JSON or server-sent events)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=ANSWER_WITHIN)
        try:
            connection.request(
                "POST",
                "/mcp",
                body,
                {
                    "content-type": "application/json",
                    "accept": "application/json, text/event-stream",
                    **headers,
                },
            )
            response = connection.getresponse()
            text = response.read().decode("utf-8", "replace")
        finally:
            connection.close()
        if response.getheader("content-type", "").startswith("text/event-stream"):
            # Event streams split lines at CR and LF only (str.splitlines would split at U+0085 too).
            events = [
                json.loads(line[5:])
                for line in re.split(r"\r\n|\r|\n", text)
                if line.startswith("data:") and line[5:].strip()
            ]
            return response.status, [e for e in events if "method" not in e]
        return response.status, [json.loads(text)] if text.strip() else []

    def open_session(self) -> None:
        initialize = {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"},
            },
        }
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=ANSWER_WITHIN)
        try:
            connection.request(
                "POST",
                "/mcp",
                json.dumps(initialize).encode(),
                {"content-type": "application/json", "accept": "application/json, text/event-stream"},
            )
            response = connection.getresponse()
            response.read()
            self.session = {
                "mcp-session-id": response.getheader("mcp-session-id") or "",
                "mcp-protocol-version": "2025-06-18",
            }
        finally:
            connection.close()
        self.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', self.session)

    def good_call(self, request_id: str) -> Any:
        params = {"name": "ctl__echo", "arguments": {"text": request_id}, "_meta": ENVELOPE}
        body = json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        ).encode()
        headers = {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "ctl__echo"}
        status, answers = self.post(body, headers)
        assert status == 200 and len(answers) == 1, (status, answers)
        return answers[0]


@pytest.fixture(scope="module")
def http_wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpWire]:
    folder = tmp_path_factory.mktemp("fuzz-http")
    wire = HttpWire(write_config(folder, {"ctl": controllable()}), folder / "home")
    try:
        warm_up(wire)
        wire.open_session()
        yield wire
    finally:
        stop(wire.process)


def header_safe(value: Any) -> bool:
    return isinstance(value, str) and value.isascii() and value.isprintable() and bool(value)


@settings(settings.get_profile("toolkeeper-fuzz"))
@given(example=messages(), in_session=st.booleans())
def test_every_request_over_http_gets_exactly_one_well_formed_answer(
    http_wire: HttpWire, example: tuple[str, Any, bool], in_session: bool
) -> None:
    line, expected, _ = example
    due = answer_due(line, expected)
    if in_session:
        headers = dict(http_wire.session)
    else:
        headers = {"mcp-protocol-version": MODERN}
        try:
            parsed = json.loads(line)
            method = parsed.get("method") if isinstance(parsed, dict) else None
        except (ValueError, RecursionError):  # not JSON, or nested past what `json` reads
            method = None
        if header_safe(method):
            headers["mcp-method"] = method
    status, answers = http_wire.post(line.encode("utf-8", "surrogatepass"), headers)
    assert status < 500, (line[:200], status, answers)
    for answer in answers:
        check_well_formed(answer)
    if due is ABSENT:
        assert all(a.get("id") is None for a in answers), (line[:200], answers)
    else:
        assert len(answers) == 1 and answers[0]["id"] in (expected, None), (line[:200], status, answers)
    assert http_wire.process.poll() is None


def test_a_good_call_over_http_still_works_after_the_fuzzing(http_wire: HttpWire) -> None:
    answer = http_wire.good_call("after-fuzz")
    assert answer["result"]["structuredContent"] == {"echo": "after-fuzz"}
