"""OpenTelemetry, where the OTEL_* variables turn it on (`otel_switch.py`): one span per
`tools/call`, and the calls' counters and histograms as OTel metrics, both sent with OTLP over
HTTP by the SDK's own exporters (which read the endpoint, headers and intervals from the
standard variables).

- A span begins before the call is found (`StartSpan`, the first stage) and ends once it ended
  (`EndSpan`, a record stage), so it covers the approval wait. It continues the trace of the
  client's `_meta.traceparent` (and `tracestate`), and the request forwarded downstream carries
  this span's `traceparent` in its `_meta` instead, as the 2026-07-28 specification proposes.
  Its attributes name the server, the tool, the principal, the decision and the outcome; the
  arguments only where the audit log keeps them (`auditArguments`). Never a credential.
- The metrics are the very measures `/metrics` counts (`call_metrics.py`), handed over as each
  call ends.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, ClassVar

import anyio
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from toolkeeper import __version__, jsonwire
from toolkeeper.config.model import GatewaySettings
from toolkeeper.pipeline.call import ToolCall
from toolkeeper.pipeline.call_metrics import LATENCY_BUCKETS, WAIT_BUCKETS, CallMeasure, CallMetrics, measure
from toolkeeper.pipeline.stages import Find, Pipeline

logger = logging.getLogger(__name__)

SCOPE = "toolkeeper"
DEFAULT_SERVICE_NAME = "toolkeeper"
# Where a call keeps its span between the stages (`ToolCall.extra`).
SPAN = "otel_span"
# How long the last export may take when the gateway stops, in milliseconds.
FLUSH_MILLIS = 3000
SHUTDOWN_POLL_SECONDS = 0.05
TRACE_CONTEXT = TraceContextTextMapPropagator()


def _resource(settings: GatewaySettings) -> Resource:
    """What the SDK detects (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), with toolkeeper's name,
    version and replica where those say nothing."""
    detected = Resource.create()
    ours: dict[str, str] = {SERVICE_VERSION: __version__, SERVICE_INSTANCE_ID: settings.replica}
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        ours[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    missing = {k: v for k, v in ours.items() if k == SERVICE_NAME or k not in detected.attributes}
    return detected.merge(Resource(missing))


class StartSpan:
    """The first stage: the call's span, a child of the client's trace context, whose own context
    goes downstream in the forwarded request's `_meta`."""

    after_result: ClassVar[bool] = False
    needs_hints: ClassVar[bool] = False

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        meta = call.params.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        parent = TRACE_CONTEXT.extract(meta) if "traceparent" in meta else None
        principal = call.client.principal
        span = self.tracer.start_span(
            f"tools/call {call.name}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "mcp.method.name": "tools/call",
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "toolkeeper.principal": principal.name,
                "toolkeeper.principal.kind": principal.kind,
                **({"toolkeeper.principal.client_id": principal.client_id} if principal.client_id else {}),
            },
        )
        call.extra[SPAN] = span
        TRACE_CONTEXT.inject(meta, context=trace.set_span_in_context(span))
        call.params = {**call.params, "_meta": meta}
        return None


class EndSpan:
    """A record stage: the call's decision and outcome on its span, which ends here."""

    after_result: ClassVar[bool] = True
    needs_hints: ClassVar[bool] = False

    def __init__(self, *, keep_arguments: bool) -> None:
        self.keep_arguments = keep_arguments

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        span: Span | None = call.extra.pop(SPAN, None)
        if span is None:
            return None
        try:
            self._describe(span, call)
        finally:
            span.end()
        return None

    def _describe(self, span: Span, call: ToolCall) -> None:
        measured = measure(call, time.monotonic())
        attributes: dict[str, Any] = {
            "toolkeeper.server": measured.server,
            "toolkeeper.tool": measured.tool,
            "toolkeeper.decision": measured.decision,
            "toolkeeper.outcome": measured.outcome,
        }
        decision = call.decision
        if decision is not None:
            attributes["toolkeeper.decided_by"] = decision.decided_by
            if decision.wait_ms is not None:
                attributes["toolkeeper.approval.wait_ms"] = decision.wait_ms
        if self.keep_arguments:
            attributes["gen_ai.tool.call.arguments"] = jsonwire.dumps(call.arguments).decode()
        span.set_attributes(attributes)
        if measured.failed:
            span.set_attribute("error.type", measured.outcome)
            span.set_status(Status(StatusCode.ERROR, measured.outcome))


