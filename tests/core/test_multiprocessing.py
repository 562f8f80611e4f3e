"""``multiprocessing`` workers flush before they exit: a forked ``Pool`` worker leaves with ``os._exit``
(no atexit hook runs), after the finalizers of ``multiprocessing.util``; tallyspan registers one there.
Before, a fork pool closed and joined cleanly stored 154 of 200 runs, and counted nothing."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import warnings
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan._config import ENV_SHUTDOWN_TIMEOUT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

RUNS = 200


def _job(number: int) -> int:
    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    with tallyspan.run(f"job-{number}"):
        search("flights", tool_call_id=f"c{number}")
    return os.getpid()


def test_a_fork_pool_closed_and_joined_stores_every_run(
    tracer_provider: TracerProvider, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The flush is under test, not its budget: four workers and this process share one SQLite file, and
    # on a loaded machine their last writes may wait on each other longer than the default 3 s.
    monkeypatch.setenv(ENV_SHUTDOWN_TIMEOUT, "30")
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    context = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads: exactly the case under test.
        warnings.simplefilter("ignore", DeprecationWarning)
        pool = context.Pool(4)
    try:
        workers = set(pool.map(_job, range(RUNS), chunksize=5))
    finally:
        pool.close()
        pool.join()
    assert instrumentation.force_flush(10_000)
    assert os.getpid() not in workers  # the runs were made in the pool's workers
    db = sqlite3.connect(db_path)
    try:
        runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
        reconciled = db.execute("SELECT count(*) FROM ledger_reconciliations").fetchone()[0]
        # Each worker's losses are on record beside what it kept: there were none.
        losses = db.execute(
            "SELECT key, value FROM self_stats WHERE key LIKE 'dropped.%' AND value > 0"
        ).fetchall()
    finally:
        db.close()
    assert runs == RUNS
    assert reconciled == RUNS
    assert losses == []
