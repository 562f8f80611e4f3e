"""OTLP export: the ``otlp`` link of ``instrument()``'s chain, and the OTLP exporters by protocol.

Usage::

    from tallyspan_exporters import otlp_component
    link = otlp_component((), settings)   # BatchSpanProcessor(OTLPSpanExporter), or None

``tallyspan.instrument()`` finds ``otlp_component`` through the ``otlp`` entry point of
``tallyspan.components``, like every other link; the ledger's log records go through
``OTLPLedgerSink`` (``_ledger_logs``), which takes its exporter from here too. Which signals go out,
and over which protocol, is configuration the core resolves (``Settings.otlp_*``): it also drops a gRPC
signal whose exporter (the ``tallyspan[grpc]`` extra) is not installed, with one warning.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Final, cast

from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from tallyspan.plugin import GRPC_INSTALL_HINT, ConfigError, OTLPProtocol, Settings, swallowed

__all__ = ["otlp_component", "otlp_log_exporter", "otlp_span_exporter"]

_logger = logging.getLogger(__name__)

#: (module, class) of each signal's exporter, by protocol.
_SPAN_EXPORTERS: Final = {
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
}
_LOG_EXPORTERS: Final = {
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "OTLPLogExporter"),
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http._log_exporter", "OTLPLogExporter"),
}


def _exporter(signal: str, protocol: str, exporters: dict[str, tuple[str, str]]) -> object:
    """A new exporter of ``signal`` over ``protocol``, configured by the ``OTEL_EXPORTER_OTLP_*`` variables."""
    if protocol not in exporters:
        raise ConfigError(f"protocol must be 'grpc' or 'http/protobuf', not {protocol!r}")
    module_name, class_name = exporters[protocol]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if protocol != "grpc":
            raise
        raise ConfigError(
            f"OTLP {signal} over gRPC need opentelemetry-exporter-otlp-proto-grpc: {GRPC_INSTALL_HINT}"
        ) from error
    return getattr(module, class_name)()


def otlp_span_exporter(protocol: OTLPProtocol) -> SpanExporter:
    """An OTLP span exporter over ``protocol``, configured by the ``OTEL_EXPORTER_OTLP_*`` variables.

    Raises:
        ConfigError: ``grpc`` without its exporter installed, or an unknown protocol.
    """
    return cast(SpanExporter, _exporter("traces", protocol, _SPAN_EXPORTERS))


def otlp_log_exporter(protocol: OTLPProtocol) -> LogRecordExporter:
    """An OTLP log record exporter over ``protocol``, configured by the ``OTEL_EXPORTER_OTLP_*`` variables.

    Raises:
        ConfigError: ``grpc`` without its exporter installed, or an unknown protocol.
    """
    return cast(LogRecordExporter, _exporter("logs", protocol, _LOG_EXPORTERS))


def otlp_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor | None:
    """The ``otlp`` link of ``instrument()``'s chain: the enriched spans to the OTLP endpoint, batched.

    Returns None when trace export is not requested (``settings.otlp_traces``), or when the exporter
    cannot be made (a missing certificate file, ...): that is logged once, and the app goes on.

    Args:
        downstream: unused; OTLP export is a sink.
        settings: ``otlp_traces`` and ``otlp_traces_protocol`` say whether and how to export.
    """
    del downstream
    if not settings.otlp_traces:
        return None
    try:
        exporter = otlp_span_exporter(settings.otlp_traces_protocol)
    except Exception:  # a bad OTLP setting must not stop the app; the other links still work
        swallowed(_logger, "otlp.traces", "could not create the OTLP span exporter; traces are not exported")
        return None
    return BatchSpanProcessor(exporter)
