"""Enriched copies of ended spans: an ended span is immutable, so we forward a copy with more on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Status
from opentelemetry.util.types import AttributeValue

__all__ = ["enriched_copy"]


def enriched_copy(
    span: ReadableSpan,
    *,
    attributes: Mapping[str, AttributeValue] | None = None,
    events: Sequence[Event] = (),
    status: Status | None = None,
    own_events: Sequence[Event] | None = None,
    own_attributes: dict[str, AttributeValue] | None = None,
) -> ReadableSpan:
    """Return a copy of ``span`` with ``attributes`` merged over its own, ``events`` appended and ``status`` set.

    Identity (context, parent, times, resource, scope) is kept, so backends see the same span.
    ``own_events``, when given, stands for the span's own events (rewritten ones, e.g. redacted).
    ``own_attributes``, when given, is a plain copy of the span's attributes the caller already made (and
    hands over: it becomes the copy's): copying the SDK's bounded mapping again costs microseconds.
    """
    merged = dict(span.attributes or {}) if own_attributes is None else own_attributes
    if attributes:
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
