"""tallyspan's exporters: the embedded SQLite store, the ledger log records and OTLP span export."""

from tallyspan_exporters._ledger_logs import OTLPLedgerSink, ledger_sinks_component
from tallyspan_exporters._ledger_store import SQLiteLedgerSink
from tallyspan_exporters._otlp import otlp_component
from tallyspan_exporters._store import SQLiteSpanExporter, StoreProcessor, store_component

__all__ = [
    "OTLPLedgerSink",
    "SQLiteLedgerSink",
    "SQLiteSpanExporter",
    "StoreProcessor",
    "ledger_sinks_component",
    "otlp_component",
    "store_component",
]
