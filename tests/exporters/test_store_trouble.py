"""The embedded store in trouble inside a long-lived process: a directory where the file should be, a
read-only folder, a file that is not SQLite, another connection holding the write lock past the busy
timeout, fork() mid-write. The app goes on, each error is logged once and counted, no span is lost
uncounted, and export resumes by itself once the lock is released.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.conftest import MakeInstrumented
from tests.forking import run_forked

import tallyspan
from tallyspan._books._ledger import Reconciliation
from tallyspan._store._store_schema import connect
from tallyspan.ledger import LedgerEntry, LedgerRecord
from tallyspan_exporters import SQLiteLedgerSink, SQLiteSpanExporter, StoreProcessor
from tallyspan_exporters._store import MAX_PENDING_SPANS
from tallyspan_exporters._writer import Rows, StoreWriter, WriterThread

#: Short, so a test holding the lock does not wait the default five seconds per attempt.
BUSY_MS = 50


def _spans(count: int, prefix: str = "span") -> tuple[ReadableSpan, ...]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for index in range(count):
        tracer.start_span(f"{prefix}-{index}").end()
    provider.shutdown()
    return memory.get_finished_spans()


def _span_count(db_path: Path) -> int:
    db = connect(db_path)
    try:
        return int(db.execute("SELECT COUNT(*) FROM spans").fetchone()[0])
    finally:
        db.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.WARNING and record.name.startswith("tallyspan")
    ]


# --- a store that cannot be opened ---------------------------------------------------------------------


def test_a_directory_as_the_database_is_logged_once_and_every_lost_span_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "store.db"
    folder.mkdir()
    exporter = SQLiteSpanExporter(folder)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert exporter.export(_spans(3)) is SpanExportResult.FAILURE
    stats = tallyspan.stats()
    assert stats["errors.store.write"] == 5
    assert stats["dropped.store_spans"] == 15
    assert len(_warnings(caplog)) == 1
    exporter.shutdown()


def test_a_file_that_is_not_sqlite_is_logged_once_and_every_lost_span_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"not an SQLite database at all " * 200)
    exporter = SQLiteSpanExporter(path)
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            assert exporter.export(_spans(2)) is SpanExportResult.FAILURE
    assert tallyspan.stats()["dropped.store_spans"] == 8
    assert len(_warnings(caplog)) == 1
    assert path.read_bytes().startswith(b"not an SQLite database")  # we never overwrite a user's file
    exporter.shutdown()


def _export_into_read_only_folder(folder: Path) -> bool:
    exporter = SQLiteSpanExporter(folder / "tallyspan.db")
    results = [exporter.export(_spans(2)) for _ in range(3)]
    exporter.shutdown()
    stats = tallyspan.stats()
    return (
        results == [SpanExportResult.FAILURE] * 3
        and stats.get("errors.store.write") == 3
        and stats.get("dropped.store_spans") == 6
        and not (folder / "tallyspan.db").exists()
    )


def test_a_read_only_folder_fails_every_export_without_raising() -> None:
    folder = Path(tempfile.mkdtemp(prefix="tallyspan-ro-"))
    try:
        folder.chmod(0o555)
        if os.geteuid() != 0:
            assert _export_into_read_only_folder(folder)
            return
        # root ignores permissions: the check runs in a child that gives up root first.
        folder.parent.chmod(folder.parent.stat().st_mode | 0o111)

        def as_nobody() -> bool:
            os.setgid(65534)
            os.setuid(65534)
            return _export_into_read_only_folder(folder)

        assert run_forked(as_nobody) == 0
    finally:
        folder.chmod(0o755)
        folder.rmdir()


def test_a_store_that_cannot_be_opened_never_reaches_the_app_through_the_chain(
    tmp_path: Path,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    make_instrumented: MakeInstrumented,
) -> None:
    # Writable when instrument() looks (an unwritable one is left out there, said once); then the folder
    # the store was to be made in turns out to be a file.
    folder = tmp_path / "a-folder"
    instrumentation = make_instrumented(store=folder / "t.db", instrumentors=[]).instrumentation
    assert "store" in instrumentation.components
    folder.write_text("not a folder")
    tracer = tracer_provider.get_tracer("app")
    for index in range(40):
        with tracer.start_as_current_span(f"request-{index}"):
            pass
    instrumentation.force_flush()
    assert len(span_exporter.get_finished_spans()) == 40  # the other sinks get everything
    assert tallyspan.stats()["dropped.store_spans"] == 40


# --- another connection holds the write lock -------------------------------------------------------------


def test_a_lock_held_past_the_busy_timeout_keeps_the_spans_and_export_resumes_once_released(
    db_path: Path, lock_holder: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = SQLiteSpanExporter(db_path, busy_timeout_millis=BUSY_MS)
    assert exporter.export(_spans(1, "before")) is SpanExportResult.SUCCESS
    lock_holder.execute("BEGIN EXCLUSIVE")
    with caplog.at_level(logging.WARNING):
        for batch in range(6):
            assert exporter.export(_spans(10, f"locked{batch}")) is SpanExportResult.FAILURE
    assert len(_warnings(caplog)) == 1
    assert tallyspan.stats()["errors.store.locked"] == 6
    lock_holder.execute("COMMIT")
    assert exporter.export(_spans(1, "after")) is SpanExportResult.SUCCESS
    assert _span_count(db_path) == 1 + 60 + 1
    assert "dropped.store_spans" not in tallyspan.stats()
    exporter.shutdown()


def test_spans_kept_under_a_lock_are_written_by_force_flush_or_counted_at_shutdown(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    exporter = SQLiteSpanExporter(db_path, busy_timeout_millis=BUSY_MS)
    lock_holder.execute("BEGIN EXCLUSIVE")
    assert exporter.export(_spans(5)) is SpanExportResult.FAILURE
    assert exporter.force_flush(BUSY_MS) is False
    lock_holder.execute("COMMIT")
    assert exporter.force_flush() is True
    assert _span_count(db_path) == 5
    lock_holder.execute("BEGIN EXCLUSIVE")
    assert exporter.export(_spans(7, "late")) is SpanExportResult.FAILURE
    exporter.shutdown()  # one last wait for the lock, then what is left is counted
    assert tallyspan.stats()["dropped.store_spans"] == 7


def test_a_lock_held_for_many_batches_drops_only_beyond_the_pending_limit_and_counts_them(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    exporter = SQLiteSpanExporter(db_path, busy_timeout_millis=BUSY_MS)
    lock_holder.execute("BEGIN EXCLUSIVE")
    batch_size = 512
    batches = MAX_PENDING_SPANS // batch_size + 4
    spans = _spans(batch_size)
    for _ in range(batches):
        exporter.export(spans)
    lock_holder.execute("COMMIT")
    assert exporter.force_flush() is True
    dropped = tallyspan.stats()["dropped.store_spans"]
    assert dropped == (batches * batch_size) - MAX_PENDING_SPANS
    exporter.shutdown()


def test_the_app_goes_on_under_a_held_lock_and_the_chain_catches_up_when_it_is_released(
    db_path: Path,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    lock_holder: sqlite3.Connection,
    make_instrumented: MakeInstrumented,
) -> None:
    store = BatchSpanProcessor(SQLiteSpanExporter(db_path, busy_timeout_millis=BUSY_MS))
    processors = [SimpleSpanProcessor(span_exporter), store]
    instrumentation = make_instrumented(
        store=None, instrumentors=[], span_processors=processors
    ).instrumentation
    tracer = tracer_provider.get_tracer("app")
    lock_holder.execute("BEGIN EXCLUSIVE")
    for index in range(2000):
        with tracer.start_as_current_span(f"request-{index}"):
            pass
    instrumentation.force_flush()
    assert len(span_exporter.get_finished_spans()) == 2000
    assert _span_count_while_locked(db_path) == 0
    lock_holder.execute("COMMIT")
    with tracer.start_as_current_span("after-release"):
        pass
    assert instrumentation.force_flush()
    assert _span_count(db_path) == 2001
    assert "dropped.store_spans" not in tallyspan.stats()


def test_the_store_processor_keeps_spans_under_a_held_lock_and_writes_them_once_it_is_free(
    db_path: Path, tracer_provider: TracerProvider, lock_holder: sqlite3.Connection
) -> None:
    store = StoreProcessor(db_path, busy_timeout_millis=BUSY_MS)
    tracer_provider.add_span_processor(store)
    tracer = tracer_provider.get_tracer("app")
    lock_holder.execute("BEGIN EXCLUSIVE")
    for index in range(2000):
        tracer.start_span(f"request-{index}").end()
    assert store.force_flush(BUSY_MS) is False
    assert _span_count_while_locked(db_path) == 0
    lock_holder.execute("COMMIT")
    assert store.force_flush() is True
    assert _span_count(db_path) == 2000
    assert "dropped.store_spans" not in tallyspan.stats()


def _span_count_while_locked(db_path: Path) -> int:
    # WAL: a reader is never blocked by the writer's lock, and sees nothing it has not committed.
    db = sqlite3.connect(db_path)
    try:
        return int(db.execute("SELECT COUNT(*) FROM spans").fetchone()[0])
    finally:
        db.close()


# --- fork() ------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_fork_while_the_exporter_writes_does_not_deadlock_the_child_or_close_the_parents_store(
    db_path: Path,
) -> None:
    exporter = SQLiteSpanExporter(db_path)
    assert exporter.export(_spans(1, "parent")) is SpanExportResult.SUCCESS
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with exporter._writer._lock:  # the batch thread in the middle of a write
            held.set()
            release.wait(60)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(10)

    def child() -> bool:
        written = exporter.export(_spans(2, "child")) is SpanExportResult.SUCCESS
        exporter.shutdown()  # must not close the parent's connection
        return written

    try:
        code = run_forked(child)
    finally:
        release.set()
    assert code == 0
    assert exporter.export(_spans(1, "parent-after")) is SpanExportResult.SUCCESS
    assert _span_count(db_path) == 4
    exporter.shutdown()


# --- the ledger sink ---------------------------------------------------------------------------------


def _balanced_run(run: int) -> tuple[list[LedgerEntry], LedgerRecord]:
    balanced = Reconciliation(balanced=True, protocol_ok=True, discrepancy_types=(), discrepancies=())
    entries = [
        LedgerEntry(1, run, "observed", 0, f"c{run}", "search", "succeeded", "", 7, 10),
        LedgerEntry(1, run, "claimed", 1, f"c{run}", "search", "succeeded", "", 8, 20),
    ]
    return entries, LedgerRecord(1, run, f"run{run}", balanced, 1, 1, 30)


def _ledger_counts(db_path: Path) -> tuple[int, int]:
    db = sqlite3.connect(db_path)  # WAL: readable while another connection holds the write lock
    try:
        entries = db.execute("SELECT COUNT(*) FROM ledger_entries").fetchone()[0]
        runs = db.execute("SELECT COUNT(*) FROM ledger_reconciliations").fetchone()[0]
        return int(entries), int(runs)
    finally:
        db.close()


def test_ledger_rows_are_kept_under_a_held_lock_and_written_once_it_is_free(
    db_path: Path, lock_holder: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """400 runs' books under a lock held far past the busy timeout: none lost, all written after."""
    sink = SQLiteLedgerSink(db_path, busy_timeout_millis=BUSY_MS)
    lock_holder.execute("BEGIN EXCLUSIVE")
    with caplog.at_level(logging.WARNING):
        for run in range(1, 401):
            entries, record = _balanced_run(run)
            assert sink.export_entries(entries) is True
            assert sink.export_reconciliation(record) is True
        assert sink.force_flush(2000) is False  # still locked: kept, not written
    assert _ledger_counts(db_path) == (0, 0)
    assert len(_warnings(caplog)) == 1
    lock_holder.execute("COMMIT")
    deadline = time.monotonic() + 10
    while _ledger_counts(db_path) != (800, 400) and time.monotonic() < deadline:
        time.sleep(0.05)  # the sink's thread tries again by itself: no flush needed
    assert _ledger_counts(db_path) == (800, 400)
    assert sink.force_flush() is True
    assert "dropped.ledger_rows" not in tallyspan.stats()
    sink.shutdown()


