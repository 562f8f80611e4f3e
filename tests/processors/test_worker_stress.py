"""The worker under a long-lived production process's stress: bursts that overflow its queue, shutdown
with spans in flight, a stuck or dying downstream, and a user's span processor that raises or is slow.

Every test drives the real chain (``tallyspan.instrument()`` or ``OffThreadProcessor``) with real SDK
spans; a "stuck" downstream is a real SpanProcessor that waits on an event the test sets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan._content import DEFAULT_MAX_ENTRIES, ModelContent, content_buffer
from tallyspan_processors import OffThreadProcessor
from tallyspan_processors._worker import DEFAULT_MAX_QUEUE_SIZE

BURST = 100_000


class _Gate(SpanProcessor):
    """Holds the worker in ``on_end`` until ``release`` is set; records what it was given, in order."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.ended: list[str] = []
        self.shut_down = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.entered.set()
        self.release.wait(60)
        self.ended.append(span.name)

    def shutdown(self) -> None:
        self.shut_down += 1


class _GateSink:
    """A ledger sink that holds the chain's own worker (it writes on it) until ``release`` is set.

    The app's processors run on a worker of their own, so a stuck one of theirs no longer stops the
    chain; a stuck sink of ours still does, which is what these tests need.
    """

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def export_entries(self, entries: object) -> bool:
        return True

    def export_reconciliation(self, record: object) -> bool:
        self.entered.set()
        self.release.wait(60)
        return True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        self.release.set()


@pytest.fixture
def gate_sink() -> Iterator[_GateSink]:
    sink = _GateSink()
    yield sink
    sink.release.set()


def _hold_the_worker(sink: _GateSink) -> None:
    with tallyspan.run("first"):
        pass  # its end reconciles the run: the worker enters the sink and stays there
    assert sink.entered.wait(10)


class _Recorder(SpanProcessor):
    def __init__(self) -> None:
        self.ended: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span.name)


class _Raising(SpanProcessor):
    def __init__(self) -> None:
        self.calls = 0

    def on_start(self, span: object, parent_context: object = None) -> None:
        raise RuntimeError("a user's processor broken in on_start")

    def on_end(self, span: ReadableSpan) -> None:
        self.calls += 1
        raise RuntimeError("a user's processor broken in on_end")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        raise RuntimeError("a user's processor broken in force_flush")

    def shutdown(self) -> None:
        raise RuntimeError("a user's processor broken in shutdown")


class _Exiting(SpanProcessor):
    """A processor that raises a BaseException (sys.exit, gevent's Timeout) on the worker, once."""

    def __init__(self) -> None:
        self.raised = False

    def on_end(self, span: ReadableSpan) -> None:
        if not self.raised:
            self.raised = True
            raise SystemExit("a downstream processor called sys.exit()")


@pytest.fixture
def gate() -> Iterator[_Gate]:
    gate = _Gate()
    yield gate
    gate.release.set()  # never leave a worker stuck behind a failed test


@pytest.fixture
def gated(
    make_instrumented: MakeInstrumented, span_exporter: InMemorySpanExporter, gate: _Gate
) -> tallyspan.Instrumentation:
    """``instrument()`` with no store nor library, ``span_exporter`` then ``gate`` at the end of the chain."""
    processors = [SimpleSpanProcessor(span_exporter), gate]
    return make_instrumented(store=None, instrumentors=[], span_processors=processors).instrumentation


def _spans(provider: TracerProvider, count: int, prefix: str = "span") -> None:
    tracer = provider.get_tracer("test")
    for index in range(count):
        tracer.start_span(f"{prefix}-{index}").end()


# --- 1. overflow, flush and shutdown ----------------------------------------------------------------


@pytest.mark.slow  # a run at scale (tens of thousands of spans): CI runs it (-m slow)
def test_a_burst_of_100k_spans_never_blocks_the_app_and_every_drop_is_counted(
    tracer_provider: TracerProvider, gate_sink: _GateSink
) -> None:
    recorder = _Recorder()
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider,
        store=None,
        instrumentors=[],
        span_processors=[recorder],
        ledger_sinks=[gate_sink],
    )
    _hold_the_worker(gate_sink)
    # The worker cannot take a single span during the burst: had on_end blocked, this would never return.
    _spans(tracer_provider, BURST)
    stats = tallyspan.stats()
    assert stats["dropped.spans"] == BURST - DEFAULT_MAX_QUEUE_SIZE
    gate_sink.release.set()
    assert instrumentation.force_flush()
    assert recorder.ended == [
        "invoke_agent first",
        *(f"span-{index}" for index in range(DEFAULT_MAX_QUEUE_SIZE)),
    ]
    assert tallyspan.stats()["dropped.spans"] == BURST - DEFAULT_MAX_QUEUE_SIZE  # nothing lost after
    # Spans the worker dropped never reach the ledger processor's on_end: it must not keep tracking them.
    assert "dropped.ledger_tracked_spans" not in tallyspan.stats()
    tallyspan.uninstrument()


