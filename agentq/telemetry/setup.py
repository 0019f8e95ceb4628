"""The SDK's tracer provider for a process whose `OTEL_*` variables ask for an exporter (needs the `otel` extra).

`OTEL_TRACES_EXPORTER` (`otlp`, the default once an endpoint is set, or `console`), `OTEL_EXPORTER_OTLP_ENDPOINT` /
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `grpc`),
`OTEL_SERVICE_NAME` and the exporter's other `OTEL_EXPORTER_OTLP_*` variables are read by the SDK itself, as
everywhere OpenTelemetry runs. Spans leave in batches (`BatchSpanProcessor`); what is buffered is flushed when the
process exits.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable
from typing import Any

from agentq.errors import ConfigurationError
from agentq.settings import Settings

log = logging.getLogger("agentq.telemetry")
_installed: Any = None
_warned: list[bool] = []  # the missing SDK is said once per process


def install_provider(settings: Settings) -> Any:
    """The process's provider (installed as OpenTelemetry's global one, once) with the exporter asked for; None
    when the SDK is not installed. An exporter agentq cannot make is a `ConfigurationError`."""
    global _installed
    if _installed is not None:
        return _installed
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        if not _warned:
            log.warning("the OTEL_* variables ask for traces, but OpenTelemetry's SDK is not installed (pip install "
                        "'agentq[otel]'): nothing is traced")
            _warned.append(True)
        return None
    named = settings.otel_service_name  # read by the SDK itself; agentq's name when it is not set
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": "agentq"}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(settings)))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    _installed = provider
    return provider


def _exporter(settings: Settings) -> Any:
    kind = (settings.otel_traces_exporter or "otlp").strip().lower()
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if kind != "otlp":
        raise ConfigurationError(f"OTEL_TRACES_EXPORTER={kind!r}: agentq exports traces with 'otlp' or 'console'")
    try:
        exporter: Callable[[], Any]
        if (settings.otel_exporter_otlp_protocol or "http/protobuf").strip().lower() == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

            exporter = GrpcSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

            exporter = HttpSpanExporter
    except ImportError as error:
        raise ConfigurationError(f"the OTLP exporter asked for is not installed ({error.name}): pip install "
                                 "'agentq[otel]' (and opentelemetry-exporter-otlp-proto-grpc for grpc)") from None
    return exporter()
