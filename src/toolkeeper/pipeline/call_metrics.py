"""What the calls add up to: counters and histograms of calls, errors, latency and approval
waits, by server, tool, decision and outcome.

One record stage (`CallMetrics`, added with `Pipeline.with_stage`) measures each ended call once
(`CallMeasure`) and adds it up here, a few dict increments on the call's path. Everything that
exports the figures reads this one measure: `/metrics` renders the totals (`edge/metrics.py`),
and OpenTelemetry, where it is on, is handed each measure as a listener (`pipeline/otel.py`).

A label's value comes from the catalog (a server's and a tool's names), never from what the
client sent: a call of a name the caller's view does not route is counted with empty server
and tool, so a client cannot make the series grow without end.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from toolkeeper.pipeline.audit import call_outcome
from toolkeeper.pipeline.call import ToolCall

logger = logging.getLogger(__name__)

# Where the latency of a call falls, in seconds (the upper bounds; +Inf beyond).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Where the wait for a person's answer falls, in seconds.
WAIT_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# The outcomes (as the audit log names them) that count as errors: the call ran, or was meant
# to, and did not give its client a plain result. A refusal ("not_run") or a cancellation is not.
ERROR_OUTCOMES = frozenset({"error", "protocol_error", "timeout", "isError"})
# The server label of the gateway's own tools (the configuration tools, find-tools).
OWN_SERVER = "toolkeeper"
# The decision label of a call no decide stage saw (not found, or one of the gateway's own).
UNDECIDED = "none"


class CallMeasure(NamedTuple):
    """One ended call, as every export counts it (a tuple: made on every call's path, where a
    frozen dataclass costs several times as much)."""

    server: str
    tool: str
    decision: str  # allow, deny, or none
    outcome: str  # ok, isError, error, protocol_error, timeout, cancelled, not_run
    seconds: float
    # How long the call waited for a person's answer; None when nobody was asked.
    wait_seconds: float | None

    @property
    def failed(self) -> bool:
        return self.outcome in ERROR_OUTCOMES


def measure(call: ToolCall, ended: float) -> CallMeasure:
    """`call`, ended at `ended` (a `time.monotonic()`), as the exports count it."""
    target = call.target
    server = tool = ""
    if target is not None:
        catalog_tool = target.tool
        if catalog_tool is not None:
            server, tool = catalog_tool.server, catalog_tool.name
        else:
            server, tool = OWN_SERVER, target.exposed_name
    decision = call.decision
    wait_ms = decision.wait_ms if decision is not None else None
    return CallMeasure(  # by position: keywords cost a tuple as much again
        server,
        tool,
        decision.final.value if decision is not None else UNDECIDED,
        call_outcome(call)[0],
        ended - call.started,
        wait_ms / 1000 if wait_ms is not None else None,
    )


@dataclass(slots=True)
class Histogram:
    """One series of a histogram: a count per bucket (the last one +Inf), their sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)


# Label values, in the order of their names below.
CallKey = tuple[str, str, str, str]  # server, tool, decision, outcome
ToolKey = tuple[str, str]  # server, tool
CALL_LABELS = ("server", "tool", "decision", "outcome")
TOOL_LABELS = ("server", "tool")
WAIT_LABELS = ("server", "tool", "decision")


class CallMetrics:
    """The record stage that counts every ended call, and the totals it keeps since start."""

    after_result: ClassVar[bool] = True
    needs_hints: ClassVar[bool] = False

    def __init__(self) -> None:
        self.calls: dict[CallKey, int] = {}
        self.errors: dict[CallKey, int] = {}
        self.latency: dict[ToolKey, Histogram] = {}
        self.waits: dict[tuple[str, str, str], Histogram] = {}
        # Called with every measure (OpenTelemetry's instruments, where it is on).
        self.listeners: list[Callable[[CallMeasure], None]] = []

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        self.add(measure(call, time.monotonic()))
        return None

    def add(self, measured: CallMeasure) -> None:
        key = (measured.server, measured.tool, measured.decision, measured.outcome)
        self.calls[key] = self.calls.get(key, 0) + 1
        if measured.failed:
            self.errors[key] = self.errors.get(key, 0) + 1
        tool = (measured.server, measured.tool)
        latency = self.latency.get(tool)
        if latency is None:
            latency = self.latency[tool] = Histogram(LATENCY_BUCKETS)
        latency.observe(measured.seconds)
        if measured.wait_seconds is not None:
            waited = (measured.server, measured.tool, measured.decision)
            wait = self.waits.get(waited)
            if wait is None:
                wait = self.waits[waited] = Histogram(WAIT_BUCKETS)
            wait.observe(measured.wait_seconds)
        for listener in self.listeners:
            try:
                listener(measured)
            except Exception:  # an export's failure must never fail the call it counts
                logger.exception("telemetry: cannot export the measure of a call")
