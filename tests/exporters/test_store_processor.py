"""The store's two front doors, ``StoreProcessor`` (what ``instrument()`` uses) and ``SQLiteSpanExporter``:
which spans they write, how long they may wait on a held lock, and a span they cannot read."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes
from tests.busy_app import work_between_spans

import tallyspan
from tallyspan._config import ShutdownBudget
from tallyspan._state import Settings
from tallyspan._store._store_schema import connect
from tallyspan_exporters import SQLiteSpanExporter, StoreProcessor, store_component


class _RecordOnly(Sampler):
    """Records every span (processors see it end) without sampling it (not to be exported)."""

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        return SamplingResult(
            Decision.RECORD_ONLY if name.startswith("unsampled") else Decision.RECORD_AND_SAMPLE
        )

    def get_description(self) -> str:
        return "record-only for names starting with 'unsampled'"


def _names(db_path: Path) -> list[str]:
    db = connect(db_path)
    try:
        return [row[0] for row in db.execute("SELECT name FROM spans ORDER BY name")]
    finally:
        db.close()


def test_the_store_processor_skips_spans_recorded_but_not_sampled(db_path: Path) -> None:
    store = StoreProcessor(db_path)
    provider = TracerProvider(sampler=_RecordOnly())
    provider.add_span_processor(store)
    tracer = provider.get_tracer("test")
    tracer.start_span("unsampled step").end()
    tracer.start_span("sampled step").end()
    assert store.force_flush()
    assert _names(db_path) == ["sampled step"]
    provider.shutdown()


def _store_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "tallyspan-store")


def test_the_store_processor_writes_from_a_thread_of_its_own_named_for_it(db_path: Path) -> None:
    before = _store_threads()
    store = StoreProcessor(db_path)
    provider = TracerProvider()
    provider.add_span_processor(store)
    assert _store_threads() == before  # started by the first span, not before
    provider.get_tracer("test").start_span("one").end()
    assert store.force_flush()
    assert _store_threads() == before + 1
    provider.shutdown()
    assert _store_threads() == before


def test_a_span_the_store_cannot_read_is_counted_and_the_rest_of_the_batch_written(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    context = trace.SpanContext(trace_id=1, span_id=2, is_remote=False, trace_flags=trace.TraceFlags(1))
    broken = ReadableSpan(name="broken", context=context, kind=None)  # type: ignore[arg-type]
    good = ReadableSpan(
        name="good",
        context=trace.SpanContext(trace_id=1, span_id=3, is_remote=False, trace_flags=trace.TraceFlags(1)),
    )
    store = StoreProcessor(db_path)
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._store"):
        store.on_end(broken)
        store.on_end(good)
        store.force_flush()
    assert _names(db_path) == ["good"]
    assert tallyspan.stats()["dropped.store_spans"] == 1
    assert tallyspan.stats()["errors.store.export"] == 1
    messages = [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG]
    assert messages == [f"could not read a span for the tallyspan store at {db_path}"]
    store.shutdown()
    exporter = SQLiteSpanExporter(db_path)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._store"):
        exporter.export([broken])
    assert [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG] == messages
    exporter.shutdown()


def test_the_exporters_flush_waits_no_longer_than_asked_on_a_held_lock(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    exporter = SQLiteSpanExporter(db_path, busy_timeout_millis=1500)
    exporter.export([ReadableSpan(name="first", context=_context(1))])
    lock_holder.execute("BEGIN EXCLUSIVE")
    exporter.export([ReadableSpan(name="kept", context=_context(2))])  # waits the busy timeout once
    started = time.monotonic()
    assert exporter.force_flush(100) is False
    assert time.monotonic() - started < 1.2  # not the busy timeout
    lock_holder.execute("COMMIT")
    assert exporter.force_flush() is True
    assert _names(db_path) == ["first", "kept"]
    exporter.shutdown()


def _context(span_id: int) -> trace.SpanContext:
    return trace.SpanContext(trace_id=7, span_id=span_id, is_remote=False, trace_flags=trace.TraceFlags(1))


def test_the_store_component_shuts_down_within_the_instrumentations_budget(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    settings = Settings(db_path=db_path, shutdown_budget=ShutdownBudget(0.2))
    store = store_component((), settings)
    assert isinstance(store, StoreProcessor)
    store.on_end(ReadableSpan(name="first", context=_context(1)))
    assert store.force_flush()
    lock_holder.execute("BEGIN EXCLUSIVE")
    store.on_end(ReadableSpan(name="kept", context=_context(2)))
    started = time.monotonic()
    store.shutdown()  # the writer's last wait for the lock is the busy timeout (5 s): the budget cuts it
    assert time.monotonic() - started < 2
    lock_holder.execute("COMMIT")


def test_no_store_component_without_a_database() -> None:
    assert store_component((), Settings(db_path=None)) is None


def test_a_store_that_cannot_be_written_is_named_with_what_was_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = SQLiteSpanExporter(tmp_path)  # a directory: SQLite cannot open it
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):
        exporter.export([ReadableSpan(name="lost", context=_context(1))])
    debug = [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG]
    assert debug == [f"could not write spans to the tallyspan store at {tmp_path}"]
    assert tallyspan.stats()["errors.store.write"] == 1
    exporter.shutdown()


def _voluntary_switches(thread: threading.Thread) -> int:
    with open(f"/proc/self/task/{thread.native_id}/status") as status:
        return int(status.read().split("voluntary_ctxt_switches:")[1].split()[0])


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="reads a thread's switches from Linux's /proc"
)
def test_behind_an_app_that_keeps_the_gil_busy_the_writer_is_handed_the_gil_instead_of_waking_in_vain(
    db_path: Path,
) -> None:
    """The store's writer is fed by the chain's worker, not by the app, so the app's hand-overs to the
    worker never reached it: once its wait was over it waited for the GIL behind an app thread that lets
    go of it only for moments, woken at each of those moments to lose the race again (2.1-2.4 wake-ups
    per span here, each a system call on both threads). The app's next span hands it over instead."""
    from tallyspan.plugin import HandOvers
    from tallyspan_processors import OffThreadProcessor

    link = HandOvers()  # as instrument() links the chain's head to the store's writer
    store = StoreProcessor(db_path, hand_overs=link)
    processor = OffThreadProcessor([store], hand_overs=link)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    tracer.start_span("first").end()
    assert processor.force_flush(30_000)
    writer = store._thread._thread
    assert writer is not None
    before = _voluntary_switches(writer)
    spans = 3000
    for _ in range(spans):
        tracer.start_span("call").end()
        work_between_spans()
    switches = _voluntary_switches(writer) - before
    assert processor.force_flush(30_000)
    # Handed the GIL, 0.03-0.05 a span (its waits for work, one per batch, and for the GIL between
    # statements), even with another such test running beside it on this machine's two cores.
    assert switches <= spans // 4, switches
    assert len(_names(db_path)) == spans + 1
    assert "dropped.store_spans" not in tallyspan.stats()
    provider.shutdown()
