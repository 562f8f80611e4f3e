"""enriched_copy against the plain copy through the span's properties, on many generated spans."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from tallyspan_processors._enrich import enriched_copy, plain_attributes


def _plain_copy(
    span: ReadableSpan,
    attributes: dict[str, AttributeValue],
    events: Sequence[Event],
    status: Status | None,
    own_events: Sequence[Event] | None,
) -> ReadableSpan:
    merged = dict(span.attributes or {})
    merged.update(attributes)
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=merged,
        events=(*(span.events if own_events is None else own_events), *events),
        links=span.links,
        kind=span.kind,
        status=status if status is not None else span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class _Renamed(ReadableSpan):
    """A span class of someone else's, whose properties are not its fields."""

    @property
    def events(self) -> Sequence[Event]:
        return (Event("from the property", timestamp=1),)


def _fields(span: ReadableSpan) -> tuple[object, ...]:
    return (
        type(span), span.name, span.context, span.parent, span.resource, dict(span.attributes or {}),
        [(event.name, dict(event.attributes or {}), event.timestamp) for event in span.events], span.links,
        span.kind, span.status.status_code, span.status.description,
        span.start_time, span.end_time, span.instrumentation_scope, vars(span)["_instrumentation_info"],
        span.dropped_attributes, span.dropped_events, span.dropped_links, span.to_json(),
    )  # fmt: skip


def test_enriched_copy_is_the_plain_copy_of_generated_spans() -> None:
    rng = random.Random(11)
    provider = TracerProvider(span_limits=SpanLimits(max_events=3, max_links=2))
    tracer = provider.get_tracer("test", "1.0")
    context = SpanContext(7, 9, is_remote=False, trace_flags=TraceFlags(1))
    kinds = ["sdk", "readable", "other"]
    for number in range(300):
        kind = rng.choice(kinds)
        events = [Event(f"e{i}", {"i": i}, timestamp=i + 1) for i in range(rng.randrange(5))]
        links = [Link(context, {"l": i}) for i in range(rng.randrange(4))]
        attributes: dict[str, AttributeValue] = {f"k{i}": i for i in range(rng.randrange(4))}
        if kind == "sdk":
            span = tracer.start_span(f"s{number}", attributes=attributes, links=links)
            for event in events:
                span.add_event(event.name, event.attributes, event.timestamp)
            if rng.random() < 0.3:
                span.set_status(Status(StatusCode.ERROR, "broke"))
            span.end()
            assert isinstance(span, ReadableSpan)
            source: ReadableSpan = span
        else:
            cls = ReadableSpan if kind == "readable" else _Renamed
            source = cls(
                f"s{number}", context=context, attributes=attributes, events=tuple(events), links=tuple(links)
            )
        added: dict[str, AttributeValue] = {"k0": "over", "new": True} if rng.random() < 0.5 else {}
        appended = [Event("added", timestamp=5)] * rng.randrange(3)
        status = rng.choice([None, Status(StatusCode.ERROR, "violations")])
        own_events = rng.choice([None, (Event("redacted"),)])
        expected = _plain_copy(source, added, appended, status, own_events)
        got = enriched_copy(
            source,
            attributes=added,
            events=appended,
            status=status,
            own_events=own_events,
            own_attributes=dict(source.attributes or {}) if rng.random() < 0.5 else None,
        )
        assert _fields(got) == _fields(expected)
        assert list(plain_attributes(source).items()) == list(dict(source.attributes or {}).items())
        assert plain_attributes(source) is not plain_attributes(source)  # a copy the caller may keep
        assert type(got.events) is tuple
        assert type(got.links) is tuple


def test_plain_attributes_of_spans_without_attributes_and_of_copies() -> None:
    cases: tuple[dict[str, AttributeValue] | None, ...] = (None, {}, {"a": 1, "b": (1, 2)})
    for attributes in cases:
        span = ReadableSpan("s", attributes=attributes)
        assert plain_attributes(span) == dict(attributes or {})
        copy = enriched_copy(span, attributes={"c": "x"})
        assert plain_attributes(copy) == {**(attributes or {}), "c": "x"}


class _FieldsMoved(ReadableSpan):
    """An SDK span class whose private fields moved (a future SDK): its properties read the new ones."""

    def __init__(self, span: ReadableSpan) -> None:
        super().__init__(
            name=span.name,
            context=span.context,
            attributes=span.attributes,
            events=span.events,
            links=span.links,
        )
        fields = vars(self)
        self.moved = {name: fields.pop(name) for name in ("_attributes", "_events", "_links")}

    @property
    def attributes(self) -> Any:
        return self.moved["_attributes"]

    @property
    def events(self) -> Sequence[Event]:
        return tuple(self.moved["_events"])

    @property
    def links(self) -> Sequence[Link]:
        return tuple(self.moved["_links"])


def test_an_sdk_whose_private_fields_moved_is_read_through_its_properties(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tallyspan import _span_reading
    from tallyspan_processors import _enrich

    provider = TracerProvider()
    span = provider.get_tracer("test").start_span("chat m", attributes={"gen_ai.request.model": "m"})
    span.add_event("first", {"n": 1})
    span.end()
    moved = _FieldsMoved(span)  # type: ignore[arg-type]
    # Taken for one of the SDK's own classes, by the attribute reader (core) and the enriched copy.
    monkeypatch.setattr(_span_reading, "SDK_SPAN_TYPES", frozenset({_FieldsMoved}))
    monkeypatch.setattr(_enrich, "SDK_SPAN_TYPES", frozenset({_FieldsMoved}))
    assert plain_attributes(moved) == {"gen_ai.request.model": "m"}
    copy = enriched_copy(moved, attributes={"tallyspan.violation_count": 1})
    assert dict(copy.attributes or {}) == {"gen_ai.request.model": "m", "tallyspan.violation_count": 1}
    assert [event.name for event in copy.events] == ["first"]
