"""fork() after ``tallyspan.instrument()`` (gunicorn, celery prefork): the child's spans are checked and
stored by a worker of its own, and the parent goes on as before.

The child reports through its exit status only (it leaves with ``os._exit``, as a prefork worker
does, so no atexit hook flushes for it); what it wrote is read back from the shared SQLite store.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from tests.forking import run_forked

import tallyspan
from tallyspan import _selfstats, semconv
from tallyspan._content import ModelContent, content_buffer
from tallyspan._store._store_schema import connect

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

CONTRACTS = {"contracts": {"report": {"min_chars": 50}}}
#: Only a guard against a child that hangs (a deadlock): the test fails instead of hanging the suite.


def _model_span(provider: TracerProvider, name: str, output: str) -> None:
    """What an instrumentor does: a model span whose output goes to the ContentBuffer before it ends."""
    span = provider.get_tracer("test").start_span(
        name, attributes={semconv.GEN_AI_OPERATION_NAME: "chat", semconv.STAGE: "report"}
    )
    content_buffer().put(span.get_span_context().span_id, ModelContent(output, prompt="weekly report?"))
    span.end()


def _rows(db_path: Path) -> dict[str, list[str]]:
    db = connect(db_path)
    try:
        db.row_factory = sqlite3.Row
        return {
            str(row["name"]): json.loads(row["violation_types"])
            for row in db.execute("SELECT name, violation_types FROM spans")
        }
    finally:
        db.close()


def test_a_forked_child_checks_and_stores_its_spans_and_the_parent_is_unaffected(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    instrumentation = tallyspan.instrument(
        CONTRACTS, tracer_provider=tracer_provider, store=db_path, instrumentors=[]
    )
    _model_span(tracer_provider, "chat parent-before", "short")  # the worker thread now runs
    assert instrumentation.force_flush()

    def child() -> bool:
        _model_span(tracer_provider, "chat child", "too short")
        return instrumentation.force_flush(30_000)

    assert run_forked(child) == 0
    _model_span(
        tracer_provider,
        "chat parent-after",
        "The weekly report: every ticket was answered within one working day.",
    )
    assert instrumentation.force_flush()
    assert _rows(db_path) == {
        "chat parent-before": ["too_short"],
        "chat child": ["too_short"],
        "chat parent-after": [],
    }


def test_a_fork_while_other_threads_hold_our_locks_does_not_deadlock_the_child(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    """The worker pops content under the buffer's lock; a fork at that instant copies the lock held."""
    # Before the fix the child hung on its first put (the guard killed it: exit code -9).
    instrumentation = tallyspan.instrument(
        CONTRACTS, tracer_provider=tracer_provider, store=db_path, instrumentors=[]
    )
    held, release = threading.Event(), threading.Event()

    def hold(lock: threading.Lock) -> None:
        with lock:
            held.set()
            release.wait(60)

    holders = [
        threading.Thread(target=hold, args=(content_buffer()._lock,), daemon=True),
        threading.Thread(target=hold, args=(_selfstats._lock,), daemon=True),  # any thread counting
    ]
    for holder in holders:
        holder.start()
        assert held.wait(10)
        held.clear()

    def child() -> bool:
        _model_span(tracer_provider, "chat child", "too short")
        tallyspan.stats()
        return instrumentation.force_flush(30_000)

    try:
        code = run_forked(child)
    finally:
        release.set()
    assert code == 0
    assert _rows(db_path) == {"chat child": ["too_short"]}


def test_a_forked_child_gets_a_worker_and_queue_of_its_own_while_the_parents_is_held() -> None:
    """The parent's worker is held on a span and its queue is full at the fork: in the child, neither
    exists; its spans are forwarded by a fresh worker (not counted as a restart) and none is dropped."""
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

    from tallyspan_processors import OffThreadProcessor

    class _Gate(SpanProcessor):
        def __init__(self) -> None:
            self.ended: list[str] = []
            self.entered, self.release = threading.Event(), threading.Event()

        def on_end(self, span: ReadableSpan) -> None:
            self.ended.append(span.name)
            if span.name == "gate":
                self.entered.set()
                self.release.wait(60)

    gate = _Gate()
    processor = OffThreadProcessor([gate], max_queue_size=2, batch_delay_millis=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    tracer.start_span("gate").end()
    assert gate.entered.wait(10)
    tracer.start_span("queued-1").end()
    tracer.start_span("queued-2").end()  # the queue is full

    def child() -> bool:
        tracer.start_span("child").end()
        flushed = processor.force_flush(30_000)
        losses = [key for key in tallyspan.stats() if key.startswith(("dropped.", "errors."))]
        return flushed and gate.ended == ["gate", "child"] and not losses

    try:
        assert run_forked(child) == 0
    finally:
        gate.release.set()
    assert processor.force_flush(10_000)
    assert gate.ended == ["gate", "queued-1", "queued-2"]
    provider.shutdown()
