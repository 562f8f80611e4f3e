"""Test doubles that are real implementations of our protocols, not mocks: they keep what they are given."""

from __future__ import annotations

from collections.abc import Sequence

from tallyspan.ledger import LedgerEntry, LedgerRecord


class RecordingLedgerSink:
    """A ``tallyspan.ledger.LedgerSink`` (as a user's ``instrument(ledger_sinks=...)``) that keeps everything."""

    def __init__(self) -> None:
        self.entries: list[LedgerEntry] = []
        self.records: list[LedgerRecord] = []
        self.shutdowns = 0

    def export_entries(self, entries: Sequence[LedgerEntry]) -> bool:
        self.entries.extend(entries)
        return True

    def export_reconciliation(self, record: LedgerRecord) -> bool:
        self.records.append(record)
        return True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        self.shutdowns += 1
