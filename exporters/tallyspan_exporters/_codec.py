"""Finished spans and log records as JSON, and back, so the spool can keep them on disk and a later
process can hand them to an OpenTelemetry exporter as if it had made them.

Everything the OTLP encoders read is kept: names, ids, flags, parent, kind, times, status, attributes,
events, links, the resource and the instrumentation scope (and for log records: timestamps, severity,
body, event name). Attribute values are what OpenTelemetry allows (str, bool, int, float and
homogeneous sequences of them); sequences come back as tuples. A log record's body may nest lists and
mappings. Bytes do not occur in what tallyspan spools and are written as text.

Usage::

    text = encode_span(span)
    span = decode_span(text)      # a ReadableSpan with the same identity
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

__all__ = ["decode_log_record", "decode_span", "encode_log_record", "encode_span"]

_FORMAT = 1
"""Bumped when the layout changes; a record of an unknown format is not decoded (and is counted)."""


def _plain(value: Any) -> Any:
    """An attribute or body value as JSON can hold it."""
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence):
        return [_plain(item) for item in value]
    return str(value)


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: _plain(value) for key, value in (attributes or {}).items()}


def _attribute_values(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Attributes read back: lists become tuples (OpenTelemetry attribute sequences are immutable)."""
    return {
        key: tuple(value) if isinstance(value, list) else value for key, value in (attributes or {}).items()
    }


def _context(context: SpanContext | None) -> list[Any] | None:
    if context is None:
        return None
    return [
        format(context.trace_id, "032x"),
        format(context.span_id, "016x"),
        int(context.trace_flags),
        context.is_remote,
        list(context.trace_state.items()),
    ]


def _span_context(raw: Sequence[Any] | None) -> SpanContext | None:
    if raw is None:
        return None
    trace_id, span_id, flags, is_remote, state = raw
    return SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=bool(is_remote),
        trace_flags=TraceFlags(flags),
        trace_state=TraceState([(str(key), str(value)) for key, value in state]),
    )


def _resource(resource: Resource | None) -> list[Any]:
    if resource is None:
        return [{}, ""]
    return [_attributes(resource.attributes), resource.schema_url]


def _scope(scope: InstrumentationScope | None) -> list[Any] | None:
    if scope is None:
        return None
    return [scope.name, scope.version, scope.schema_url, _attributes(scope.attributes)]


def _instrumentation_scope(raw: Sequence[Any] | None) -> InstrumentationScope | None:
    if raw is None:
        return None
    name, version, schema_url, attributes = raw
    return InstrumentationScope(name, version, schema_url, _attribute_values(attributes) or None)


def encode_span(span: ReadableSpan) -> str:
    """``span`` as compact JSON."""
    return json.dumps(
        {
            "v": _FORMAT,
            "name": span.name,
            "context": _context(span.context),
            "parent": _context(span.parent),
            "kind": span.kind.value,
            "start": span.start_time,
            "end": span.end_time,
            "status": [span.status.status_code.value, span.status.description],
            "attributes": _attributes(span.attributes),
            "events": [[e.name, e.timestamp, _attributes(e.attributes)] for e in span.events],
            "links": [[_context(link.context), _attributes(link.attributes)] for link in span.links],
            "resource": _resource(span.resource),
            "scope": _scope(span.instrumentation_scope),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def decode_span(text: str | bytes) -> ReadableSpan:
    """The span :func:`encode_span` wrote.

    Raises:
        ValueError: not a span of a format this version reads.
    """
    raw = json.loads(text)
    if not isinstance(raw, dict) or raw.get("v") != _FORMAT:
        raise ValueError("not a spooled span of a known format")
    code, description = raw["status"]
    return ReadableSpan(
        name=raw["name"],
        context=_span_context(raw["context"]),
        parent=_span_context(raw["parent"]),
        resource=Resource(_attribute_values(raw["resource"][0]), raw["resource"][1] or None),
        attributes=_attribute_values(raw["attributes"]),
        events=[
            Event(name, _attribute_values(attributes), timestamp)
            for name, timestamp, attributes in raw["events"]
        ],
        links=[
            Link(link_context, _attribute_values(attributes))
            for context, attributes in raw["links"]
            if (link_context := _span_context(context)) is not None
        ],
        kind=SpanKind(raw["kind"]),
        status=Status(StatusCode(code), description),
        start_time=raw["start"],
        end_time=raw["end"],
        instrumentation_scope=_instrumentation_scope(raw["scope"]),
    )


def encode_log_record(record: ReadableLogRecord) -> str:
    """``record`` (as an OpenTelemetry log exporter receives it) as compact JSON."""
    log = record.log_record
    return json.dumps(
        {
            "v": _FORMAT,
            "time": log.timestamp,
            "observed": log.observed_timestamp,
            "trace_id": format(log.trace_id or 0, "032x"),
            "span_id": format(log.span_id or 0, "016x"),
            "flags": int(log.trace_flags or 0),
            "severity": [
                log.severity_number.value if log.severity_number is not None else None,
                log.severity_text,
            ],
            "event_name": log.event_name,
            "body": _plain(log.body),
            "attributes": _attributes(log.attributes),
            "resource": _resource(record.resource),
            "scope": _scope(record.instrumentation_scope),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def decode_log_record(text: str | bytes) -> ReadableLogRecord:
    """The log record :func:`encode_log_record` wrote.

    Raises:
        ValueError: not a log record of a format this version reads.
    """
    raw = json.loads(text)
    if not isinstance(raw, dict) or raw.get("v") != _FORMAT:
        raise ValueError("not a spooled log record of a known format")
    trace_id, span_id = int(raw["trace_id"], 16), int(raw["span_id"], 16)
    context = Context()
    if trace_id and span_id:
        span_context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(raw["flags"]))
        context = set_span_in_context(NonRecordingSpan(span_context), context)
    severity, severity_text = raw["severity"]
    log = LogRecord(
        timestamp=raw["time"],
        observed_timestamp=raw["observed"],
        context=context,
        severity_text=severity_text,
        severity_number=None if severity is None else SeverityNumber(severity),
        body=raw["body"],
        attributes=_attribute_values(raw["attributes"]),
        event_name=raw["event_name"],
    )
    return ReadableLogRecord(
        log_record=log,
        resource=Resource(_attribute_values(raw["resource"][0]), raw["resource"][1] or None),
        instrumentation_scope=_instrumentation_scope(raw["scope"]),
    )
