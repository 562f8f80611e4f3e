"""tallyspan's exporters: the embedded SQLite store and the ledger log records."""

from tallyspan_exporters._ledger_logs import OTLPLedgerSink, ledger_sinks_component
from tallyspan_exporters._ledger_store import SQLiteLedgerSink
from tallyspan_exporters._store import SQLiteSpanExporter, store_component

__all__ = [
    "OTLPLedgerSink",
    "SQLiteLedgerSink",
    "SQLiteSpanExporter",
    "ledger_sinks_component",
    "store_component",
]
