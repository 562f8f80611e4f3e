"""OffThreadProcessor: the app's thread only enqueues; one worker forwards in order, drains on flush."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, get_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan
from tallyspan_processors import OffThreadProcessor


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


def _spans(provider: TracerProvider, count: int) -> None:
    tracer = provider.get_tracer("test")
    for index in range(count):
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
    assert processor.force_flush(50) is False
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
    with pytest.raises(ValueError, match="max_queue_size"):
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
    import queue

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

    class _RacingQueue(queue.Queue[object]):
        def put_nowait(self, item: object) -> None:
            super().put_nowait(item)
            if item is _STOP:
                super().put_nowait(racer)  # the racing thread enqueues right behind the stop marker

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


def test_spans_gather_for_the_batch_delay_and_a_flush_or_shutdown_cuts_it_short() -> None:
    recorder = _Recorder()
    # An hour: nothing but a flush or shutdown can end the wait within the test.
    processor = OffThreadProcessor([recorder], batch_delay_millis=3_600_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 3)
    assert recorder.ended == []  # still gathering
    assert processor.force_flush(timeout_millis=10_000)
    assert recorder.ended == ["span-0", "span-1", "span-2"]
    _spans(provider, 2)
    processor.shutdown()
    assert recorder.ended == ["span-0", "span-1", "span-2", "span-0", "span-1"]
    assert "dropped.spans_at_shutdown" not in tallyspan.stats()


def test_without_a_batch_delay_spans_are_forwarded_as_they_come() -> None:
    forwarded = threading.Event()

    class _Signalling(_Recorder):
        def on_end(self, span: ReadableSpan) -> None:
            super().on_end(span)
            forwarded.set()

    recorder = _Signalling()
    provider = TracerProvider()
    provider.add_span_processor(OffThreadProcessor([recorder], batch_delay_millis=0))
    _spans(provider, 1)
    assert forwarded.wait(10)  # no flush asked for it
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
