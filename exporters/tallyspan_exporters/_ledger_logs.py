"""The ledger as OTLP log records: both columns of the books and each reconciliation, for any backend.

Usage::

    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
    from tallyspan_exporters import OTLPLedgerSink

    sink = OTLPLedgerSink(InMemoryLogRecordExporter())   # default: OTLPLogExporter from the OTEL_* env
    sink = OTLPLedgerSink(protocol="grpc")               # OTLP over gRPC (the tallyspan[grpc] extra)

Each entry is a log record with event name ``tallyspan.ledger.entry`` (trace id of the run, span id of
the span the entry came from, ``tallyspan.ledger.run_span_id``, side, seq, call id, tool, outcome), and
each reconciled run one ``tallyspan.ledger.reconciliation`` (span id of the run span; balanced,
protocol_ok, discrepancy types and counts as attributes; the discrepancies as a list in the body).
``tallyspan.instrument()`` adds this sink when OTLP log export is requested, and the store sink when
there is a store (``ledger_sinks_component``, entry point ``ledger_sinks``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.util.types import AnyValue, AttributeValue

from tallyspan import semconv
from tallyspan.ledger import LedgerEntry, LedgerRecord, LedgerSink
from tallyspan.plugin import OTLPProtocol, Settings, __version__, otlp_logs_protocol, swallowed
from tallyspan_exporters._ledger_store import SQLiteLedgerSink
from tallyspan_exporters._otlp import otlp_log_exporter

__all__ = ["OTLPLedgerSink", "ledger_sinks_component"]

_logger = logging.getLogger(__name__)


def _context(trace_id: int, span_id: int | None) -> Any:
    if not trace_id or not span_id:
        return None
    span_context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def _attributes(pairs: Mapping[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    return {key: value for key, value in pairs.items() if value is not None}


class OTLPLedgerSink:
    """Write ledger entries and reconciliations as OpenTelemetry log records.

    Args:
        exporter: the log exporter; default an ``OTLPLogExporter`` configured by the ``OTEL_*`` variables.
        protocol: the transport of the default exporter, ``http/protobuf`` or ``grpc``; default
            ``OTEL_EXPORTER_OTLP_LOGS_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``.
        batch: export through a ``BatchLogRecordProcessor`` (default); False exports each record at once.
        resource: the resource of the records; default ``service.name`` from ``service_name``.
        service_name: used for the default resource.

    Raises:
        ConfigError: ``grpc`` without its exporter installed (``pip install 'tallyspan[grpc]'``).
    """

    def __init__(
        self,
        exporter: LogRecordExporter | None = None,
        *,
        protocol: OTLPProtocol | None = None,
        batch: bool = True,
        resource: Resource | None = None,
        service_name: str | None = None,
    ) -> None:
        if exporter is None:
            exporter = otlp_log_exporter(protocol or otlp_logs_protocol())
        if resource is None:
            resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
        self._provider = LoggerProvider(resource=resource)
        processor = BatchLogRecordProcessor(exporter) if batch else SimpleLogRecordProcessor(exporter)
        self._provider.add_log_record_processor(processor)
        self._logger = self._provider.get_logger(semconv.INSTRUMENTATION_SCOPE, __version__)

    def export_entries(self, entries: Sequence[LedgerEntry]) -> bool:
        """Emit one ``tallyspan.ledger.entry`` record per entry; False if any failed."""
        try:
            with suppress_instrumentation():  # our export must not be traced by the app's instrumentations
                for entry in entries:
                    self._logger.emit(
                        timestamp=entry.time_unix_nano or None,
                        context=_context(entry.trace_id, entry.span_id or entry.run_span_id),
                        severity_number=SeverityNumber.INFO,
                        severity_text="INFO",
                        event_name=semconv.EVENT_LEDGER_ENTRY,
                        body=None,
                        attributes=_attributes(
                            {
                                semconv.LEDGER_RUN_SPAN_ID: format(entry.run_span_id, "016x"),
                                semconv.LEDGER_SIDE: entry.side,
                                semconv.LEDGER_SEQ: entry.seq,
                                semconv.LEDGER_CALL_ID: entry.call_id,
                                semconv.LEDGER_TOOL_NAME: entry.tool_name,
                                semconv.LEDGER_OUTCOME: entry.outcome,
                                semconv.LEDGER_SUMMARY: entry.summary or None,
                                semconv.LEDGER_MALFORMED: entry.malformed,
                            }
                        ),
                    )
            return True
        except Exception:  # a sink reports failure and never raises into the ledger processor
            swallowed(_logger, "ledger_logs.entries", "could not emit ledger entry log records")
            return False

    def export_reconciliation(self, record: LedgerRecord) -> bool:
        """Emit the ``tallyspan.ledger.reconciliation`` record of one run; False if it failed."""
        try:
            with suppress_instrumentation():  # our export must not be traced by the app's instrumentations
                result = record.reconciliation
                discrepancies: list[AnyValue] = [
                    _attributes(
                        {
                            semconv.LEDGER_DISCREPANCY_TYPE: d.type,
                            semconv.LEDGER_CALL_ID: d.call_id,
                            semconv.LEDGER_DETAIL: d.detail,
                        }
                    )
                    for d in result.discrepancies
                ]
                self._logger.emit(
                    timestamp=record.time_unix_nano or None,
                    context=_context(record.trace_id, record.run_span_id),
                    severity_number=SeverityNumber.INFO if result.balanced else SeverityNumber.WARN,
                    severity_text="INFO" if result.balanced else "WARN",
                    event_name=semconv.EVENT_LEDGER_RECONCILIATION,
                    body={"discrepancies": discrepancies},
                    attributes={
                        semconv.LEDGER_RUN_SPAN_ID: format(record.run_span_id, "016x"),
                        semconv.RUN_NAME: record.run_name,
                        semconv.LEDGER_BALANCED: result.balanced,
                        semconv.LEDGER_PROTOCOL_OK: result.protocol_ok,
                        semconv.LEDGER_DISCREPANCY_TYPES: list(result.discrepancy_types),
                        semconv.LEDGER_DISCREPANCY_COUNT: len(result.discrepancies),
                        semconv.LEDGER_OBSERVED_COUNT: record.observed_count,
                        semconv.LEDGER_CLAIMED_COUNT: record.claimed_count,
                    },
                )
            return True
        except Exception:  # a sink reports failure and never raises into the ledger processor
            swallowed(
                _logger, "ledger_logs.reconciliation", "could not emit a ledger reconciliation log record"
            )
            return False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export the records still batched; True if done in time."""
        try:
            return self._provider.force_flush(timeout_millis)
        except Exception:  # flushing is best effort and must not raise into the chain
            swallowed(_logger, "ledger_logs.flush", "could not flush ledger log records")
            return False

    def shutdown(self) -> None:
        """Flush and stop the exporter."""
        try:
            self._provider.shutdown()
        except Exception:  # shutting down is best effort and must not raise into the chain
            swallowed(_logger, "ledger_logs.shutdown", "could not shut the ledger log exporter down")


def ledger_sinks_component(settings: Settings) -> Sequence[LedgerSink]:
    """The ``ledger_sinks`` entry point: the OTLP log sink when log export is requested, the store sink."""
    sinks: list[LedgerSink] = []
    if settings.otlp_logs:
        try:
            sinks.append(
                OTLPLedgerSink(protocol=settings.otlp_logs_protocol, service_name=settings.service_name)
            )
        except Exception:  # a bad OTLP setting must not stop the app; the other sinks still work
            swallowed(_logger, "ledger_logs.exporter", "could not create the OTLP ledger log exporter")
    if settings.db_path is not None:
        sinks.append(SQLiteLedgerSink(settings.db_path))
    return sinks