@pytest.mark.slow  # a run at scale (tens of thousands of spans): CI runs it (-m slow)
def test_a_stuck_app_processor_drops_only_its_own_spans(tracer_provider: TracerProvider, gate: _Gate) -> None:
    """The app's processor has its own worker: stuck, it loses (and counts) its spans, nobody else's."""
    recorder = _Recorder()
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider, store=None, instrumentors=[], span_processors=[gate]
    )
    tracer_provider.add_span_processor(recorder)  # added after instrument(): fed by the provider directly
    _spans(tracer_provider, 1, "first")
    assert gate.entered.wait(10)
    _spans(tracer_provider, BURST)
    gate.release.set()
    assert instrumentation.force_flush()
    assert len(recorder.ended) == BURST + 1
    assert len(gate.ended) + tallyspan.stats()["dropped.spans"] == BURST + 1
    assert gate.ended[0] == "first-0"
    tallyspan.uninstrument()
    assert gate.shut_down == 1


@pytest.mark.slow  # a run at scale (tens of thousands of spans): CI runs it (-m slow)
def test_dropped_run_spans_do_not_push_a_live_run_out_of_the_ledger(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    gate: _Gate,
    gated: tallyspan.Instrumentation,
) -> None:
    """A run that started before an overflow still gets its own tool calls once the burst is over."""
    tracer = tracer_provider.get_tracer("test")
    with tallyspan.run("long-agent"):
        tracer.start_span("stuck").end()
        assert gate.entered.wait(10)  # the worker is stuck; the burst below is dropped
        for index in range(70_000):  # more than the ledger can track at once
            tracer.start_span(f"other-{index}", context=Context()).end()
        gate.release.set()
        assert gated.force_flush()  # the queue has room again for the run's own spans
        with tracer.start_as_current_span(
            "execute_tool search",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL,
                semconv.GEN_AI_TOOL_NAME: "search",
                semconv.GEN_AI_TOOL_CALL_ID: "call-1",
            },
        ):
            pass
    assert gated.force_flush()
    (run_span,) = [
        span for span in span_exporter.get_finished_spans() if span.name == "invoke_agent long-agent"
    ]
    attributes = run_span.attributes or {}
    assert attributes[semconv.LEDGER_OBSERVED_COUNT] == 1
    tool_spans = [span for span in span_exporter.get_finished_spans() if span.name == "execute_tool search"]
    assert len(tool_spans) == 1
    assert semconv.LEDGER_BALANCED not in (tool_spans[0].attributes or {})  # not reconciled as its own run


def test_force_flush_with_a_short_timeout_returns_false_while_the_worker_is_stuck(gate: _Gate) -> None:
    processor = OffThreadProcessor([gate], max_queue_size=4)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    assert gate.entered.wait(10)
    _spans(provider, 10)  # the queue is full: the flush marker itself does not fit
    assert processor.force_flush(10) is False
    gate.release.set()
    assert processor.force_flush() is True
    processor.shutdown()


def test_shutdown_with_a_full_queue_and_a_stuck_worker_returns_and_counts_what_it_gave_up(
    gate: _Gate,
) -> None:
    processor = OffThreadProcessor([gate], max_queue_size=4, shutdown_timeout_millis=50)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1)
    assert gate.entered.wait(10)
    _spans(provider, 10)
    assert tallyspan.stats()["dropped.spans"] == 6
    done = threading.Event()

    def shut_down() -> None:
        processor.shutdown()
        done.set()

    closer = threading.Thread(target=shut_down, daemon=True)
    closer.start()
    # Generous: shutdown's own limit is 50 ms; before the fix it blocked forever on the stop marker.
    assert done.wait(30), "shutdown hung on a full queue behind a stuck worker"
    assert gate.shut_down == 1
    gate.release.set()
    processor._worker.join(10)  # type: ignore[union-attr]
    assert not processor._worker.is_alive()  # type: ignore[union-attr]
    # The span the worker held is forwarded; the 4 queued ones were given up at shutdown and counted.
    assert gate.ended == ["span-0"]
    assert tallyspan.stats()["dropped.spans_at_shutdown"] == 4
    assert processor.force_flush(10) is False  # it could not deliver everything, and says so at once


def test_shutdown_drains_spans_in_flight_and_a_second_shutdown_and_later_spans_are_harmless() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 500)
    processor.shutdown()
    assert recorder.ended == [f"span-{index}" for index in range(500)]
    processor.shutdown()
    _spans(provider, 3)
    assert tallyspan.stats()["dropped.spans_after_shutdown"] == 3
    # Nothing is left to flush and no worker to wait for: force_flush answers at once.
    assert processor.force_flush(30_000) is True


