"""OffThreadProcessor: the app's thread only enqueues; one worker forwards in order, drains on flush."""

from __future__ import annotations

import logging
import math
import platform
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, get_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.busy_app import work_between_spans
from tests.c_library import CLibrary
from tests.stats import losses

import tallyspan
from tallyspan import _turns as _turns_module
from tallyspan_processors import OffThreadProcessor, WrappingProcessor


class _Recorder(SpanProcessor):
    def __init__(self) -> None:
        self.ended: list[str] = []
        self.threads: set[str] = set()
        self.suppressed: list[object] = []
        self.flushed = 0
        self.shut_down = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span.name)
        self.threads.add(threading.current_thread().name)
        self.suppressed.append(get_value(_SUPPRESS_INSTRUMENTATION_KEY))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flushed += 1
        return True

    def shutdown(self) -> None:
        self.shut_down += 1


class _Failing(SpanProcessor):
    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("downstream is broken")


class _Blocking(SpanProcessor):
    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        self.entered.set()
        self.release.wait(10)


def _spans(provider: TracerProvider, count: int, first: int = 0) -> None:
    tracer = provider.get_tracer("test")
    for index in range(first, first + count):
        with tracer.start_as_current_span(f"span-{index}"):
            pass


def test_forwards_every_span_in_end_order_on_the_worker_thread() -> None:
    recorder = _Recorder()
    provider = TracerProvider()
    provider.add_span_processor(OffThreadProcessor([recorder]))
    _spans(provider, 50)
    assert provider.force_flush()
    assert recorder.ended == [f"span-{index}" for index in range(50)]
    assert recorder.threads == {"tallyspan-worker"}
    assert recorder.flushed == 1
    provider.shutdown()


def test_downstream_runs_with_instrumentation_suppressed() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 2)
    processor.force_flush()
    assert recorder.suppressed == [True, True]
    provider.shutdown()


def test_a_failing_downstream_neither_stops_the_worker_nor_the_others() -> None:
    recorder = _Recorder()
    provider = TracerProvider()
    provider.add_span_processor(OffThreadProcessor([_Failing(), recorder]))
    _spans(provider, 3)
    assert provider.force_flush()
    assert recorder.ended == ["span-0", "span-1", "span-2"]
    assert tallyspan.stats()["errors.worker.on_end"] == 3
    provider.shutdown()


def test_full_queue_drops_and_counts_instead_of_blocking_the_app() -> None:
    blocking = _Blocking()
    processor = OffThreadProcessor([blocking], max_queue_size=2)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    assert blocking.entered.wait(5)
    _spans(provider, 5)  # 2 fit in the queue while the worker is stuck on the first
    assert tallyspan.stats()["dropped.spans"] == 3
    blocking.release.set()
    assert processor.force_flush(5000)
    provider.shutdown()


def test_force_flush_times_out_when_the_worker_is_stuck() -> None:
    blocking = _Blocking()
    processor = OffThreadProcessor([blocking])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    assert blocking.entered.wait(5)
    started = time.monotonic()
    assert processor.force_flush(50) is False
    assert time.monotonic() - started < 0.9  # its timeout, not a second or more
    blocking.release.set()
    provider.shutdown()


def test_shutdown_drains_then_shuts_downstream_once_and_later_spans_are_counted() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 4)
    processor.shutdown()
    processor.shutdown()
    assert recorder.ended == ["span-0", "span-1", "span-2", "span-3"]
    assert recorder.shut_down == 1
    _spans(provider, 1)
    assert tallyspan.stats()["dropped.spans_after_shutdown"] == 1


def test_flush_without_any_span_returns_true_without_starting_a_thread() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder])
    assert processor.force_flush(100) is True
    assert processor._worker is None
    processor.shutdown()


def test_max_queue_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^max_queue_size must be at least 1$"):
        OffThreadProcessor([], max_queue_size=0)


def test_spans_reach_an_exporter_identical_when_no_link_enriches_them() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(OffThreadProcessor([SimpleSpanProcessor(exporter)]))
    with provider.get_tracer("test").start_as_current_span("only", attributes={"k": 1}) as span:
        span_id = span.get_span_context().span_id
    provider.force_flush()
    (exported,) = exporter.get_finished_spans()
    assert exported.context.span_id == span_id
    assert dict(exported.attributes or {}) == {"k": 1}
    provider.shutdown()


