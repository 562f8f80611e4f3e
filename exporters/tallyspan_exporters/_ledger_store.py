"""The ledger in the embedded SQLite store, where ``tallyspan ledger`` reads it.

Writes the ``ledger_entries`` and ``ledger_reconciliations`` tables of ``tallyspan._store_schema``
(ids as lower-case hex). A run written again replaces its rows, so a replay never doubles the books.
The store has no column for why a claim was malformed: the reason goes in ``summary`` as
``malformed: <reason>``.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

from tallyspan.ledger import LedgerEntry, LedgerRecord
from tallyspan.plugin import (
    BUSY_TIMEOUT_MS,
    LEDGER_ENTRIES,
    LEDGER_RECONCILIATIONS,
    connect,
    is_locked,
    renew_lock_after_fork,
    swallowed,
)

__all__ = ["MALFORMED_PREFIX", "SQLiteLedgerSink"]

_logger = logging.getLogger(__name__)

MALFORMED_PREFIX = "malformed: "

_ENTRY_COLUMNS = (
    "trace_id", "run_span_id", "side", "seq", "call_id", "tool_name", "outcome", "summary", "span_id",
    "time_unix_nano",
)  # fmt: skip
_RECONCILIATION_COLUMNS = (
    "trace_id", "run_span_id", "run_name", "balanced", "protocol_ok", "discrepancy_types", "discrepancies",
    "observed_count", "claimed_count", "time_unix_nano",
)  # fmt: skip


def _insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"


_INSERT_ENTRY = _insert(LEDGER_ENTRIES, _ENTRY_COLUMNS)
_INSERT_RECONCILIATION = _insert(LEDGER_RECONCILIATIONS, _RECONCILIATION_COLUMNS)
_DELETE_ENTRIES = f"DELETE FROM {LEDGER_ENTRIES} WHERE trace_id = ? AND run_span_id = ?"
_DELETE_RECONCILIATION = f"DELETE FROM {LEDGER_RECONCILIATIONS} WHERE trace_id = ? AND run_span_id = ?"


def _trace_hex(value: int) -> str:
    return format(value, "032x")


def _span_hex(value: int) -> str:
    return format(value, "016x")


class SQLiteLedgerSink:
    """Write ledger entries and reconciliations into the store at ``path`` (opened on first write).

    Args:
        path: the SQLite file (created and migrated if needed).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_millis: int = BUSY_TIMEOUT_MS) -> None:
        self._path = path
        self._busy_timeout_millis = max(0, busy_timeout_millis)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        renew_lock_after_fork(self)
        self._pid = os.getpid()
        self._closed = False
        # Set after a write found the store locked: this sink writes on the chain's worker, so until a
        # write succeeds again each one tries once without waiting (else every run stalled every span).
        self._contended = False

    def _connection(self) -> sqlite3.Connection:
        if self._pid != os.getpid():
            self._db, self._pid = None, os.getpid()  # a forked child opens its own, never closes ours
        if self._db is None:
            self._db = connect(self._path)
        return self._db

    def export_entries(self, entries: Sequence[LedgerEntry]) -> bool:
        """Replace the entries of each run in ``entries`` with them; False if the write failed."""
        if self._closed:
            return False
        rows = [
            (
                _trace_hex(e.trace_id),
                _span_hex(e.run_span_id),
                e.side,
                e.seq,
                e.call_id,
                e.tool_name,
                e.outcome,
                f"{MALFORMED_PREFIX}{e.malformed}" if e.malformed else e.summary,
                None if e.span_id is None else _span_hex(e.span_id),
                e.time_unix_nano,
            )
            for e in entries
        ]
        runs = sorted({(row[0], row[1]) for row in rows})
        return self._write(
            lambda db: (db.executemany(_DELETE_ENTRIES, runs), db.executemany(_INSERT_ENTRY, rows))
        )

    def export_reconciliation(self, record: LedgerRecord) -> bool:
        """Replace the reconciliation of the run with ``record``; False if the write failed."""
        if self._closed:
            return False
        result = record.reconciliation
        run = (_trace_hex(record.trace_id), _span_hex(record.run_span_id))
        row = (
            *run,
            record.run_name,
            int(result.balanced),
            int(result.protocol_ok),
            json.dumps(list(result.discrepancy_types)),
            json.dumps(
                [{"type": d.type, "call_id": d.call_id, "detail": d.detail} for d in result.discrepancies],
                ensure_ascii=False,
            ),
            record.observed_count,
            record.claimed_count,
            record.time_unix_nano,
        )
        return self._write(
            lambda db: (db.execute(_DELETE_RECONCILIATION, run), db.execute(_INSERT_RECONCILIATION, row))
        )

    def _write(self, statements: Callable[[sqlite3.Connection], object]) -> bool:
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            with self._lock:
                db = self._connection()
                db.execute(f"PRAGMA busy_timeout = {0 if self._contended else self._busy_timeout_millis}")
                try:
                    with db:
                        db.execute("BEGIN")
                        statements(db)
                except sqlite3.OperationalError as error:
                    self._contended = is_locked(error)
                    raise
                self._contended = False
            return True
        except Exception:  # a sink reports failure and never raises into the ledger processor
            swallowed(_logger, "ledger_store.write", f"could not write the ledger to {os.fspath(self._path)}")
            return False
        finally:
            detach(token)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: every write is committed when it returns."""
        return True

    def shutdown(self) -> None:
        """Close the connection; later writes return False."""
        with self._lock:
            self._closed = True
            if self._pid != os.getpid():
                self._db = None  # the parent's connection: not ours to close
            if self._db is not None:
                try:
                    self._db.close()
                except sqlite3.Error:  # closing is best effort at shutdown
                    swallowed(_logger, "ledger_store.close", "could not close the ledger store")
                self._db = None
