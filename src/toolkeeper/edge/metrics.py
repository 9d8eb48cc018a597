"""`GET /metrics`: the calls' counters and histograms (`pipeline/call_metrics.py`) in the
Prometheus text exposition format (version 0.0.4), for an admin only: an admin client key or an
OAuth token with the admin scope, whatever the auth mode (`Authenticator.admin`). It names
servers and tools, never a principal or a credential."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

from starlette.types import Scope, Send

from toolkeeper.edge.auth import Authenticator, Refusal
from toolkeeper.edge.http_fastlane import respond
from toolkeeper.pipeline.call_metrics import (
    CALL_LABELS,
    TOOL_LABELS,
    WAIT_LABELS,
    CallMetrics,
    Histogram,
)

METRICS_PATH = "/metrics"
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
PREFIX = "toolkeeper_"
# A series' label values.
LabelValues = TypeVar("LabelValues", bound=tuple[str, ...])


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Iterable[str], values: Iterable[str], *extra: tuple[str, str]) -> str:
    pairs = [*zip(names, values, strict=True), *extra]
    return "{" + ",".join(f'{name}="{_escaped(value)}"' for name, value in pairs) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def _counter(
    name: str, text: str, labels: tuple[str, ...], series: Mapping[LabelValues, int]
) -> Iterator[str]:
    yield f"# HELP {PREFIX}{name} {text}"
    yield f"# TYPE {PREFIX}{name} counter"
    for values, count in sorted(series.items()):
        yield f"{PREFIX}{name}{_labels(labels, values)} {count}"


def _histogram(
    name: str, text: str, labels: tuple[str, ...], series: Mapping[LabelValues, Histogram]
) -> Iterator[str]:
    yield f"# HELP {PREFIX}{name} {text}"
    yield f"# TYPE {PREFIX}{name} histogram"
    for values, histogram in sorted(series.items()):
        cumulative = 0
        bounds = [*(_number(bound) for bound in histogram.bounds), "+Inf"]
        for bound, count in zip(bounds, histogram.counts, strict=True):
            cumulative += count
            yield f"{PREFIX}{name}_bucket{_labels(labels, values, ('le', bound))} {cumulative}"
        yield f"{PREFIX}{name}_sum{_labels(labels, values)} {_number(histogram.total)}"
        yield f"{PREFIX}{name}_count{_labels(labels, values)} {cumulative}"


def exposition(metrics: CallMetrics) -> bytes:
    """Every series, in the Prometheus text format."""
    lines = [
        *_counter(
            "tool_calls_total",
            "Tool calls that ended, by server, tool, decision and outcome.",
            CALL_LABELS,
            metrics.calls,
        ),
        *_counter(
            "tool_call_errors_total",
            "Tool calls that ended in an error (isError, error, protocol_error, timeout).",
            CALL_LABELS,
            metrics.errors,
        ),
        *_histogram(
            "tool_call_duration_seconds",
            "How long tool calls took, approval waits included.",
            TOOL_LABELS,
            metrics.latency,
        ),
        *_histogram(
            "approval_wait_seconds",
            "How long calls waited for a person's answer, by the decision it brought.",
            WAIT_LABELS,
            metrics.waits,
        ),
    ]
    return ("\n".join(lines) + "\n").encode()


class MetricsEndpoint:
    """Answers `GET /metrics` for one gateway's counts, once the caller proved to be an admin."""

    def __init__(self, metrics: CallMetrics, auth: Authenticator) -> None:
        self.metrics = metrics
        self.auth = auth

    async def __call__(self, scope: Scope, headers: Mapping[str, str], send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await respond(send, 405, b"method not allowed\n", b"text/plain; charset=utf-8")
            return
        admitted = await self.auth.admin(scope, headers)
        if isinstance(admitted, Refusal):
            await self.auth.refuse(scope, headers, send, admitted)
            return
        await respond(send, 200, exposition(self.metrics), CONTENT_TYPE)