def test_a_span_racing_into_the_queue_during_shutdown_is_discarded_counted_and_forgotten() -> None:
    """An app thread that saw the processor open just before shutdown puts its span behind the worker's
    stop marker: shutdown must drop it (counted, its content freed), not leave it queued for ever."""
    from tallyspan._content import ModelContent, content_buffer
    from tallyspan_processors._worker import _STOP

    source = InMemorySpanExporter()
    source_provider = TracerProvider()
    source_provider.add_span_processor(SimpleSpanProcessor(source))
    _spans(source_provider, 1)
    (racer,) = source.get_finished_spans()
    assert racer.context is not None
    content_buffer().add_consumer()  # a checks link would be the consumer
    content_buffer().put(racer.context.span_id, ModelContent("late answer"))

    class _RacingQueue(queue.SimpleQueue[object]):
        def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
            super().put(item)
            if item is _STOP:
                super().put(racer)  # the racing thread enqueues right behind the stop marker

    recorder = _Recorder()
    processor = OffThreadProcessor([recorder])
    processor._queue = _RacingQueue()
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 2)
    processor.shutdown()
    assert recorder.ended == ["span-0", "span-1"]
    assert tallyspan.stats()["dropped.spans_at_shutdown"] == 1
    assert processor._queue.empty()
    try:
        assert content_buffer().pop(racer.context.span_id) is None
    finally:
        content_buffer().remove_consumer()
    assert processor.force_flush(100) is False  # not everything was forwarded
    source_provider.shutdown()


class _BrokenForget(WrappingProcessor):
    """A link below the worker whose forget fails (a bug of ours): the app must not see it."""

    def __init__(self) -> None:
        super().__init__([])
        self.gate = _Blocking()

    def receive(self, span: ReadableSpan, content: object) -> None:
        self.gate.on_end(span)

    def forget(self, span: ReadableSpan) -> None:
        raise RuntimeError("forget is broken")


def test_a_link_that_fails_to_forget_a_dropped_span_is_logged_and_counted_on_the_apps_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = _BrokenForget()
    processor = OffThreadProcessor([broken], max_queue_size=1)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with caplog.at_level(logging.DEBUG, logger="tallyspan_processors._worker"):
        _spans(provider, 1)
        assert broken.gate.entered.wait(10)
        _spans(provider, 3)  # one queued, two dropped: each forgotten, and forgetting fails
    assert tallyspan.stats()["dropped.spans"] == 2
    assert tallyspan.stats()["errors.worker.forget"] == 2
    messages = [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG]
    assert messages == ["tallyspan could not forget a dropped span"] * 2
    broken.gate.release.set()
    provider.shutdown()


class _Forgetful(WrappingProcessor):
    def __init__(self) -> None:
        super().__init__([])
        self.gate = _Blocking()
        self.forgotten: list[str] = []

    def receive(self, span: ReadableSpan, content: object) -> None:
        self.gate.on_end(span)

    def forget(self, span: ReadableSpan) -> None:
        self.forgotten.append(span.name)