def test_on_end_racing_shutdown_from_many_threads_loses_no_span_uncounted() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    start = threading.Barrier(5)

    def produce(name: str) -> None:
        start.wait()
        _spans(provider, 2000, name)

    producers = [threading.Thread(target=produce, args=(f"t{number}",)) for number in range(4)]
    for thread in producers:
        thread.start()
    start.wait()
    processor.shutdown()
    for thread in producers:
        thread.join()
    stats = tallyspan.stats()
    accounted = (
        len(recorder.ended)
        + stats.get("dropped.spans", 0)
        + stats.get("dropped.spans_after_shutdown", 0)
        + stats.get("dropped.spans_at_shutdown", 0)
    )
    assert accounted == 8000


def test_a_base_exception_in_a_downstream_does_not_kill_the_worker_or_hang_flush() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([_Exiting(), recorder])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    _spans(provider, 1, "fatal")
    _spans(provider, 3)
    assert processor.force_flush(30_000) is True
    assert recorder.ended[-3:] == ["span-0", "span-1", "span-2"]
    assert tallyspan.stats()["errors.worker.on_end"] == 1
    processor.shutdown()


def test_a_non_span_handed_to_on_end_does_not_kill_the_worker() -> None:
    recorder = _Recorder()
    processor = OffThreadProcessor([recorder])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    processor.on_end("not a span")  # type: ignore[arg-type]
    _spans(provider, 2)
    assert processor.force_flush(30_000) is True
    assert recorder.ended == ["span-0", "span-1"]
    assert tallyspan.stats()["dropped.spans_not_readable"] == 1
    processor.shutdown()


# --- 4. a user's processor that raises or is slow -----------------------------------------------------


def test_a_users_raising_processor_is_logged_once_counted_and_the_others_get_every_span(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
    make_instrumented: MakeInstrumented,
) -> None:
    raising = _Raising()
    processors = [raising, SimpleSpanProcessor(span_exporter)]
    instrumentation = make_instrumented(
        store=None, instrumentors=[], span_processors=processors
    ).instrumentation
    with caplog.at_level(logging.WARNING):
        _spans(tracer_provider, 200)
        instrumentation.force_flush()
    assert len(span_exporter.get_finished_spans()) == 200
    assert raising.calls == 200
    stats = tallyspan.stats()
    assert stats["errors.worker.on_end"] == 200  # the app's processors run on a worker of their own
    assert stats["errors.on_start"] == 200
    warnings = [record for record in caplog.records if "failed on the worker" in record.getMessage()]
    assert len(warnings) == 1
    tallyspan.uninstrument()
    assert tallyspan.stats()["errors.shutdown"] == 1


def test_a_slow_users_processor_delays_but_does_not_starve_the_other_sinks(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    gate: _Gate,
    gated: tallyspan.Instrumentation,
) -> None:
    """A user's processor stuck on the worker: every other sink still gets each span the queue held."""
    _spans(tracer_provider, 1, "first")
    assert gate.entered.wait(10)
    _spans(tracer_provider, 100)
    gate.release.set()
    assert gated.force_flush()
    assert len(span_exporter.get_finished_spans()) == 101
    assert len(gate.ended) == 101


# --- 5. the ContentBuffer when the worker drops model spans ------------------------------------------


@pytest.mark.slow  # a run at scale (tens of thousands of spans): CI runs it (-m slow)
def test_content_of_50k_dropped_model_spans_stays_bounded_and_is_freed(
    tracer_provider: TracerProvider, gate_sink: _GateSink
) -> None:
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider, store=None, instrumentors=[], ledger_sinks=[gate_sink]
    )
    buffer = content_buffer()
    tracer = tracer_provider.get_tracer("test")
    _hold_the_worker(gate_sink)
    total = 50_000
    for index in range(total):
        # What an instrumentor does: hand the output to the buffer, then end the model span.
        span = tracer.start_span("chat m", attributes={semconv.GEN_AI_OPERATION_NAME: "chat"})
        buffer.put(span.get_span_context().span_id, ModelContent(f"answer {index}", prompt="q"))
        span.end()
        assert len(buffer) <= DEFAULT_MAX_ENTRIES
    stats = tallyspan.stats()
    assert stats["dropped.spans"] == total - DEFAULT_MAX_QUEUE_SIZE
    # The queued spans keep their content for the checks; the dropped ones do not hold a slot.
    assert len(buffer) == DEFAULT_MAX_QUEUE_SIZE
    assert "dropped.content" not in stats
    gate_sink.release.set()
    assert instrumentation.force_flush()
    assert len(buffer) == 0


def test_the_content_buffer_holds_the_content_of_every_span_the_worker_can_queue() -> None:
    assert DEFAULT_MAX_ENTRIES > DEFAULT_MAX_QUEUE_SIZE


def test_the_content_buffer_evicts_and_counts_when_nobody_pops(tracer_provider: TracerProvider) -> None:
    """Content of spans that never end (an abandoned stream): the oldest are evicted and counted."""
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=[])
    buffer = content_buffer()
    for span_id in range(1, 50_001):
        buffer.put(span_id, ModelContent("never popped"))
    assert len(buffer) == DEFAULT_MAX_ENTRIES
    assert tallyspan.stats()["dropped.content"] == 50_000 - DEFAULT_MAX_ENTRIES
    instrumentation.shutdown()
