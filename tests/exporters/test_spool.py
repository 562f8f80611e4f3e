"""The spool and the outbox on their own: records read back as they were written, the limits evict and
count, rows belong to one live process at a time, a rejected record is isolated and dropped alone, and
every loss is counted in ``tallyspan.stats()``, in the store and in ``force_flush()``'s answer."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

import tallyspan
from tallyspan import semconv
from tallyspan._config import ExportSettings, ShutdownBudget
from tallyspan._store._store_queries import open_store, process_counters
from tallyspan_exporters._codec import decode_log_record, decode_span, encode_log_record, encode_span
from tallyspan_exporters._delivery import SCHEDULE_DELAY_S, Attempt, Outbox
from tallyspan_exporters._otlp import SPAN_CODEC
from tallyspan_exporters._spool import Spool

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C


def _span(span_id: int, *, error: bool = False, name: str = "chat qwen3") -> ReadableSpan:
    context = SpanContext(
        TRACE_ID, span_id, is_remote=False, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v")])
    )
    return ReadableSpan(
        name=name,
        context=context,
        parent=SpanContext(TRACE_ID, 0x42, is_remote=True),
        resource=Resource({"service.name": "agent", "deployment.environment": "test"}, "https://schema"),
        attributes={
            semconv.VIOLATION_TYPES: ("refusal", "too_short"),
            semconv.VIOLATION_COUNT: 2,
            "ratio": 0.5,
            semconv.VIOLATED: True,
            "flags": (True, False),
        },
        events=[Event(semconv.EVENT_VIOLATION, {semconv.VIOLATION_TYPE: "refusal"}, timestamp=5)],
        links=[Link(SpanContext(TRACE_ID, 0x77, is_remote=False), {"why": "retry"})],
        kind=SpanKind.CLIENT,
        status=Status(
            StatusCode.ERROR if error else StatusCode.UNSET, "tallyspan: refusal" if error else None
        ),
        start_time=1_000,
        end_time=2_000,
        instrumentation_scope=InstrumentationScope("tallyspan", "1.2.3", None, {"a": "b"}),
    )


def test_a_span_reads_back_as_it_was_written() -> None:
    span = _span(0x1234, error=True)
    back = decode_span(encode_span(span))
    assert back.to_json() == span.to_json()
    assert back.instrumentation_scope == span.instrumentation_scope
    assert back.resource.schema_url == "https://schema"


def test_a_ledger_log_record_reads_back_as_it_was_written() -> None:
    from tallyspan_exporters import OTLPLedgerSink
    from tallyspan_exporters._ledger_logs import LOG_CODEC

    kept: list[ReadableLogRecord] = []

    class Keep:
        def export(self, batch: Sequence[ReadableLogRecord]) -> Any:
            kept.extend(batch)
            from opentelemetry.sdk._logs.export import LogRecordExportResult

            return LogRecordExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    from tests.exporters.test_ledger_logs import _record

    sink = OTLPLedgerSink(Keep(), batch=False, service_name="agent")  # type: ignore[arg-type]
    assert sink.export_reconciliation(_record())
    (record,) = kept
    back = decode_log_record(encode_log_record(record))
    assert back.to_json() == record.to_json()
    assert back.log_record.severity_number is SeverityNumber.WARN
    assert LOG_CODEC.record_id(back) == f"{TRACE_ID:032x}/00f067aa0ba902b7/reconciliation"
    sink.shutdown()


def test_an_unreadable_record_is_refused() -> None:
    with pytest.raises(ValueError, match="known format"):
        decode_span('{"v": 99}')


# --- the spool ---------------------------------------------------------------------------------------


def test_rows_are_claimed_oldest_first_and_leave_only_when_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", max_bytes=1 << 20, max_age_s=3600)
    seqs = spool.append("traces", [("a", "one"), ("b", "two"), ("c", "three")])
    assert seqs is not None
    assert [row.body for row in spool.claim("traces", 2) or []] == ["one", "two"]
    assert spool.claim("logs", 5) == []
    assert spool.delete(seqs[:2])
    assert [row.record_id for row in spool.claim("traces", 5) or []] == ["c"]
    assert spool.pending("traces") == 1
    spool.close()


def test_the_size_limit_evicts_the_oldest_and_counts_them(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", max_bytes=100, max_age_s=3600)
    spool.append("logs", [(str(n), "x" * 30) for n in range(3)])  # 90 bytes
    spool.append("traces", [("t", "y" * 30)])  # 120 > 100: the oldest log record goes
    assert [row.record_id for row in spool.claim("logs", 10) or []] == ["1", "2"]
    assert spool.append("traces", [("huge", "z" * 101)]) == [0]  # larger than the spool: never kept
    stats = tallyspan.stats()
    assert stats["dropped.otlp.logs.spool_full"] == 1
    assert stats["dropped.otlp.traces.spool_full"] == 1
    spool.close()


def test_the_age_limit_evicts_and_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", max_bytes=1 << 20, max_age_s=0.05)
    spool.append("logs", [("old", "a"), ("older", "b")])
    time.sleep(0.1)
    spool.append("logs", [("new", "c")])
    assert [row.record_id for row in spool.claim("logs", 10) or []] == ["new"]
    assert tallyspan.stats()["dropped.otlp.logs.spool_expired"] == 2
    spool.close()


def test_a_live_process_keeps_its_rows_a_released_or_dead_ones_rows_are_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first, second = (
        Spool(path, max_bytes=1 << 20, max_age_s=3600),
        Spool(path, max_bytes=1 << 20, max_age_s=3600),
    )
    first.append("traces", [("mine", "1")])
    assert second.claim("traces", 10) == []  # leased to the first, which is alive
    first.release()
    assert [row.record_id for row in second.claim("traces", 10) or []] == ["mine"]
    assert first.claim("traces", 10) == []  # now leased to the second
    # A process that died without releasing: its rows are taken over at once, not after the lease.
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE records SET owner = ?", (f"{os.uname().nodename}|999999999|gone",))
    db.close()
    third = Spool(path, max_bytes=1 << 20, max_age_s=3600)
    assert [row.record_id for row in third.claim("traces", 10) or []] == ["mine"]
    for spool in (first, second, third):
        spool.close()


def test_a_spool_that_cannot_be_opened_is_counted_and_the_records_wait_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    spool = Spool(blocker / "s.db", max_bytes=1 << 20, max_age_s=3600)
    assert spool.append("traces", [("a", "b")]) is None
    assert tallyspan.stats()["errors.spool.append"] == 1


# --- the outbox ----------------------------------------------------------------------------------------


class Backend(SpanExporter):
    """An exporter with a say in each export: ``answer(batch)`` returns the cause of failure, or None."""

    def __init__(self) -> None:
        self.accepted: list[str] = []
        self.answer: Callable[[Sequence[ReadableSpan]], str | None] = lambda batch: None
        self.cause: str | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.cause = self.answer(spans)
        if self.cause is None:
            self.accepted.extend(span.name for span in spans)
            return SpanExportResult.SUCCESS
        return SpanExportResult.FAILURE

    def reset(self) -> None:
        self.cause = None

    def last(self) -> Attempt:
        return Attempt(self.cause)


def _outbox(backend: Backend, spool: Spool | None, queue_size: int = 100) -> Outbox[ReadableSpan]:
    return Outbox(
        backend,
        signal="traces",
        codec=SPAN_CODEC,
        spool=spool,
        settings=ExportSettings(retry_max_s=0.05, queue_size=queue_size),
        budget=ShutdownBudget(1.0),
        attempts=backend,
    )


def test_a_record_the_backend_rejects_is_isolated_and_dropped_alone(tmp_path: Path) -> None:
    backend = Backend()
    backend.answer = lambda batch: "http_400" if any(span.name == "poison" for span in batch) else None
    outbox = _outbox(backend, Spool(tmp_path / "s.db", max_bytes=1 << 20, max_age_s=3600))
    names = [f"s{n}" for n in range(10)]
    for number, name in enumerate(names):
        outbox.submit(_span(number + 1, name=name), durable=True)
        if number == 4:
            outbox.submit(_span(99, name="poison"), durable=True)
    assert outbox.force_flush(5000) is False  # the poison could never be delivered: said so
    deadline = time.monotonic() + 5
    while sorted(backend.accepted) != sorted(names) and time.monotonic() < deadline:
        outbox.force_flush(1000)
    assert sorted(backend.accepted) == sorted(names)
    assert tallyspan.stats()["dropped.otlp.traces.rejected"] == 1
    assert tallyspan.stats()["errors.otlp.traces.http_400"] >= 1
    outbox.shutdown()


def test_what_only_memory_held_is_counted_at_shutdown_and_the_spool_keeps_the_rest(tmp_path: Path) -> None:
    backend = Backend()
    backend.answer = lambda batch: "connection"
    spool_path = tmp_path / "s.db"
    outbox = _outbox(backend, Spool(spool_path, max_bytes=1 << 20, max_age_s=3600))
    for number in range(5):
        outbox.submit(_span(number + 1), durable=True)
    for number in range(7):
        outbox.submit(_span(number + 100, name="clean"), durable=False)
    assert outbox.force_flush(2000) is False
    outbox.shutdown()
    assert tallyspan.stats()["dropped.otlp.traces.shutdown"] == 7
    reopened = Spool(spool_path, max_bytes=1 << 20, max_age_s=3600)
    assert reopened.pending("traces") == 5
    reopened.close()  # Python 3.13 warns of a connection left for the collector (ResourceWarning)


def test_force_flush_says_false_once_when_clean_spans_were_dropped_under_pressure() -> None:
    backend = Backend()
    gate = threading.Event()

    def slow(batch: Sequence[ReadableSpan]) -> str | None:
        gate.wait(5)
        return None

    backend.answer = slow
    outbox = _outbox(backend, None, queue_size=3)
    for number in range(20):
        outbox.submit(_span(number + 1, name="clean"), durable=False)
    time.sleep(0.2)
    gate.set()
    assert outbox.force_flush(5000) is False
    dropped = tallyspan.stats()["dropped.otlp.traces.queue_full"]
    assert len(backend.accepted) + dropped == 20
    outbox.submit(_span(500, name="clean"), durable=False)
    assert outbox.force_flush(5000) is True  # nothing lost since the last answer
    outbox.shutdown()


def test_a_spool_an_earlier_version_wrote_gets_the_indexes_and_keeps_its_records(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    spool = Spool(path, max_bytes=1 << 20, max_age_s=3600)
    assert spool.append("traces", [("kept", "x" * 100)]) == [1]
    spool.release()  # as at shutdown: the next start sends it
    spool.close()
    earlier = sqlite3.connect(path)  # the spool as versions before the indexes left it
    try:
        for index in ("records_by_created", "records_by_size", "records_by_owner_lease"):
            earlier.execute(f"DROP INDEX {index}")
        earlier.commit()
    finally:
        earlier.close()

    spool = Spool(path, max_bytes=1 << 20, max_age_s=3600)
    assert spool.append("traces", [("new", "y")]) == [2]
    assert [row.record_id for row in spool.claim("traces", 5) or []] == ["kept", "new"]
    db = spool._db
    assert db is not None
    assert {row[1] for row in db.execute("PRAGMA index_list(records)")} >= {
        "records_by_signal",
        "records_by_created",
        "records_by_size",
        "records_by_owner_lease",
    }
    spool.close()


def test_a_steady_stream_behind_a_slow_backend_goes_out_in_batches_gathered_between_exports() -> None:
    """Records that came in during an export wait for the batch delay like records trickling in: sent at
    once, a steady stream went out one request per round trip to the backend (25 for this one)."""
    backend = Backend()
    batches: list[int] = []

    def slow(batch: Sequence[ReadableSpan]) -> str | None:
        batches.append(len(batch))
        time.sleep(0.05)  # a backend 50 ms away
        return None

    backend.answer = slow
    outbox = _outbox(backend, None, queue_size=1000)
    started = time.monotonic()
    for number in range(250):  # about 1.25 s of records, one every 5 ms
        outbox.submit(_span(number + 1, name="clean"), durable=False)
        time.sleep(0.005)
    elapsed = time.monotonic() - started
    assert outbox.force_flush(5000) is True
    assert sum(batches) == 250
    # At most one export per batch delay and round trip while records came in, one at the end and the
    # flush's: however slow this machine ran, not one per round trip.
    assert len(batches) <= elapsed / (SCHEDULE_DELAY_S + 0.05) + 2, batches
    outbox.shutdown()


# --- batch processors of the app, and the store's record of losses -------------------------------------


class _Stuck(SpanExporter):
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(10)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


@pytest.mark.skipif(
    tuple(int(part) for part in version("opentelemetry-sdk").split(".")[:2]) < (1, 41),
    reason="opentelemetry-sdk before 1.41 drops from its batch processors' bounded queue without a hook to "
    "count at (their metrics' drop_items came in 1.41), so nothing is counted there",
)
def test_the_drops_of_an_apps_batch_span_processor_are_counted_and_stored(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    """The SDK drops on a full queue with one log line per 20 s; we count every one."""
    stuck = _Stuck()
    processor = BatchSpanProcessor(
        stuck, max_queue_size=10, max_export_batch_size=5, schedule_delay_millis=10
    )
    tracer_provider.add_span_processor(processor)  # the app's own export, adopted behind our chain
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    tracer = tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("first"):
        pass
    assert stuck.entered.wait(10)  # its worker is stuck exporting: nothing leaves its queue now
    for _ in range(199):
        with tracer.start_as_current_span("step"):
            pass
    key = "dropped.batch_processor.spans.queue_full"
    deadline = time.monotonic() + 10
    while tallyspan.stats().get(key, 0) < 199 - 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    # The SDK's force_flush waits for its export whatever the timeout: let the backend go meanwhile.
    threading.Timer(0.2, stuck.release.set).start()
    assert instrumentation.force_flush(10_000) is False  # not all delivered: said so
    dropped = tallyspan.stats()[key]
    assert dropped == 199 - 10  # the queue kept ten; the one being exported was out of it
    assert stuck.exported + dropped == 200
    assert instrumentation.force_flush(5000)
    with open_store(db_path) as db:
        (this_process,) = process_counters(db)  # what `tallyspan doctor` shows
    assert this_process.counts["dropped.batch_processor.spans.queue_full"] == dropped


def test_a_batch_is_spooled_claimed_and_deleted_in_a_handful_of_statements_each_seq_its_own_record(
    tmp_path: Path,
) -> None:
    """sqlite3 lets go of the GIL at every statement, and a busy app takes it back each time: a batch of
    records goes through in a few statements, and the seqs handed back still name each record exactly."""
    spool = Spool(tmp_path / "s.db", max_bytes=1 << 20, max_age_s=3600)
    assert spool.append("traces", [("first", "x")]) == [1]
    db = spool._db
    assert db is not None
    ran: list[str] = []
    db.set_trace_callback(ran.append)
    records = [
        (f"r{number}", "y" * (2_000_000 if number in (7, 300) else number % 50 + 1)) for number in range(600)
    ]
    seqs = spool.append("traces", records)
    assert seqs is not None
    assert [seq for seq, (_, body) in zip(seqs, records, strict=True) if not seq] == [0, 0]  # too large
    kept = [(seq, record_id) for seq, (record_id, _) in zip(seqs, records, strict=True) if seq]
    assert [seq for seq, _ in kept] == list(range(2, 600))  # after "first", in order
    inserts = [sql for sql in ran if sql.startswith("INSERT")]
    assert len(inserts) == 598 // 256 + (598 % 256).bit_count()  # 2 of 256, then 64 + 16 + 4 + 2
    check = sqlite3.connect(tmp_path / "s.db")
    try:
        assert (
            check.execute("SELECT seq, record_id FROM records WHERE seq > 1 ORDER BY seq").fetchall() == kept
        )
    finally:
        check.close()

    ran.clear()
    claimed = spool.claim("traces", 512) or []
    assert [row.record_id for row in claimed] == ["first", *[record_id for _, record_id in kept[:511]]]
    assert len([sql for sql in ran if sql.startswith("UPDATE")]) == 2  # 256 seqs a statement
    ran.clear()
    assert spool.delete([row.seq for row in claimed[:300]])
    assert len([sql for sql in ran if sql.startswith("DELETE")]) == 4  # 256 + 32 + 8 + 4
    assert spool.pending("traces") == 599 - 300
    spool.close()


def test_no_statement_of_an_append_or_claim_reads_every_row_of_the_spool(tmp_path: Path) -> None:
    """Each append evicts what expired and sums the sizes, each claim looks for dead owners now and then;
    read row by row, each cost grew with what the spool holds (a row's body lies before its size and
    owner), most of all during the outage the spool fills up in. SQLite's own query plan of each
    statement they ran says whether it reads the table's rows or an index."""
    spool = Spool(tmp_path / "s.db", max_bytes=1 << 20, max_age_s=3600)
    assert spool.append("traces", [(f"old{number}", "x" * 3000) for number in range(40)]) is not None
    db = spool._db
    assert db is not None
    ran: list[str] = []
    db.set_trace_callback(ran.append)
    spool._next_dead_scan = 0.0  # the look for dead owners (every few seconds) comes with this claim
    seqs = spool.append("traces", [("new", "y" * 3000)])
    claimed = spool.claim("traces", 5)
    spool.renew()
    db.set_trace_callback(None)
    assert seqs == [41]
    assert len(claimed or []) == 5
    statements = [sql for sql in ran if sql.startswith(("SELECT", "UPDATE", "DELETE"))]
    assert any("SUM(size)" in sql for sql in statements)
    assert any("GROUP BY owner" in sql for sql in statements)
    full_reads = {
        sql: plan
        for sql in statements
        for plan in [[row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")]]
        if any(step.startswith("SCAN records") and "COVERING INDEX" not in step for step in plan)
    }
    assert full_reads == {}
    spool.close()


def test_the_outboxes_of_a_process_share_one_spool_closed_and_released_by_the_last(tmp_path: Path) -> None:
    """Traces and the ledger's logs spool into one file: through one connection and lock, so a
    transaction of one starved of the GIL makes the other wait in Python, not fail on SQLite's busy
    timeout (``errors.spool.locked`` from our own two connections)."""
    from tallyspan_exporters._spool import shared_spool

    path = tmp_path / "s.db"
    traces = shared_spool(path, max_bytes=1 << 20, max_age_s=3600)
    logs = shared_spool(path, max_bytes=1 << 20, max_age_s=3600)
    assert logs is traces
    assert traces.append("traces", [("t", "span")]) == [1]
    assert traces.claim("traces", 5) is not None
    traces.release()  # the logs outbox still uses it: the rows stay this process's
    traces.close()
    assert logs.append("logs", [("l", "record")]) == [2]
    check = sqlite3.connect(path)
    try:
        assert check.execute("SELECT count(*) FROM records WHERE owner IS NOT NULL").fetchone() == (2,)
    finally:
        check.close()
    logs.release()
    logs.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("SELECT count(*) FROM records WHERE owner IS NULL").fetchone() == (2,)
    finally:
        check.close()
    assert logs.append("logs", [("late", "x")]) is None  # closed by its last user
    again = shared_spool(path, max_bytes=1 << 20, max_age_s=3600)  # the next instrument(): a fresh one
    assert again is not traces
    assert again.append("logs", [("m", "y")]) == [3]
    again.close()