def test_spans_handed_down_and_given_up_at_shutdown_are_forgotten_below() -> None:
    """The worker as a link below another: what shutdown gives up is forgotten by the links below it."""
    below = _Forgetful()
    worker = OffThreadProcessor([below], max_queue_size=4, shutdown_timeout_millis=50)
    head = WrappingProcessor([worker])
    provider = TracerProvider()
    provider.add_span_processor(head)
    _spans(provider, 1)
    assert below.gate.entered.wait(10)
    _spans(provider, 3)
    worker.shutdown()  # gives up at once: the worker discards the queued spans once it is free
    below.gate.release.set()
    deadline = time.monotonic() + 10
    while tallyspan.stats().get("dropped.spans_at_shutdown", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tallyspan.stats()["dropped.spans_at_shutdown"] == 3
    assert below.forgotten == ["span-0", "span-1", "span-2"]  # the second three
    assert not any(key.startswith("errors.") for key in tallyspan.stats())
    head.shutdown()


class _Received(WrappingProcessor):
    def __init__(self) -> None:
        super().__init__([])
        self.received: list[tuple[str, object]] = []

    def receive(self, span: ReadableSpan, content: object) -> None:
        self.received.append((span.name, content))


def test_below_another_link_the_worker_carries_the_content_it_was_handed() -> None:
    from tallyspan._content import ModelContent, content_buffer

    below = _Received()
    worker = OffThreadProcessor([below])
    head = WrappingProcessor([worker])  # takes each span's content and hands it down
    provider = TracerProvider()
    provider.add_span_processor(head)
    span = provider.get_tracer("test").start_span("chat m")
    answer = ModelContent("the answer")
    content_buffer().put(span.get_span_context().span_id, answer)
    span.end()
    assert worker.force_flush()
    assert below.received == [("chat m", answer)]
    worker.shutdown()
    provider.get_tracer("test").start_span("late").end()  # after shutdown: counted and forgotten
    assert tallyspan.stats()["dropped.spans_after_shutdown"] == 1
    assert not any(key.startswith("errors.") for key in tallyspan.stats())
    head.shutdown()


def _gathering_since(processor: OffThreadProcessor, after: float) -> bool:
    """Wait until the worker has started a batch delay after ``after`` (monotonic): it ran, took what it
    was woken for and now lets spans gather. Its wait ends at ``_due``, an hour past its start here."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        due = processor._due
        if math.isfinite(due) and due - 3_600 >= after:
            return True
        time.sleep(0.005)
    return False


def test_spans_gather_for_the_batch_delay_and_a_flush_or_shutdown_cuts_it_short() -> None:
    recorder = _Recorder()
    # An hour: nothing but a flush or shutdown can end the wait within the test.
    processor = OffThreadProcessor([recorder], batch_delay_millis=3_600_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    before = time.monotonic()
    _spans(provider, 3)
    # Not a sleep: the worker is seen to have run (it woke for the first span) and to be gathering.
    assert _gathering_since(processor, before)
    assert not processor._wake.is_set()  # nothing cut the wait short
    assert recorder.ended == []  # still gathering
    before_flush = time.monotonic()
    assert processor.force_flush(timeout_millis=10_000)
    assert recorder.ended == ["span-0", "span-1", "span-2"]
    assert _gathering_since(processor, before_flush)  # busy a moment ago: after the flush it gathers again
    _spans(provider, 2)
    assert not processor._wake.is_set()  # the two spans did not cut the new wait short
    assert recorder.ended == ["span-0", "span-1", "span-2"]
    processor.shutdown()
    assert recorder.ended == ["span-0", "span-1", "span-2", "span-0", "span-1"]
    assert "dropped.spans_at_shutdown" not in tallyspan.stats()


def test_a_whole_batch_is_handled_without_waiting_for_the_rest_of_the_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind a fast app a long batch delay would fill the queue up to the (counted) turns: a quarter of
    the backlog that gives turns is a batch, handed over at once."""
    # The hand-over is taken, not timed out: on a loaded host the worker may not run within the production
    # wait (10 ms), so it gets a wait no scheduler misses.
    monkeypatch.setattr(_turns_module, "TURN_TIMEOUT_S", 30.0)
    recorder = _Recorder()
    # Turns from 1024 // 16 = 64 spans: a batch is 16. An hour's delay: only the batch ends the wait.
    processor = OffThreadProcessor([recorder], max_queue_size=1024, batch_delay_millis=3_600_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    before = time.monotonic()
    # The first span wakes the worker, which holds it while the next ones gather: 15 in the queue.
    _spans(provider, 1)
    assert _gathering_since(processor, before)  # the worker ran, took span-0, and gathers
    _spans(provider, 15, first=1)
    # 15 waiting, one short of a batch: the app's thread did not cut the wait short, and nothing went.
    assert not processor._wake.is_set()
    assert recorder.ended == []
    _spans(provider, 1)
    deadline = time.monotonic() + 10
    while len(recorder.ended) < 17 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.ended == [*(f"span-{index}" for index in range(16)), "span-0"]
    assert "backpressure.worker_turns" not in tallyspan.stats()
    processor.shutdown()


def test_without_a_batch_delay_spans_are_forwarded_as_they_come() -> None:
    forwarded = threading.Event()

    class _Signalling(_Recorder):
        def on_end(self, span: ReadableSpan) -> None:
            super().on_end(span)
            forwarded.set()

    recorder = _Signalling()
    provider = TracerProvider()
    provider.add_span_processor(OffThreadProcessor([recorder], batch_delay_millis=0))
    started = time.monotonic()
    _spans(provider, 1)
    assert forwarded.wait(10)  # no flush asked for it
    assert time.monotonic() - started < 0.9  # nor did it wait a moment for others
    assert recorder.ended == ["span-0"]
    provider.shutdown()


def test_the_worker_gives_memory_back_after_a_backlog_and_goes_on() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder], batch_delay_millis=50)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1500)  # more than a backlog's worth, queued within the delay
    assert processor.force_flush(timeout_millis=30_000)
    _spans(provider, 1)
    assert processor.force_flush(timeout_millis=30_000)
    assert len(recorder.ended) == 1501
    assert not any(key.startswith("errors.worker") for key in tallyspan.stats())
    provider.shutdown()


