"""WrappingProcessor and enriched_copy: the extra data lands on a copy; a failure loses nothing."""

from __future__ import annotations

from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

import tallyspan
from tallyspan.plugin import Content
from tallyspan_processors import WrappingProcessor, enriched_copy


class _Stamp(WrappingProcessor):
    def process(self, span: ReadableSpan, content: Content | None) -> ReadableSpan:
        return enriched_copy(
            span,
            attributes={"added": "yes"},
            events=[Event("checked", {"n": 1})],
            status=Status(StatusCode.ERROR, "bad"),
        )


class _Broken(WrappingProcessor):
    def process(self, span: ReadableSpan, content: Content | None) -> ReadableSpan:
        raise KeyError("bug in our enrichment")


def _one_span(processor: WrappingProcessor) -> ReadableSpan:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("parent"),
        tracer.start_as_current_span("child", kind=SpanKind.CLIENT, attributes={"own": 1}) as child,
    ):
        child.add_event("own-event")
    provider.shutdown()
    spans = {span.name: span for span in _exporter_of(processor).get_finished_spans()}
    return spans["child"]


def _exporter_of(processor: WrappingProcessor) -> InMemorySpanExporter:
    (simple,) = processor.downstream
    assert isinstance(simple, SimpleSpanProcessor)
    exporter = simple.span_exporter
    assert isinstance(exporter, InMemorySpanExporter)
    return exporter


def test_enriched_copy_keeps_identity_and_adds_attributes_events_status() -> None:
    child = _one_span(_Stamp([SimpleSpanProcessor(InMemorySpanExporter())]))
    assert child.name == "child"
    assert child.kind is SpanKind.CLIENT
    assert child.parent is not None
    assert dict(child.attributes or {}) == {"own": 1, "added": "yes"}
    assert [event.name for event in child.events] == ["own-event", "checked"]
    assert child.status.status_code is StatusCode.ERROR
    assert child.status.description == "bad"
    assert child.end_time is not None
    assert child.start_time is not None
    assert child.end_time >= child.start_time


def test_a_failing_process_forwards_the_span_unchanged_and_counts_it() -> None:
    child = _one_span(_Broken([SimpleSpanProcessor(InMemorySpanExporter())]))
    assert dict(child.attributes or {}) == {"own": 1}
    assert tallyspan.stats()["errors.process._Broken"] == 2  # parent and child