def test_ledger_rows_beyond_the_pending_limit_are_dropped_and_each_one_counted(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    writer = StoreWriter(
        db_path, name="ledger_store", unit="ledger rows", lost_key="dropped.ledger_rows",
        busy_timeout_millis=BUSY_MS, max_pending=20,
    )  # fmt: skip
    thread: WriterThread[Rows] = WriterThread(writer, Rows.joined, name="test-writer", max_queued=10)
    lock_holder.execute("BEGIN EXCLUSIVE")
    sink_rows = []
    for run in range(1, 201):
        rows = Rows(items=1)
        rows.add(
            "INSERT INTO ledger_reconciliations (trace_id, run_span_id) VALUES (?, ?)", [("t", str(run))]
        )
        sink_rows.append(thread.submit(rows))
    assert thread.flush(2000) is False  # locked, and rows were lost: the answer says so
    lock_holder.execute("COMMIT")
    assert thread.flush() is True  # what was kept is written, and nothing was lost since
    thread.shutdown()
    written = _ledger_counts(db_path)[1]
    assert 0 < written < 200
    assert written + tallyspan.stats()["dropped.ledger_rows"] == 200
    assert sink_rows.count(False) <= tallyspan.stats()["dropped.ledger_rows"]


def test_the_ledger_sink_never_writes_on_the_chains_worker_thread(
    db_path: Path, tracer_provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker runs the checks: a held or slow store must not stall it, so the ledger's SQL runs elsewhere."""
    writers: list[tuple[str, str]] = []
    real_connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db: sqlite3.Connection = real_connect(*args, **kwargs)
        db.set_trace_callback(lambda sql: writers.append((threading.current_thread().name, sql)))
        return db

    connect(db_path).close()  # migrated first: only the writes of spans and ledger rows are traced
    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])

    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    for run in range(5):
        with tallyspan.run(f"agent{run}"):
            search("flights", tool_call_id=f"c{run}")
    assert instrumentation.force_flush(10_000) is True
    monkeypatch.undo()
    ledger_threads = {thread for thread, sql in writers if "INTO ledger_" in sql}
    assert ledger_threads == {"tallyspan-ledger-store"}
    assert "tallyspan-worker" not in {thread for thread, _ in writers}
    assert _ledger_counts(db_path) == (5, 5)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_writes_the_ledger_through_its_own_connection_and_thread(db_path: Path) -> None:
    sink = SQLiteLedgerSink(db_path)
    entries, record = _balanced_run(1)
    assert sink.export_entries(entries)
    assert sink.export_reconciliation(record)
    assert sink.force_flush() is True
    writer = sink._thread._writer
    parent_connection = writer._db
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with writer._lock:  # the sink's thread in the middle of a write
            held.set()
            release.wait(60)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(10)

    def child() -> bool:
        entries, record = _balanced_run(2)
        queued = sink.export_entries(entries) and sink.export_reconciliation(record)
        flushed = sink.force_flush(10_000)
        own_connection = writer._db is not None and writer._db is not parent_connection
        sink.shutdown()  # must not close the parent's connection
        return queued and flushed and own_connection

    try:
        code = run_forked(child)
    finally:
        release.set()
    assert code == 0
    entries, record = _balanced_run(3)
    assert sink.export_entries(entries)
    assert sink.export_reconciliation(record)
    assert sink.force_flush() is True
    assert writer._db is parent_connection  # the parent's connection still works
    assert _ledger_counts(db_path) == (6, 3)
    sink.shutdown()