def test_force_flush_hands_the_downstream_what_is_left_of_its_timeout() -> None:
    given: list[int] = []

    class _Timed(_Recorder):
        def force_flush(self, timeout_millis: int = 30000) -> bool:
            given.append(timeout_millis)
            return True

    processor = OffThreadProcessor([_Timed()])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    assert processor.force_flush(1_000_000)
    (left,) = given
    # All but what the drain took (the batch delay is cut short): well under a second of the 1000 s.
    assert 999_000 < left <= 1_000_000
    provider.shutdown()


def test_the_worker_component_shuts_down_within_the_instrumentations_budget() -> None:
    from tallyspan._config import ShutdownBudget
    from tallyspan._state import Settings
    from tallyspan_processors._worker import worker_component

    stuck = _Blocking()
    processor = worker_component([stuck], Settings(shutdown_budget=ShutdownBudget(0.2)))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 2)
    assert stuck.entered.wait(10)
    started = time.monotonic()
    processor.shutdown()  # the default would wait 30 s for the stuck processor
    assert time.monotonic() - started < 5
    stuck.release.set()


def test_force_flush_on_a_full_queue_behind_a_stuck_worker_is_false_at_its_timeout() -> None:
    blocking = _Blocking()
    processor = OffThreadProcessor([blocking], max_queue_size=1, batch_delay_millis=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    assert blocking.entered.wait(5)
    _spans(provider, 1)  # queued: the queue is full, no room for the flush's marker
    started = time.monotonic()
    assert processor.force_flush(100) is False
    assert time.monotonic() - started < 0.9  # its timeout, not a second or more
    blocking.release.set()
    provider.shutdown()


def _workers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "tallyspan-worker"]


def test_one_daemon_worker_thread_forwards_every_span(caplog: pytest.LogCaptureFixture) -> None:
    before = len(_workers())
    recorder = _Recorder()
    processor = OffThreadProcessor([_Failing(), recorder])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with caplog.at_level(logging.DEBUG, logger="tallyspan_processors._worker"):
        for _ in range(3):
            _spans(provider, 2)
            assert processor.force_flush(5000)
    mine = _workers()[before:]
    assert len(mine) == 1
    assert mine[0].daemon is True  # it must never keep the app's process alive
    assert len(recorder.ended) == 6
    messages = [
        r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name.endswith("_worker")
    ]
    assert messages == ["a span processor failed on the worker"] * 6
    provider.shutdown()


def test_shutdown_gives_up_on_a_stuck_worker_at_its_timeout() -> None:
    stuck = _Blocking()
    processor = OffThreadProcessor([stuck], shutdown_timeout_millis=100)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 2)
    assert stuck.entered.wait(10)
    started = time.monotonic()
    processor.shutdown()
    assert time.monotonic() - started < 0.9  # its 100 ms, not a second or more
    stuck.release.set()


