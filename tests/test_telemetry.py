"""Health probes, /metrics and OpenTelemetry, through real gateway processes over HTTP and real
clients of both eras: the probes answer without a token and say nothing else, /metrics needs
an admin credential and counts what the calls did, and an in-process OTLP collector receives a
span per call (continuing the client's trace, passed on downstream) and the calls' metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import MODES, controllable, eventually, free_port, gateway_params, write_config
from mcp import Client
from otlp_collector import otlp_collector
from test_auth import client_with, new_key
from test_wire_lanes import HttpGateway

from toolkeeper.edge.health import Health
from toolkeeper.pipeline.otel_switch import signals

pytestmark = pytest.mark.anyio

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def get(gateway: HttpGateway, path: str, **headers: str) -> tuple[int, dict[str, str], str]:
    return gateway.request(b"", method="GET", path=path, **headers)


# -- health --------------------------------------------------------------------------------


async def test_probes_need_no_token_say_nothing_else_and_pass_the_host_guard(tmp_path: Path) -> None:
    # The server takes a while to start: the gateway serves HTTP before it is ready.
    delay = tmp_path / "delay"
    delay.write_text("12")
    server = controllable(server_args={"start-delay-file": delay, "name": "secret-server-name"})
    config = write_config(tmp_path, {"ctl": server}, http={"auth": {"mode": "keys"}})
    gateway = HttpGateway(config)
    try:
        assert get(gateway, "/healthz")[::2] == (200, "ok\n")
        assert get(gateway, "/readyz")[::2] == (503, "not ready\n")
        assert get(gateway, "/mcp")[0] == 401  # /mcp itself still asks for a token

        async def ready() -> bool:
            return await anyio.to_thread.run_sync(lambda: get(gateway, "/readyz")[0] == 200)

        await eventually(ready, timeout=60, interval=0.2)
        status, headers, body = get(gateway, "/readyz")
        assert (status, body) == (200, "ok\n")
        assert "toolkeeper" not in json.dumps(headers).lower() and "secret" not in body
        for path in ("/healthz", "/readyz"):
            assert get(gateway, path, host="evil.example.com")[0] == 421
            assert gateway.request(b"", method="POST", path=path)[0] == 405
    finally:
        gateway.close()


class _Store:
    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour

    async def revision(self) -> int:
        if self.behaviour == "fails":
            raise OSError("connection refused")
        if self.behaviour == "hangs":
            await anyio.sleep(3600)
        return 1


class _Gateway:
    def __init__(self, store: _Store | None, started: bool) -> None:
        self.store = store
        self.started = anyio.Event()
        if started:
            self.started.set()


@pytest.mark.parametrize(
    ("store", "started", "ready"),
    [
        ("answers", True, True),
        ("answers", False, False),
        ("fails", True, False),
        ("hangs", True, False),
        (None, True, True),
    ],
)
async def test_ready_means_started_and_a_store_that_answers(
    monkeypatch: pytest.MonkeyPatch, store: str | None, started: bool, ready: bool
) -> None:
    monkeypatch.setattr("toolkeeper.edge.health.STORE_CHECK_SECONDS", 0.2)
    gateway: Any = _Gateway(_Store(store) if store else None, started)
    assert await Health(gateway).ready() is ready


# -- /metrics ------------------------------------------------------------------------------


def metric_lines(text: str, name: str) -> dict[str, float]:
    """The samples of `name`: their labels (as written) → value."""
    samples = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, _, value = line[len(name) :].rpartition(" ")
            samples[labels] = float(value)
    return samples


async def test_metrics_need_an_admin_credential_and_count_calls_errors_and_latency(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    admin, plain = new_key(config, "ops", "--admin"), new_key(config, "team")
    gateway = HttpGateway(config)
    try:
        url = f"http://127.0.0.1:{gateway.port}/mcp"
        for mode in MODES:
            async with client_with(url, plain, mode) as client:
                assert not (await client.call_tool("ctl__echo", {"text": "hi"})).is_error
                assert (await client.call_tool("ctl__fail", {})).is_error
                with pytest.raises(Exception, match="no-such-tool"):
                    await client.call_tool("no-such-tool", {})
        # Nobody without an admin credential reads them, on loopback too.
        assert get(gateway, "/metrics")[0] == 401
        assert get(gateway, "/metrics", authorization=f"Bearer {plain}")[0] == 403
        assert get(gateway, "/metrics", authorization="Bearer tk_" + "B" * 43)[0] == 401
        assert get(gateway, "/metrics", host="evil.example.com", authorization=f"Bearer {admin}")[0] == 421
        status, headers, text = get(gateway, "/metrics", authorization=f"Bearer {admin}")
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    finally:
        gateway.close()
    calls = metric_lines(text, "toolkeeper_tool_calls_total")
    assert calls['{server="ctl",tool="echo",decision="allow",outcome="ok"}'] == 2
    assert calls['{server="ctl",tool="fail",decision="allow",outcome="isError"}'] == 2
    # A name nobody routes is counted without it: a client cannot add series at will.
    assert calls['{server="",tool="",decision="none",outcome="protocol_error"}'] == 2
    errors = metric_lines(text, "toolkeeper_tool_call_errors_total")
    assert (
        set(errors.values()) == {2}
        and '{server="ctl",tool="echo",decision="allow",outcome="ok"}' not in errors
    )
    latency = metric_lines(text, "toolkeeper_tool_call_duration_seconds_count")
    assert latency['{server="ctl",tool="echo"}'] == 2
    assert (
        metric_lines(text, "toolkeeper_tool_call_duration_seconds_bucket")[
            '{server="ctl",tool="echo",le="+Inf"}'
        ]
        == 2
    )
    assert "# TYPE toolkeeper_approval_wait_seconds histogram" in text
    assert admin not in text and plain not in text and "team" not in text


# -- OpenTelemetry -------------------------------------------------------------------------


def test_opentelemetry_is_off_unless_the_standard_variables_ask() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not signals({})
    assert signals(endpoint) and signals(endpoint).traces and signals(endpoint).metrics
    assert not signals({**endpoint, "OTEL_SDK_DISABLED": "true"})
    only_traces = signals({**endpoint, "OTEL_METRICS_EXPORTER": "none"})
    assert only_traces.traces and not only_traces.metrics
    assert signals({"OTEL_TRACES_EXPORTER": "otlp"}).traces
    assert not signals({"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"})
    assert signals({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://x/v1/metrics"}).metrics


@pytest.mark.parametrize("mode", MODES)
async def test_a_span_per_call_continues_the_clients_trace_and_goes_downstream(
    tmp_path: Path, mode: str
) -> None:
    server = controllable()
    server["args"].append("--meta")
    config = write_config(tmp_path, {"ctl": server}, auditArguments=True)
    client_traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    with otlp_collector() as collector:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_SERVICE_NAME": "tk-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_METRIC_EXPORT_INTERVAL": "200",
        }
        gateway = HttpGateway(config, env=env)
        try:
            url = f"http://127.0.0.1:{gateway.port}/mcp"
            async with Client(url, mode=mode) as client:
                answer = await client.call_tool(
                    "ctl__meta",
                    {"text": "secret-argument"},
                    meta={"traceparent": client_traceparent, "tracestate": "vendor=kept"},
                )
                downstream_meta = json.loads(answer.content[0].text)
                assert (await client.call_tool("ctl__fail", {})).is_error

            def spans_arrived() -> bool:
                names = {span.name for span in collector.spans}
                return {"tools/call ctl__meta", "tools/call ctl__fail"} <= names

            await eventually(spans_arrived, timeout=30)

            def metrics_arrived() -> bool:
                return any(
                    point.metric == "toolkeeper.tool.calls" and point.attributes["toolkeeper.tool"] == "fail"
                    for point in collector.points
                )

            await eventually(metrics_arrived, timeout=30)
        finally:
            gateway.close()
    (span,) = [span for span in collector.spans if span.name == "tools/call ctl__meta"]
    # The client's trace goes on, through the gateway's span, to the server.
    assert span.trace_id == CLIENT_TRACE and span.parent_span_id == CLIENT_SPAN
    assert downstream_meta["traceparent"] == f"00-{CLIENT_TRACE}-{span.span_id}-01"
    assert downstream_meta["tracestate"] == "vendor=kept"
    attributes = span.attributes
    assert attributes["toolkeeper.server"] == "ctl" and attributes["toolkeeper.tool"] == "meta"
    assert attributes["toolkeeper.principal"] == "local" and attributes["toolkeeper.decision"] == "allow"
    assert attributes["toolkeeper.outcome"] == "ok" and attributes["mcp.method.name"] == "tools/call"
    assert json.loads(attributes["gen_ai.tool.call.arguments"]) == {"text": "secret-argument"}
    assert span.resource["service.name"] == "tk-under-test"
    (failed,) = [span for span in collector.spans if span.name == "tools/call ctl__fail"]
    assert failed.attributes["toolkeeper.outcome"] == "isError" and failed.status_code == 2  # ERROR
    # A call without a trace context starts a trace of its own.
    assert failed.trace_id != CLIENT_TRACE and failed.parent_span_id == ""
    metrics = {point.metric for point in collector.points}
    assert {
        "toolkeeper.tool.calls",
        "toolkeeper.tool.call.errors",
        "toolkeeper.tool.call.duration",
    } <= metrics
    errors = [point for point in collector.points if point.metric == "toolkeeper.tool.call.errors"]
    assert all(point.attributes["toolkeeper.tool"] == "fail" for point in errors)


async def test_arguments_stay_out_of_spans_unless_the_audit_keeps_them(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    with otlp_collector() as collector:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_METRICS_EXPORTER": "none",
        }
        gateway = HttpGateway(config, env=env)
        try:
            async with Client(f"http://127.0.0.1:{gateway.port}/mcp", mode="legacy") as client:
                await client.call_tool("ctl__echo", {"text": "secret-argument"})
            await eventually(lambda: collector.spans, timeout=30)
        finally:
            gateway.close()
    assert "gen_ai.tool.call.arguments" not in collector.spans[0].attributes
    assert collector.spans[0].resource["service.name"] == "toolkeeper"
    assert not any(b"secret-argument" in body for body in collector.raw)
    assert not collector.points  # metrics were not asked for


def test_the_exposition_escapes_label_values_and_counts_approval_waits_cumulatively() -> None:
    from toolkeeper.edge.metrics import exposition
    from toolkeeper.pipeline.call_metrics import CallMeasure, CallMetrics

    metrics = CallMetrics()
    odd = 'we"ird\\name\nnext'
    for wait in (0.5, 7.0, 7.5, 900.0):
        metrics.add(CallMeasure("srv", odd, "allow", "ok", seconds=wait + 0.01, wait_seconds=wait))
    metrics.add(CallMeasure("srv", odd, "deny", "not_run", seconds=3.0, wait_seconds=3.0))
    text = exposition(metrics).decode()
    label = 'tool="we\\"ird\\\\name\\nnext"'
    assert f'toolkeeper_tool_calls_total{{server="srv",{label},decision="allow",outcome="ok"}} 4' in text
    assert f'toolkeeper_tool_calls_total{{server="srv",{label},decision="deny",outcome="not_run"}} 1' in text
    assert "toolkeeper_tool_call_errors_total{" not in text  # neither a refusal nor a plain result
    waits = metric_lines(text, "toolkeeper_approval_wait_seconds_bucket")
    allowed = f'{{server="srv",{label},decision="allow",le='
    assert [waits[allowed + f'"{bound}"}}'] for bound in ("1.0", "5.0", "10.0", "600.0", "+Inf")] == [
        1,
        1,
        3,
        3,
        4,
    ]
    assert (
        metric_lines(text, "toolkeeper_approval_wait_seconds_count")[
            f'{{server="srv",{label},decision="deny"}}'
        ]
        == 1
    )
    assert metric_lines(text, "toolkeeper_tool_call_duration_seconds_count")[f'{{server="srv",{label}}}'] == 5
    # One sample per line: a value's line break cannot start a sample of its own.
    assert all(line.startswith(("#", "toolkeeper_")) for line in text.splitlines())


async def test_a_collector_that_is_gone_neither_fails_calls_nor_holds_up_the_stop(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    nobody = f"http://127.0.0.1:{free_port()}"
    gateway = HttpGateway(
        config, env={"OTEL_EXPORTER_OTLP_ENDPOINT": nobody, "OTEL_METRIC_EXPORT_INTERVAL": "100"}
    )
    try:
        for mode in MODES:
            async with Client(f"http://127.0.0.1:{gateway.port}/mcp", mode=mode) as client:
                for _ in range(3):
                    assert not (await client.call_tool("ctl__echo", {"text": "hi"})).is_error
    finally:
        gateway.close()  # SIGTERM; killed if still there after 10 s
    assert gateway.process.returncode == 0


async def test_a_gateway_over_stdio_exports_its_spans_and_keeps_stdout_for_its_client(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    with otlp_collector() as collector:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        async with Client(gateway_params(config, env=env), mode="legacy") as client:
            assert not (await client.call_tool("ctl__echo", {"text": "over stdio"})).is_error
            await eventually(lambda: collector.spans, timeout=30)
    assert collector.spans[0].name == "tools/call ctl__echo"
    assert collector.spans[0].attributes["toolkeeper.outcome"] == "ok"


async def test_metrics_count_how_long_calls_waited_for_each_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_approval_waiting import cli, waiting_calls

    monkeypatch.delenv("TOOLKEEPER_CONFIRM", raising=False)  # the policy asks
    config = write_config(tmp_path, {"ctl": controllable(trust="trusted")})
    admin = new_key(config, "ops", "--admin")
    gateway = HttpGateway(config)
    try:
        results = []
        async with Client(f"http://127.0.0.1:{gateway.port}/mcp", mode="legacy") as client:
            for answer in ("approve", "deny"):
                async with anyio.create_task_group() as tg:

                    async def call() -> None:
                        results.append(await client.call_tool("ctl__pid", {}))

                    tg.start_soon(call)
                    (waiting,) = await waiting_calls(config)
                    answered = await cli(config, "approvals", answer, waiting["id"])
                    assert answered.returncode == 0, answered.stderr
        status, _, text = get(gateway, "/metrics", authorization=f"Bearer {admin}")
        assert status == 200
    finally:
        gateway.close()
    assert [result.is_error for result in results] == [False, True]
    waits = metric_lines(text, "toolkeeper_approval_wait_seconds_count")
    assert waits == {
        '{server="ctl",tool="pid",decision="allow"}': 1,
        '{server="ctl",tool="pid",decision="deny"}': 1,
    }
    calls = metric_lines(text, "toolkeeper_tool_calls_total")
    assert calls['{server="ctl",tool="pid",decision="deny",outcome="not_run"}'] == 1


@pytest.mark.parametrize("mode", ["none", "oauth only", "keys"])
async def test_only_an_admin_key_opens_metrics_whatever_the_auth_mode(mode: str) -> None:
    from test_auth_edge import TOKEN, ring

    from toolkeeper.edge.auth import Authenticator, AuthPlan, Refusal

    plan = {
        "none": AuthPlan(required=False, keys=False, oauth=None),
        "oauth only": AuthPlan(required=True, keys=False, oauth=None),
        "keys": AuthPlan(required=True, keys=True, oauth=None),
    }[mode]
    scope: dict[str, Any] = {"type": "http", "path": "/metrics", "method": "GET", "client": ("192.0.2.1", 5)}

    async def admitted(admin: bool, authorization: str | None) -> Any:
        keys = ring(admin=admin)
        auth = Authenticator(plan, keys=lambda: keys, resource_path="/mcp")
        headers = {"host": "127.0.0.1"} | ({"authorization": authorization} if authorization else {})
        outcome = await auth.admin(scope, headers)
        return outcome.status if isinstance(outcome, Refusal) else outcome.name

    assert await admitted(True, f"Bearer {TOKEN}") == "alice"
    assert await admitted(False, f"Bearer {TOKEN}") == 403
    assert await admitted(True, None) == 401
    assert await admitted(True, "Bearer tk_" + "Z" * 43) == 401
    assert await admitted(True, f"Basic {TOKEN}") == 401
    assert await admitted(True, "Bearer not-a-key") == 401  # no OAuth set up to take it
