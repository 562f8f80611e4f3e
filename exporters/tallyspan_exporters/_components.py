"""The OTLP links of ``instrument()``'s chain: the ``otlp`` and ``ledger_sinks`` entry points.

Each factory imports what it builds only when the settings ask for it: OTLP export brings in
``requests``, the SDK's logs module and the OTLP exporters (about 40 ms), which an app without an OTLP
endpoint never needs. (The ``store`` link is ``_store.store_component``.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.sdk.trace import SpanProcessor

from tallyspan.ledger import LedgerSink
from tallyspan.plugin import Settings, swallowed

__all__ = ["ledger_sinks_component", "otlp_component"]

_logger = logging.getLogger(__name__)


def otlp_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor | None:
    """The ``otlp`` link of ``instrument()``'s chain: the enriched spans to the OTLP endpoint.

    Returns None when trace export is not requested (``settings.otlp_traces``), or when the exporter
    cannot be made (a missing certificate file, ...): that is logged once, and the app goes on.

    Args:
        downstream: unused; OTLP export is a sink.
        settings: ``otlp_traces`` and ``otlp_traces_protocol`` say whether and how to export; ``export``
            the spool and the timeouts; ``shutdown_budget`` bounds the shutdown.
    """
    del downstream
    if not settings.otlp_traces:
        return None
    from tallyspan_exporters._otlp import OTLPSpanProcessor, observed_session, otlp_span_exporter

    session = observed_session("traces", settings.otlp_traces_protocol)
    try:
        exporter = otlp_span_exporter(
            settings.otlp_traces_protocol, timeout_s=settings.export.export_timeout_s, session=session
        )
    except Exception:  # a bad OTLP setting must not stop the app; the other links still work
        swallowed(_logger, "otlp.traces", "could not create the OTLP span exporter; traces are not exported")
        return None
    return OTLPSpanProcessor(
        exporter, settings=settings.export, budget=settings.shutdown_budget, session=session
    )


def ledger_sinks_component(settings: Settings) -> Sequence[LedgerSink]:
    """The ``ledger_sinks`` entry point: the OTLP log sink when log export is requested, the store sink."""
    sinks: list[LedgerSink] = []
    if settings.otlp_logs:
        try:
            from tallyspan_exporters._ledger_logs import OTLPLedgerSink

            sinks.append(
                OTLPLedgerSink(
                    protocol=settings.otlp_logs_protocol,
                    service_name=settings.service_name,
                    settings=settings.export,
                    budget=settings.shutdown_budget,
                )
            )
        except Exception:  # a bad OTLP setting must not stop the app; the other sinks still work
            swallowed(_logger, "ledger_logs.exporter", "could not create the OTLP ledger log exporter")
    if settings.db_path is not None:
        from tallyspan_exporters._ledger_store import SQLiteLedgerSink

        sinks.append(
            SQLiteLedgerSink(
                settings.db_path, budget=settings.shutdown_budget, hand_overs=settings.hand_overs
            )
        )
    return sinks