def test_the_worker_thread_ends_at_shutdown_and_leaves_its_context_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = set(_workers())
    processor = OffThreadProcessor([_Recorder()])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    (mine,) = set(_workers()) - before
    with caplog.at_level(logging.DEBUG, logger="opentelemetry.context"):
        processor.shutdown()
    assert not mine.is_alive()
    assert [r.getMessage() for r in caplog.records if r.name == "opentelemetry.context"] == []


class _Unreadable(ReadableSpan):
    """A span handed to ``on_end`` whose attributes cannot be read (another SDK's span, a bug)."""

    @property
    def attributes(self) -> Any:
        raise RuntimeError("attributes that cannot be read")


def test_a_span_whose_content_cannot_be_read_goes_on_without_it_and_the_failure_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    below = _Received()
    processor = OffThreadProcessor([below])
    with caplog.at_level(logging.DEBUG, logger="tallyspan_processors._worker"):
        processor.on_end(_Unreadable("chat unreadable"))
        assert processor.force_flush(10_000)
    assert below.received == [("chat unreadable", None)]
    assert losses() == {"errors.content.take": 1}
    messages = [
        r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name.endswith("_worker")
    ]
    assert messages == ["tallyspan could not read a span's content"]
    processor.shutdown()


def test_below_another_link_the_worker_frees_a_forgotten_spans_content_and_passes_it_down() -> None:
    from tallyspan._content import ModelContent, content_buffer

    below = _Forgetful()
    worker = OffThreadProcessor([below])
    head = WrappingProcessor([worker])
    provider = TracerProvider()
    span = provider.get_tracer("test").start_span("chat dropped")
    span_id = span.get_span_context().span_id
    content_buffer().put(span_id, ModelContent("never checked"))
    span.end()  # no processor on this provider: the span ends, and the head is told to forget it
    assert isinstance(span, ReadableSpan)
    head.forget(span)
    assert content_buffer().pop(span_id) is None
    assert below.forgotten == ["chat dropped"]
    assert not any(key.startswith("errors.") for key in tallyspan.stats())
    head.shutdown()


