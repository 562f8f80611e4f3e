"""tallyspan's exporters: the embedded SQLite store and the ledger log records."""
