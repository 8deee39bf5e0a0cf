"""OpenTelemetry spans of durable runs: run → super-step → LLM call.

Spans go through the OpenTelemetry *API* (``opentelemetry-api``, which
``opentelemetry-sdk`` brings): without it, or without a configured tracer provider,
nothing is recorded and nothing is paid per LLM call. The command line configures the
SDK from the standard environment variables when ``OTEL_TRACES_EXPORTER`` is set
(``console``, or ``otlp`` with ``opentelemetry-exporter-otlp`` installed; the OTLP
exporter reads ``OTEL_EXPORTER_OTLP_ENDPOINT`` and its other variables itself).

A run's span carries its id, fence and parameters; a super-step's its number and
virtual time window; an LLM call's (issued inside a super-step, which the simulation
runs at once) its agent, stage, call index, tokens, dollars, and its virtual start
and latency.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["configure_from_env", "tracer"]

_INSTRUMENTATION = "megaactors.durable"


def tracer() -> Any | None:
    """The global tracer of this package, or None when OpenTelemetry is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer(_INSTRUMENTATION)


def configure_from_env() -> bool:
    """Install an SDK tracer provider exporting as ``OTEL_TRACES_EXPORTER`` says
    (``console`` or ``otlp``); False when it is unset, ``none``, or the SDK missing."""
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not wanted or wanted == "none":
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        return False
    exporters: list[Any] = []
    for name in wanted.split(","):
        name = name.strip()
        if name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                return False
            exporters.append(OTLPSpanExporter())
    if not exporters:
        return False
    provider = TracerProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "megaactors")})
    )
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True