class _Gate(SpanProcessor):
    """Holds the worker on each span named ``gate`` until :meth:`open`; records every span's name."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.entered = threading.Event()
        self.released = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span.name)
        if span.name == "gate":
            self.entered.set()
            self.released.wait(30)

    def open(self) -> None:
        released, self.entered, self.released = self.released, threading.Event(), threading.Event()
        released.set()


class _IdleSignallingQueue(queue.SimpleQueue[object]):
    """Signals each time the worker found the queue empty and waits for more: its busy spell is over."""

    def __init__(self) -> None:
        super().__init__()
        self.idle = threading.Event()

    def get(self, block: bool = True, timeout: float | None = None) -> object:
        if block:
            self.idle.set()
        return super().get(block, timeout)

    def get_nowait(self) -> object:
        return self.get(False)  # SimpleQueue's own get_nowait would pass by the override above


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="only glibc keeps freed memory and can be asked for it back",
)
def test_each_backlog_of_1024_spans_or_more_gives_memory_back_and_one_of_1023_does_not() -> None:
    gate = _Gate()
    processor = OffThreadProcessor([gate], batch_delay_millis=0)
    spells = _IdleSignallingQueue()
    processor._queue = spells
    provider = TracerProvider()
    provider.add_span_processor(processor)

    def busy_spell(spans: int) -> None:
        """``spans`` spans worked off back to back: the first holds the worker while the rest queue up."""
        with provider.get_tracer("test").start_as_current_span("gate"):
            pass
        assert gate.entered.wait(10)
        _spans(provider, spans - 1)
        spells.idle.clear()
        gate.open()
        assert spells.idle.wait(30)

    busy_spell(1023)
    assert processor.memory_releases == 0
    busy_spell(1024)
    assert processor.memory_releases == 1
    busy_spell(1100)
    assert processor.memory_releases == 2
    assert len(gate.ended) == 1023 + 1024 + 1100
    assert not any(key.startswith("errors.") for key in tallyspan.stats())
    provider.shutdown()


def test_after_fork_the_worker_starts_afresh_with_an_empty_queue_of_the_same_bound() -> None:
    """What the fork hook does in the child, driven in this process (a mutation tool sees no child):
    the parent's worker, here held for good, is gone there with its full queue; the child's spans are
    forwarded by a worker of its own, through a queue as bounded as the parent's."""
    gate = _Gate()
    processor = OffThreadProcessor([gate], max_queue_size=2, batch_delay_millis=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("test").start_as_current_span("gate"):
        pass
    assert gate.entered.wait(10)
    parents_gate = gate.released
    gate.released = threading.Event()  # the parent's worker stays held
    gate.entered.clear()
    _spans(provider, 2)  # the queue is full
    before = set(_workers())

    processor._reset_after_fork()

    _spans(provider, 1)
    assert processor.force_flush(10_000)
    assert gate.ended == ["gate", "span-0"]
    assert len(set(_workers()) - before) == 1  # a worker of its own
    with provider.get_tracer("test").start_as_current_span("gate"):
        pass
    assert gate.entered.wait(10)
    _spans(provider, 3)  # two fit in the fresh queue while the child's worker is held
    assert {
        key: value for key, value in tallyspan.stats().items() if key.startswith(("dropped.", "errors."))
    } == {"dropped.spans": 1}
    gate.open()
    assert processor.force_flush(10_000)
    assert gate.ended == ["gate", "span-0", "gate", "span-0", "span-1"]
    provider.shutdown()
    parents_gate.set()


def test_shutdown_that_gives_up_on_a_full_queue_leaves_flush_false_until_the_worker_is_free() -> None:
    blocking = _Blocking()
    processor = OffThreadProcessor([blocking], max_queue_size=1, shutdown_timeout_millis=100)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    assert blocking.entered.wait(5)
    _spans(provider, 1)  # queued: the queue is full, no room for shutdown's marker
    processor.shutdown()
    assert processor.force_flush(100) is False  # the queued span was not forwarded
    blocking.release.set()


def test_a_flush_while_shutdown_still_drains_does_not_claim_the_queue_was_forwarded() -> None:
    gate = _Gate()
    processor = OffThreadProcessor([gate], batch_delay_millis=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("test").start_as_current_span("gate"):
        pass
    assert gate.entered.wait(10)
    _spans(provider, 1)  # waits behind the held worker
    shutting_down = threading.Thread(target=processor.shutdown)
    shutting_down.start()
    deadline = time.monotonic() + 10
    while "dropped.spans_after_shutdown" not in tallyspan.stats() and time.monotonic() < deadline:
        _spans(provider, 1)  # refused (and counted) once shutdown has begun
    assert processor.force_flush(100) is False
    gate.open()
    shutting_down.join(10)
    assert gate.ended == ["gate", "span-0"]
    assert processor.force_flush(100) is True  # shutdown forwarded everything after all


class _Exiting(ReadableSpan):
    """A span whose attributes call ``sys.exit()`` when read (a bug elsewhere): it ends the worker."""

    @property
    def attributes(self) -> Any:
        raise SystemExit("a bug calls sys.exit()")


# The worker's death is the point: pytest would report the SystemExit that ended the thread.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_that_died_is_started_again_on_the_next_span_and_counted() -> None:
    before = set(_workers())
    below = _Received()
    processor = OffThreadProcessor([below], batch_delay_millis=0)
    processor.on_end(_Exiting("chat exiting"))
    (dead,) = set(_workers()) - before
    dead.join(10)
    assert not dead.is_alive()
    processor.on_end(_Unreadable("chat next"))
    assert processor.force_flush(10_000)
    assert below.received == [("chat next", None)]
    assert losses() == {"errors.worker.restarted": 1, "errors.content.take": 1}
    (started_again,) = set(_workers()) - before
    assert started_again is not dead
    processor.shutdown()


class _ClosedUntilOpenedQueue(_IdleSignallingQueue):
    """Keeps a new worker from its first look into the queue until :meth:`open`, so what was queued
    before is the worker's first busy spell, whatever the threads' timing."""

    def __init__(self) -> None:
        super().__init__()
        self._opened = threading.Event()

    def open(self) -> None:
        self._opened.set()

    def get(self, block: bool = True, timeout: float | None = None) -> object:
        assert self._opened.wait(30)
        return super().get(block, timeout)


def test_the_workers_first_busy_spell_counts_from_its_first_span(
    c_library: Callable[..., CLibrary],
) -> None:
    c_library()  # on any C library: the count of releases is the point
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder], batch_delay_millis=0)
    spell = _ClosedUntilOpenedQueue()
    processor._queue = spell
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1023)  # all queued before the new worker looks
    spell.open()
    assert spell.idle.wait(30)
    assert len(recorder.ended) == 1023
    assert processor.memory_releases == 0  # one span short of a backlog
    provider.shutdown()


