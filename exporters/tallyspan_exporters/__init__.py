"""tallyspan's exporters: the embedded SQLite store and the ledger log records."""

from tallyspan_exporters._store import SQLiteSpanExporter, store_component

__all__ = ["SQLiteSpanExporter", "store_component"]
