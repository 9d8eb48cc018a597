"""Whether OpenTelemetry is on, read from its standard variables without importing it: a
gateway that exports nothing loads none of it.

It is off unless asked for. A signal (traces, metrics) is on when its exporter variable
(`OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`) says `otlp`, or when that variable is unset
and an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, or the signal's own
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `..._METRICS_ENDPOINT`); `none` turns it off, and
`OTEL_SDK_DISABLED=true` turns both off. Everything else (the endpoint, headers, timeouts,
`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, batching and export intervals) is read by the
OpenTelemetry SDK itself. Only OTLP over HTTP with protobuf is exported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkeeper.config.model import GatewaySettings
    from toolkeeper.pipeline.call_metrics import CallMetrics
    from toolkeeper.pipeline.otel import Telemetry

logger = logging.getLogger(__name__)

EXPORTED = "otlp"
SUPPORTED_PROTOCOL = "http/protobuf"
INSTALL = "pip install 'toolkeeper[otel]'"


@dataclass(frozen=True, slots=True)
class Signals:
    traces: bool
    metrics: bool

    def __bool__(self) -> bool:
        return self.traces or self.metrics


def _signal(environ: Mapping[str, str], name: str) -> bool:
    """Whether the signal `name` (TRACES, METRICS) is exported."""
    exporter = environ.get(f"OTEL_{name}_EXPORTER", "").strip().lower()
    if not exporter:
        return bool(
            environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
            or environ.get(f"OTEL_EXPORTER_OTLP_{name}_ENDPOINT", "").strip()
        )
    exporters = {part.strip() for part in exporter.split(",") if part.strip()}
    unsupported = exporters - {EXPORTED, "none"}
    if unsupported:
        logger.warning(
            "OTEL_%s_EXPORTER names %s: toolkeeper exports OpenTelemetry only with otlp (or none)",
            name,
            ", ".join(sorted(unsupported)),
        )
    return EXPORTED in exporters


def signals(environ: Mapping[str, str]) -> Signals:
    """Which signals the variables turn on."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Signals(traces=False, metrics=False)
    wanted = Signals(traces=_signal(environ, "TRACES"), metrics=_signal(environ, "METRICS"))
    if wanted:
        for variable in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
            protocol = environ.get(variable, "").strip().lower()
            if protocol and protocol != SUPPORTED_PROTOCOL:
                logger.warning(
                    "%s is %r: toolkeeper exports OTLP over HTTP (%s) only, and does so",
                    variable,
                    protocol,
                    SUPPORTED_PROTOCOL,
                )
    return wanted


def open_telemetry(
    settings: GatewaySettings, metrics: CallMetrics, environ: Mapping[str, str] | None = None
) -> Telemetry | None:
    """The gateway's OpenTelemetry export, where the variables turn it on; None (and nothing of
    OpenTelemetry imported) where they do not, or where its packages are not installed."""
    wanted = signals(os.environ if environ is None else environ)
    if not wanted:
        return None
    try:
        from toolkeeper.pipeline.otel import Telemetry
    except ImportError as exc:
        logger.warning(
            "OpenTelemetry is asked for by the OTEL_* variables, but its packages are not installed "
            "(%s): nothing is exported. Install them with %s",
            exc,
            INSTALL,
        )
        return None
    return Telemetry(settings, metrics, traces=wanted.traces, metrics_on=wanted.metrics)
