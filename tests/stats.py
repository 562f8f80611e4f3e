"""What a test of tallyspan's own counters compares: its losses and errors, not how busy the host was."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

import tallyspan

#: Counters of GIL hand-overs that timed out: waits the app's thread gave tallyspan's threads on a busy
#: host (``tallyspan._turns``). A figure, not a loss, and one a loaded test runner makes at random.
BACKPRESSURE = "backpressure."


def without_backpressure(counts: Mapping[str, int]) -> dict[str, int]:
    """``counts`` without the ``backpressure.*`` counters."""
    return {key: value for key, value in counts.items() if not key.startswith(BACKPRESSURE)}


def losses() -> dict[str, int]:
    """``tallyspan.stats()`` without the ``backpressure.*`` counters: what was dropped or failed."""
    return without_backpressure(tallyspan.stats())


def stored_jobs(db_path: Path) -> tuple[int, int, list[tuple[str, int]]]:
    """What the store at ``db_path`` kept of the apps' ``job-*`` runs: (runs, reconciliations, every loss
    counted by any process); all none where no process ever wrote it."""
    if not db_path.exists():
        return 0, 0, []
    db = sqlite3.connect(db_path)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone():
            return 0, 0, []
        runs = db.execute("SELECT count(*) FROM runs WHERE run_name LIKE 'job-%'").fetchone()[0]
        reconciled = db.execute("SELECT count(*) FROM ledger_reconciliations").fetchone()[0]
        losses = db.execute(
            "SELECT key, value FROM self_stats WHERE key LIKE 'dropped.%' AND value > 0"
        ).fetchall()
    finally:
        db.close()
    return runs, reconciled, losses
