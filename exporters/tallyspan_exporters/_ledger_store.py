"""The ledger in the embedded SQLite store, where ``tallyspan ledger`` reads it.

Writes the ``ledger_entries`` and ``ledger_reconciliations`` tables of ``tallyspan._store._store_schema``
(ids as lower-case hex). A run written again replaces its rows, so a replay never doubles the books.
The store has no column for why a claim was malformed: the reason goes in ``summary`` as
``malformed: <reason>``.

The sink is called on the chain's worker, which runs the checks: it only queues the rows, and a
thread of its own writes them through the store's one writer (``_writer``), so a lock held on the
store (``tallyspan prune``, a backup) never holds up the checks. Rows are kept under such a lock and
written once it is free; what cannot be written is counted in ``dropped.ledger_rows``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Final

from tallyspan.ledger import LedgerEntry, LedgerRecord
from tallyspan.plugin import HandOvers, ShutdownBudget
from tallyspan.plugin.exporters import BUSY_TIMEOUT_MS, LEDGER_ENTRIES, LEDGER_RECONCILIATIONS
from tallyspan_exporters._writer import (
    Rows,
    StoreWriter,
    WriterThread,
    delete_sql,
    insert_sql,
    span_hex,
    trace_hex,
)

__all__ = ["LOST_LEDGER_ROWS", "MALFORMED_PREFIX", "SQLiteLedgerSink"]

MALFORMED_PREFIX = "malformed: "
#: The counter of the ledger rows (entries and reconciliations) the store lost, by any cause.
LOST_LEDGER_ROWS: Final = "dropped.ledger_rows"

_ENTRY_COLUMNS = (
    "trace_id", "run_span_id", "side", "seq", "call_id", "tool_name", "outcome", "summary", "span_id",
    "time_unix_nano",
)  # fmt: skip
_RECONCILIATION_COLUMNS = (
    "trace_id", "run_span_id", "run_name", "balanced", "protocol_ok", "discrepancy_types", "discrepancies",
    "observed_count", "claimed_count", "time_unix_nano",
)  # fmt: skip


_INSERT_ENTRY = insert_sql(LEDGER_ENTRIES, _ENTRY_COLUMNS)
_INSERT_RECONCILIATION = insert_sql(LEDGER_RECONCILIATIONS, _RECONCILIATION_COLUMNS)
_DELETE_ENTRIES = delete_sql(LEDGER_ENTRIES, ("trace_id", "run_span_id"))
_DELETE_RECONCILIATION = delete_sql(LEDGER_RECONCILIATIONS, ("trace_id", "run_span_id"))


class SQLiteLedgerSink:
    """Write ledger entries and reconciliations into the store at ``path`` (opened on first write).

    ``export_entries`` and ``export_reconciliation`` queue the rows and return at once (False when
    they were dropped: after shutdown, or with the queue full); ``force_flush`` returns True once
    everything queued before it is committed.

    Args:
        path: the SQLite file (created and migrated if needed).
        busy_timeout_millis: how long a write waits for another connection's lock.
        budget: bounds ``shutdown``; default 30 s.
        hand_overs: the instrumentation's link from the app's threads to the writer's thread
            (``Settings.hand_overs``).
    """

    #: The store is the user's own disk: with content capture off the ledger processor still gives it
    #: the tool names and call ids the agent claimed (when shaped as identifiers), never a summary.
    keeps_claimed_identifiers: Final = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_millis: int = BUSY_TIMEOUT_MS,
        budget: ShutdownBudget | None = None,
        hand_overs: HandOvers | None = None,
    ) -> None:
        self._budget = budget
        writer = StoreWriter(
            path,
            name="ledger_store",
            unit="ledger rows",
            lost_key=LOST_LEDGER_ROWS,
            busy_timeout_millis=busy_timeout_millis,
        )
        self._thread: WriterThread[Rows] = WriterThread(
            writer, Rows.joined, name="tallyspan-ledger-store", hand_overs=hand_overs
        )

    def export_entries(self, entries: Sequence[LedgerEntry]) -> bool:
        """Queue the entries of each run in ``entries`` to replace its stored ones; False if dropped."""
        values = [
            (
                trace_hex(e.trace_id),
                span_hex(e.run_span_id),
                e.side,
                e.seq,
                e.call_id,
                e.tool_name,
                e.outcome,
                f"{MALFORMED_PREFIX}{e.malformed}" if e.malformed else e.summary,
                None if e.span_id is None else span_hex(e.span_id),
                e.time_unix_nano,
            )
            for e in entries
        ]
        rows = Rows(items=len(values))
        rows.add(_DELETE_ENTRIES, sorted({(value[0], value[1]) for value in values}))
        rows.add(_INSERT_ENTRY, values)
        return self._thread.submit(rows, rows.items)

    def export_reconciliation(self, record: LedgerRecord) -> bool:
        """Queue the reconciliation of the run to replace its stored one; False if dropped."""
        result = record.reconciliation
        run = (trace_hex(record.trace_id), span_hex(record.run_span_id))
        value = (
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
        rows = Rows(items=1)
        rows.add(_DELETE_RECONCILIATION, [run])
        rows.add(_INSERT_RECONCILIATION, [value])
        return self._thread.submit(rows, rows.items)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every row queued before is committed; True if it was, in time."""
        return self._thread.flush(timeout_millis)

    def shutdown(self) -> None:
        """Write what is queued (one last wait for a lock), close the connection; later exports fail."""
        # The local disk gets its grace past the budget: a backend that took the budget must not cost it.
        self._thread.shutdown(30000 if self._budget is None else self._budget.local_remaining_millis())
