"""The ledger as OTLP log records: both columns of the books and each reconciliation, for any backend.

Usage::

    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
    from tallyspan_exporters import OTLPLedgerSink

    sink = OTLPLedgerSink(InMemoryLogRecordExporter())   # default: OTLPLogExporter from the OTEL_* env
    sink = OTLPLedgerSink(protocol="grpc")               # OTLP over gRPC (the tallyspan[grpc] extra)
    sink = OTLPLedgerSink(settings=ExportSettings(spool_path=Path("spool.db")))   # spooled on disk

Each entry is a log record with event name ``tallyspan.ledger.entry`` (trace id of the run, span id of
the span the entry came from, ``tallyspan.ledger.run_span_id``, side, seq, call id, tool, outcome), and
each reconciled run one ``tallyspan.ledger.reconciliation`` (span id of the run span; balanced,
protocol_ok, discrepancy types and counts as attributes; the discrepancies as a list in the body).
Every record carries ``tallyspan.ledger.record_id``, the same on every delivery.
``tallyspan.instrument()`` adds this sink when OTLP log export is requested, and the store sink when
there is a store (``_components.ledger_sinks_component``, entry point ``ledger_sinks``).

Every record is durable: it goes through the spool of ``settings`` (``_delivery.Outbox``) and leaves it
only once the backend accepted it, across restarts; a failed export is retried, and every record lost
is counted (``dropped.otlp.logs.<cause>``).
"""

from __future__ import annotations

import copy
import functools
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.util.types import AnyValue, AttributeValue

from tallyspan import semconv
from tallyspan.ledger import LedgerEntry, LedgerRecord
from tallyspan.plugin import ShutdownBudget, __version__, swallowed
from tallyspan.plugin.exporters import (
    ExportSettings,
    OTLPProtocol,
    at_exit,
    cancel_at_exit,
    otlp_logs_protocol,
)
from tallyspan_exporters._codec import decode_log_record, encode_log_record
from tallyspan_exporters._delivery import Codec, Outbox
from tallyspan_exporters._otlp import Observer, observed_session, open_spool, otlp_log_exporter

__all__ = ["OTLPLedgerSink"]

_logger = logging.getLogger(__name__)


def _context(trace_id: int, span_id: int | None) -> Any:
    if not trace_id or not span_id:
        return None
    span_context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def _attributes(pairs: Mapping[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    return {key: value for key, value in pairs.items() if value is not None}


def _run_id(trace_id: int, run_span_id: int) -> str:
    return f"{trace_id:032x}/{run_span_id:016x}"


def _record_id(record: ReadableLogRecord) -> str:
    value = (record.log_record.attributes or {}).get(semconv.LEDGER_RECORD_ID)
    return value if isinstance(value, str) else ""


LOG_CODEC: Final = Codec(encode=encode_log_record, decode=decode_log_record, record_id=_record_id)


class _ToOutbox(LogRecordProcessor):
    """Hands each emitted record to the outbox, as an OpenTelemetry log exporter would receive it."""

    def __init__(self, outbox: Outbox[ReadableLogRecord]) -> None:
        self._outbox = outbox

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        api_record = copy.copy(log_record.log_record)
        api_record.context = Context()  # the record keeps its ids; the context need not outlive the call
        readable = ReadableLogRecord(
            log_record=api_record,
            resource=log_record.resource if log_record.resource is not None else Resource.create({}),
            instrumentation_scope=log_record.instrumentation_scope,
            limits=log_record.limits,
        )
        self._outbox.submit(readable, durable=True)

    def shutdown(self) -> None:
        self._outbox.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._outbox.force_flush(timeout_millis)


class OTLPLedgerSink:
    """Write ledger entries and reconciliations as OpenTelemetry log records.

    Args:
        exporter: the log exporter; default an ``OTLPLogExporter`` configured by the ``OTEL_*`` variables
            (with the timeout of ``settings``).
        protocol: the transport of the default exporter, ``http/protobuf`` or ``grpc``; default
            ``OTEL_EXPORTER_OTLP_LOGS_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``.
        batch: deliver from threads of its own, through the spool (default); False exports each record
            at once on the calling thread, without retries.
        resource: the resource of the records; default ``service.name`` from ``service_name``.
        service_name: used for the default resource.
        settings: the spool (None in the default ``ExportSettings``: records wait in memory), its
            limits, the export timeout and the retry limit.
        budget: the shutdown budget; default its own.

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
        settings: ExportSettings | None = None,
        budget: ShutdownBudget | None = None,
    ) -> None:
        settings = settings or ExportSettings()
        session: Observer | None = None
        if exporter is None:
            protocol = protocol or otlp_logs_protocol()
            session = observed_session("logs", protocol)
            exporter = otlp_log_exporter(protocol, timeout_s=settings.export_timeout_s, session=session)
        if resource is None:
            resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
        # The provider's own atexit hook would keep every sink ever made alive (instrument() cycles), and
        # run before the chain drained into it at exit: ours holds the sink weakly, runs after the chain
        # (tallyspan.plugin.exporters.at_exit), and shutdown() takes it back.
        self._provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self._at_exit = functools.partial(_shutdown_at_exit, weakref.ref(self))
        at_exit(self._at_exit)
        processor: LogRecordProcessor
        if batch:
            outbox: Outbox[ReadableLogRecord] = Outbox(
                exporter,
                signal="logs",
                codec=LOG_CODEC,
                spool=open_spool(settings),
                settings=settings,
                budget=budget or ShutdownBudget(),
                attempts=session,
            )
            processor = _ToOutbox(outbox)
        else:
            processor = SimpleLogRecordProcessor(exporter)
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
                                semconv.LEDGER_RECORD_ID: (
                                    f"{_run_id(entry.trace_id, entry.run_span_id)}/entry/{entry.seq}"
                                ),
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
                        semconv.LEDGER_RECORD_ID: f"{_run_id(record.trace_id, record.run_span_id)}/reconciliation",
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
        cancel_at_exit(self._at_exit)
        try:
            self._provider.shutdown()
        except Exception:  # shutting down is best effort and must not raise into the chain
            swallowed(_logger, "ledger_logs.shutdown", "could not shut the ledger log exporter down")


def _shutdown_at_exit(sink_ref: weakref.ref[OTLPLedgerSink]) -> None:
    sink = sink_ref()
    if sink is not None:
        sink.shutdown()
