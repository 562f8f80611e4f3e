"""What an exporter takes from the core, beside :mod:`tallyspan.plugin`: the store's schema (table
names, :func:`connect`, :func:`is_locked`, ``BUSY_TIMEOUT_MS``) and where it is (:func:`resolve_db_path`),
the OTLP settings (:class:`ExportSettings`, :class:`OTLPProtocol` and the protocol helpers,
``GRPC_INSTALL_HINT``), the taxonomy a record carries (:class:`ViolationType`, ``FAILURE_CLASS_OF``),
which span is a run's (:func:`is_run_span`), compact UTF-8 JSON for the store's JSON columns
(:func:`json_bytes_encoder`) and a sink's exit hook, run once tallyspan's chain has drained into it
(:func:`at_exit`, taken back by :func:`cancel_at_exit` when the sink was stopped before).
"""

from __future__ import annotations

from tallyspan._books._runs import is_run_span
from tallyspan._config import (
    GRPC_INSTALL_HINT,
    ExportSettings,
    OTLPProtocol,
    otlp_logs_protocol,
    otlp_traces_protocol,
    resolve_db_path,
)
from tallyspan._engine._taxonomy import FAILURE_CLASS_OF, ViolationType
from tallyspan._exit import at_exit, cancel_at_exit
from tallyspan._json_encoding import json_bytes_encoder
from tallyspan._store._store_schema import (
    BUSY_TIMEOUT_MS,
    LEDGER_ENTRIES,
    LEDGER_RECONCILIATIONS,
    RUNS,
    SELF_STATS,
    SPANS,
    VIOLATIONS,
    connect,
    is_locked,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "FAILURE_CLASS_OF",
    "GRPC_INSTALL_HINT",
    "LEDGER_ENTRIES",
    "LEDGER_RECONCILIATIONS",
    "RUNS",
    "SELF_STATS",
    "SPANS",
    "VIOLATIONS",
    "ExportSettings",
    "OTLPProtocol",
    "ViolationType",
    "at_exit",
    "cancel_at_exit",
    "connect",
    "is_locked",
    "is_run_span",
    "json_bytes_encoder",
    "otlp_logs_protocol",
    "otlp_traces_protocol",
    "resolve_db_path",
]