class _Busy(SpanProcessor):
    """Costs the worker about as much pure-Python CPU per span as the checks do, and counts the spans."""

    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        total = 0
        for number in range(3000):
            total += number
        self.ended += 1


def test_an_app_that_keeps_the_gil_busy_gives_the_worker_turns_instead_of_dropping_spans() -> None:
    """CPython makes a thread that waits for the GIL wait a whole switch interval, and each short release
    by the running thread starts that wait again: without turns, the worker behind this app thread is
    starved and its queue of 512 overflows."""
    busy = _Busy()
    processor = OffThreadProcessor([busy], max_queue_size=512, batch_delay_millis=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    for _ in range(4000):
        tracer.start_span("call").end()
        work_between_spans()
    assert processor.force_flush(30000)
    stats = tallyspan.stats()
    assert "dropped.spans" not in stats
    assert busy.ended == 4000
    provider.shutdown()


def test_a_stuck_worker_costs_the_app_one_turn_per_step_of_its_backlog_not_one_per_span() -> None:
    gate = _Gate()
    processor = OffThreadProcessor([gate], max_queue_size=64, batch_delay_millis=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.get_tracer("test").start_span("gate").end()  # 1 span waits, under 64 // 16 = 4: no turn
    assert gate.entered.wait(10)
    assert "backpressure.worker_turns" not in tallyspan.stats()
    # The next span hands the GIL over to the worker, woken and due: stuck, it does not take it, and
    # that wait is counted; at 2 spans queued (doubled) once more. Then one turn is given at 4 spans
    # queued, then at 8, 12, 16 and 20 only.
    _spans(provider, 22)
    assert tallyspan.stats()["backpressure.worker_turns"] == 7
    gate.open()
    assert processor.force_flush(10000)
    assert len(gate.ended) == 23
    # The worker ran again since: stuck again, it costs a new series of turns, from 4 spans queued.
    provider.get_tracer("test").start_span("gate").end()
    assert gate.entered.wait(10)
    _spans(provider, 9)
    assert tallyspan.stats()["backpressure.worker_turns"] == 7 + 4  # the hand-overs at 1 and 2, at 4 and at 8
    gate.open()
    assert processor.force_flush(10000)
    assert len(gate.ended) == 23 + 10
    _spans(provider, 30)  # not stuck: handed over, forwarded, nothing dropped
    assert processor.force_flush(10000)
    assert len(gate.ended) == 23 + 10 + 30
    assert "dropped.spans" not in tallyspan.stats()
    provider.shutdown()


def test_spans_ended_on_the_workers_own_thread_never_wait_for_its_turn() -> None:
    processor: OffThreadProcessor
    provider = TracerProvider()

    class _EndsSpans(SpanProcessor):
        """Ends spans of the same provider from the worker, as a user's processor downstream might."""

        def on_end(self, span: ReadableSpan) -> None:
            if span.name == "parent":
                _spans(provider, 40)

    processor = OffThreadProcessor([_EndsSpans()], max_queue_size=64, batch_delay_millis=0)
    provider.add_span_processor(processor)
    with provider.get_tracer("test").start_as_current_span("parent"):
        pass
    assert processor.force_flush(10000)
    assert processor.force_flush(10000)  # the 40 the worker queued itself
    assert "backpressure.worker_turns" not in tallyspan.stats()
    provider.shutdown()


def test_behind_an_app_that_keeps_the_gil_busy_the_worker_is_handed_the_gil_and_never_falls_behind() -> None:
    """A worker whose batch delay is over waits for the GIL; behind this app thread, which lets go of it
    only for moments, CPython would let it starve until its backlog forced turns (512 spans). The app's
    next span hands the GIL over instead, so the backlog stays at a batch delay's worth of spans."""
    busy = _Busy()
    processor = OffThreadProcessor([busy])  # the default queue (turns from 512) and batch delay
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    backlog = 0
    for _ in range(3000):
        tracer.start_span("call").end()
        backlog = max(backlog, processor._queue.qsize())
        work_between_spans()
    stats = tallyspan.stats()
    # Left to fight for the GIL, the worker falls 511 behind here and takes 44 turns; handed it, at most
    # about 160 spans wait, even with another such test running beside it on this machine's two cores.
    assert backlog <= 8192 // 16 // 2
    assert processor.force_flush(30000)
    assert busy.ended == 3000
    assert "dropped.spans" not in stats
    provider.shutdown()


# --- batches down the chain -----------------------------------------------------------------------------


class _Link(WrappingProcessor):
    """A link that notes each span it processes in a log shared by the chain; ``exiting`` names the
    span whose processing calls ``sys.exit()`` (a bug of ours)."""

    def __init__(self, name: str, log: list[str], downstream: list[SpanProcessor], exiting: str = "") -> None:
        super().__init__(downstream)
        self.name, self.log, self.exiting = name, log, exiting

    def process(self, span: ReadableSpan, content: object) -> ReadableSpan:
        if span.name == self.exiting:
            raise SystemExit("a bug calls sys.exit()")
        self.log.append(f"{self.name} {span.name}")
        return span


class _Noting(SpanProcessor):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def on_end(self, span: ReadableSpan) -> None:
        self.log.append(f"end {span.name}")


def test_a_batch_goes_down_the_chain_a_link_at_a_time_each_in_span_order() -> None:
    """Each link takes the whole batch before the next sees it: its code and data stay in cache."""
    log: list[str] = []
    chain = _Link("checks", log, [_Link("ledger", log, [_Noting(log)])])
    processor = OffThreadProcessor([chain], batch_delay_millis=3_600_000)  # only the flush ends the batch
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 3)
    assert processor.force_flush(10_000)
    names = ("span-0", "span-1", "span-2")
    assert log == [
        *(f"checks {name}" for name in names),
        *(f"ledger {name}" for name in names),
        *(f"end {name}" for name in names),
    ]
    processor.shutdown()


def test_a_batch_is_at_most_forward_batch_spans() -> None:
    from tallyspan_processors._worker import FORWARD_BATCH_SPANS

    log: list[str] = []
    processor = OffThreadProcessor([_Link("checks", log, [_Noting(log)])], batch_delay_millis=3_600_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, FORWARD_BATCH_SPANS + 1)
    assert processor.force_flush(10_000)
    kinds = [entry.split()[0] for entry in log]
    # The first batch whole through both links, then the one span left.
    assert kinds == ["checks"] * FORWARD_BATCH_SPANS + ["end"] * FORWARD_BATCH_SPANS + ["checks", "end"]
    processor.shutdown()


def test_in_a_batch_a_base_exception_of_a_link_or_a_processor_costs_no_other_span() -> None:
    """``sys.exit()`` in a link's processing forwards that span as it came; in a user's processor below,
    it costs that processor that span: no other span, no other processor, and the worker goes on."""
    log: list[str] = []

    class _ExitingOnce(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            if span.name == "span-2":
                raise SystemExit("a user's processor calls sys.exit()")

    below = _Noting(log)
    chain = _Link("checks", log, [_ExitingOnce(), below], exiting="span-1")
    processor = OffThreadProcessor([chain], batch_delay_millis=3_600_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 4)
    assert processor.force_flush(10_000)
    assert log == [
        "checks span-0",
        "checks span-2",
        "checks span-3",
        *(f"end span-{index}" for index in range(4)),  # span-1 unprocessed, span-2 despite the exit
    ]
    assert losses() == {"errors.process._Link": 1, "errors.on_end": 1}
    _spans(provider, 1)
    assert processor.force_flush(10_000)
    assert log[-2:] == ["checks span-0", "end span-0"]  # the worker went on
    processor.shutdown()
