"""Write side of the embedded store for the ``tallyspan`` command: ``prune``. Everything else the
command does reads (``_store_queries``); the running app writes through the exporters' writers."""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from tallyspan._store._store_schema import (
    LEDGER_ENTRIES,
    LEDGER_RECONCILIATIONS,
    RUNS,
    SELF_STATS,
    SPANS,
    VIOLATIONS,
)

__all__ = ["prune"]

_MAX_SQLITE_INTEGER: Final = (1 << 63) - 1


def _affected(db: sqlite3.Connection, sql: str, parameters: tuple[Any, ...] = ()) -> int:
    """Rows a DELETE removed, or the count a SELECT COUNT(*) gave."""
    cursor = db.execute(sql, parameters)
    if sql.startswith("SELECT"):
        return int(cursor.fetchone()[0])
    return cursor.rowcount


def prune(db: sqlite3.Connection, before_unix_nano: int, *, dry_run: bool = False) -> dict[str, int]:
    """Delete every trace whose last span ended before ``before_unix_nano``; rows deleted per table.

    Whole traces go, so a run never loses half its books; ledger rows of traces with no spans in the
    store (written by the ledger sink alone) go by their own time, and so do the counters processes
    recorded. One transaction. With ``dry_run`` nothing is deleted: the counts are those that would be.
    """
    before = min(max(0, before_unix_nano), _MAX_SQLITE_INTEGER)
    with db:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS _prune_traces (trace_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM _prune_traces")
        db.execute(
            f"INSERT INTO _prune_traces SELECT trace_id FROM {SPANS} GROUP BY trace_id"
            " HAVING max(coalesce(end_unix_nano, start_unix_nano, 0)) < ?",
            (before,),
        )
        for table in (LEDGER_ENTRIES, LEDGER_RECONCILIATIONS):
            db.execute(
                f"INSERT OR IGNORE INTO _prune_traces SELECT DISTINCT trace_id FROM {table}"
                f" WHERE time_unix_nano < ? AND trace_id NOT IN (SELECT trace_id FROM {SPANS})",
                (before,),
            )
        verb = "SELECT COUNT(*)" if dry_run else "DELETE"
        deleted = {
            table: _affected(
                db, f"{verb} FROM {table} WHERE trace_id IN (SELECT trace_id FROM _prune_traces)"
            )
            for table in (SPANS, RUNS, VIOLATIONS, LEDGER_ENTRIES, LEDGER_RECONCILIATIONS)
        }
        deleted[SELF_STATS] = _affected(db, f"{verb} FROM {SELF_STATS} WHERE time_unix_nano < ?", (before,))
        db.execute("DROP TABLE _prune_traces")
    return deleted