class CallInstruments:
    """The calls' counters and histograms as OTel instruments, fed with each measure."""

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(SCOPE, __version__)
        self.calls = meter.create_counter(
            "toolkeeper.tool.calls", unit="{call}", description="Tool calls that ended"
        )
        self.errors = meter.create_counter(
            "toolkeeper.tool.call.errors", unit="{call}", description="Tool calls that ended in an error"
        )
        self.duration = meter.create_histogram(
            "toolkeeper.tool.call.duration",
            unit="s",
            description="How long tool calls took, approval waits included",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
        )
        self.waits = meter.create_histogram(
            "toolkeeper.approval.wait",
            unit="s",
            description="How long calls waited for a person's answer",
            explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
        )

    def record(self, measured: CallMeasure) -> None:
        tool = {"toolkeeper.server": measured.server, "toolkeeper.tool": measured.tool}
        call = {**tool, "toolkeeper.decision": measured.decision, "toolkeeper.outcome": measured.outcome}
        self.calls.add(1, call)
        if measured.failed:
            self.errors.add(1, call)
        self.duration.record(measured.seconds, tool)
        if measured.wait_seconds is not None:
            self.waits.record(measured.wait_seconds, {**tool, "toolkeeper.decision": measured.decision})


class Telemetry:
    """The gateway's OpenTelemetry providers, made once; `traced` adds the span stages."""

    def __init__(
        self, settings: GatewaySettings, metrics: CallMetrics, *, traces: bool, metrics_on: bool
    ) -> None:
        resource = _resource(settings)
        self.keep_arguments = settings.audit_arguments
        self.tracer_provider: TracerProvider | None = None
        self.meter_provider: MeterProvider | None = None
        if traces:
            # Shut down by `close`, within a bound: the SDK's own handler at exit would wait for
            # a collector that is gone, retrying, before the process could end.
            self.tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        if metrics_on:
            reader = PeriodicExportingMetricReader(OTLPMetricExporter())
            self.meter_provider = MeterProvider(
                resource=resource, metric_readers=[reader], shutdown_on_exit=False
            )
            metrics.listeners.append(CallInstruments(self.meter_provider).record)
        logger.info(
            "OpenTelemetry: exporting %s with OTLP over HTTP",
            " and ".join(name for name, on in (("traces", traces), ("metrics", metrics_on)) if on),
        )

    def traced(self, pipeline: Pipeline) -> Pipeline:
        """`pipeline` with a span around each call, where traces are exported."""
        if self.tracer_provider is None:
            return pipeline
        tracer = self.tracer_provider.get_tracer(SCOPE, __version__)
        return pipeline.with_stage(StartSpan(tracer), before=Find).with_stage(
            EndSpan(keep_arguments=self.keep_arguments)
        )

    async def close(self, timeout: float) -> None:
        """Send what is left and stop the exporters, waiting at most `timeout` seconds. The work
        runs in a daemon thread, left behind past the bound: exporters retry an unreachable
        collector for their own timeout, and the process must not wait for them to end."""
        closing = threading.Thread(target=self._shutdown, name="toolkeeper-otel-shutdown", daemon=True)
        closing.start()
        with anyio.move_on_after(timeout):
            while closing.is_alive():
                await anyio.sleep(SHUTDOWN_POLL_SECONDS)

    def _shutdown(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is None:
                continue
            try:
                provider.force_flush(FLUSH_MILLIS)
                provider.shutdown()
            except Exception as exc:  # the last export is worth a try, never a crash
                logger.warning("OpenTelemetry: the last export failed: %s", exc)
