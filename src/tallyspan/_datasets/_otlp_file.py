"""Read an OTLP JSON file, the OpenTelemetry Collector file exporter's format, trace by trace.

Usage::

    reader = OTLPFileReader(Path("traces.jsonl"))
    for trace in reader:                     # TraceData, one trace at a time
        ...
    reader.stats.evicted_traces              # traces emitted before they were complete (memory bound)

The file holds one ``ExportTraceServiceRequest`` as JSON per line (OTLP/JSON: ids in hex, 64-bit
integers as strings, enums as numbers or names); ``.gz`` files are read through gzip. The verdicts ride
on the spans: ``tallyspan.violation`` events, and on run spans the ledger balance, one
``tallyspan.ledger.discrepancy`` event per discrepancy and one ``tallyspan.ledger.entry`` event per entry.

Spans of one trace may be spread over many lines. A trace is complete when its local root arrives (the
SDK exports a span when it ends, and a root ends last), so spans wait in a buffer until then; the buffer
is bounded (``max_buffered_spans``): past it the oldest trace is emitted as it is and counted, so memory
stays bounded whatever the size of the file. Traces whose root never came are emitted at the end.

A line is read within bounds: at most ``MAX_LINE_CHARS`` characters (read no further), nested at most
``MAX_DEPTH`` levels (a linear scan before the parser), and its spans of the types OTLP/JSON gives; a
line beyond a bound or with values of the wrong type stops the read with a ``ConfigError`` naming the
file, the line and the reason (``tallyspan export`` exits 2). A line that is not JSON at all is
skipped and counted, as before.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from tallyspan import semconv
from tallyspan._books._ledger import Discrepancy
from tallyspan._books._runs import declares_run
from tallyspan._engine._jsonschema import too_deep
from tallyspan._engine._taxonomy import FAILURE_CLASS_OF, ViolationType
from tallyspan._errors import ConfigError
from tallyspan._store._store_traces import (
    EntryData,
    LedgerData,
    SpanData,
    TraceData,
    ViolationData,
    span_data,
)

__all__ = [
    "DEFAULT_MAX_BUFFERED_SPANS",
    "MAX_DEPTH",
    "MAX_LINE_CHARS",
    "OTLPFileReader",
    "ReadStats",
    "attributes_of",
    "read_span",
]

_logger = logging.getLogger(__name__)

DEFAULT_MAX_BUFFERED_SPANS: Final = 200_000
"""Spans held while their traces are incomplete; past this the oldest trace is emitted early."""
MAX_LINE_CHARS: Final = 16 << 20
"""The longest line read (one export request): a longer one is refused unread past this."""
MAX_DEPTH: Final = 64
"""The deepest nesting of a line's arrays and objects (OTLP/JSON needs about 12, more for nested
``kvlistValue``s); deeper is refused before ``json.loads``, whose recursion it would exhaust."""
_REASON_CHARS: Final = 200

# OTLP span flags: bit 8 says whether the parent's remoteness is known, bit 9 that it is remote.
_FLAG_HAS_IS_REMOTE: Final = 0x100
_FLAG_IS_REMOTE: Final = 0x200
_STATUS_NAMES: Final = {0: "UNSET", 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK"}
_STATUS_NAMES_ERROR: Final = "STATUS_CODE_ERROR"


@dataclass
class ReadStats:
    """What the reader met: lines, spans, and what it could not use."""

    lines: int = 0
    spans: int = 0
    bad_lines: int = 0
    evicted_traces: int = 0


def _get(message: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A field of an OTLP/JSON message: lowerCamelCase as the collector writes it, or the proto name."""
    value = message.get(camel)
    return message.get(snake) if value is None else value


def _any_value(value: Mapping[str, Any]) -> Any:
    for key, convert in _SCALARS:
        if key in value:
            return convert(value[key])
    array = _get(value, "arrayValue", "array_value")
    if array is not None:
        return tuple(_any_value(item) for item in array.get("values", ()) if isinstance(item, Mapping))
    kvlist = _get(value, "kvlistValue", "kvlist_value")
    if kvlist is not None:
        return json.dumps(attributes_of(kvlist.get("values", ())), ensure_ascii=False, default=str)
    return None


def _int(value: Any) -> int:
    return int(value)


_SCALARS: Final[tuple[tuple[str, Callable[[Any], Any]], ...]] = (
    ("stringValue", str),
    ("string_value", str),
    ("boolValue", bool),
    ("bool_value", bool),
    ("intValue", _int),
    ("int_value", _int),
    ("doubleValue", float),
    ("double_value", float),
    ("bytesValue", str),
    ("bytes_value", str),
)


def attributes_of(items: Any) -> dict[str, Any]:
    """An OTLP/JSON ``attributes`` list (``[{key, value: {stringValue: ...}}]``) as a plain dict."""
    found: dict[str, Any] = {}
    for item in items or ():
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            value = item.get("value")
            found[item["key"]] = _any_value(value) if isinstance(value, Mapping) else None
    return found


def _nanos(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number or None


def _status(span: Mapping[str, Any]) -> str:
    code = (span.get("status") or {}).get("code", 0)
    if code in (2, _STATUS_NAMES_ERROR):
        return "ERROR"
    return _STATUS_NAMES.get(code, "UNSET")


def _hex(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) and value and set(value) != {"0"} else None


def _failure_class(kind: str) -> str | None:
    try:
        return FAILURE_CLASS_OF[ViolationType(kind)].value
    except ValueError:  # a type from a newer tallyspan or another producer: class unknown
        return None


def _violations(
    attributes: Mapping[str, Any], events: list[tuple[str, int | None, dict[str, Any]]]
) -> tuple[ViolationData, ...]:
    found = tuple(
        ViolationData(
            str(event.get(semconv.VIOLATION_TYPE, "")),
            event.get(semconv.VIOLATION_FAILURE_CLASS),
            event.get(semconv.VIOLATION_DETAIL),
        )
        for name, _, event in events
        if name == semconv.EVENT_VIOLATION
    )
    if found:
        return found
    listed = attributes.get(semconv.VIOLATION_TYPES)  # no events (dropped by limits): the types alone
    kinds = (listed,) if isinstance(listed, str) else tuple(listed or ())
    return tuple(ViolationData(str(kind), _failure_class(str(kind)), None) for kind in kinds)


def _ledger(
    span_id: str,
    attributes: Mapping[str, Any],
    events: list[tuple[str, int | None, dict[str, Any]]],
    end: int | None,
) -> LedgerData | None:
    if semconv.LEDGER_BALANCED not in attributes and semconv.LEDGER_PROTOCOL_OK not in attributes:
        return None
    discrepancies = tuple(
        Discrepancy(
            str(event.get(semconv.LEDGER_DISCREPANCY_TYPE, "")),
            event.get(semconv.LEDGER_CALL_ID),
            str(event.get(semconv.LEDGER_DETAIL, "")),
        )
        for name, _, event in events
        if name == semconv.EVENT_LEDGER_DISCREPANCY
    )
    entries = tuple(
        EntryData(
            str(event.get(semconv.LEDGER_SIDE, "")),
            int(event.get(semconv.LEDGER_SEQ, 0) or 0),
            event.get(semconv.LEDGER_CALL_ID),
            event.get(semconv.LEDGER_TOOL_NAME),
            event.get(semconv.LEDGER_OUTCOME),
            None,
            time,
        )
        for name, time, event in events
        if name == semconv.EVENT_LEDGER_ENTRY
    )
    balanced = attributes.get(semconv.LEDGER_BALANCED)
    protocol_ok = attributes.get(semconv.LEDGER_PROTOCOL_OK)
    return LedgerData(
        run_span_id=span_id,
        run_name=attributes.get(semconv.RUN_NAME) or attributes.get(semconv.GEN_AI_AGENT_NAME),
        balanced=balanced if isinstance(balanced, bool) else None,
        protocol_ok=protocol_ok if isinstance(protocol_ok, bool) else None,
        discrepancies=discrepancies,
        entries=entries,
        time_unix_nano=end,
    )


def read_span(span: Mapping[str, Any]) -> tuple[SpanData, LedgerData | None] | None:
    """One OTLP/JSON span as :class:`SpanData` and its books if it is a reconciled run; None when it
    has no usable ids."""
    trace_id, span_id = _hex(_get(span, "traceId", "trace_id")), _hex(_get(span, "spanId", "span_id"))
    if trace_id is None or span_id is None:
        return None
    attributes = attributes_of(span.get("attributes"))
    events = [
        (
            str(event.get("name", "")),
            _nanos(_get(event, "timeUnixNano", "time_unix_nano")),
            attributes_of(event.get("attributes")),
        )
        for event in span.get("events") or ()
        if isinstance(event, Mapping)
    ]
    parent = _hex(_get(span, "parentSpanId", "parent_span_id"))
    flags = int(span.get("flags") or 0)
    remote_parent = bool(flags & _FLAG_HAS_IS_REMOTE and flags & _FLAG_IS_REMOTE)
    end = _nanos(_get(span, "endTimeUnixNano", "end_time_unix_nano"))
    data = span_data(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=str(span.get("name", "")),
        start_unix_nano=_nanos(_get(span, "startTimeUnixNano", "start_time_unix_nano")),
        end_unix_nano=end,
        status_code=_status(span),
        attributes=attributes,
        is_run=declares_run(attributes) or parent is None or remote_parent,
        violations=_violations(attributes, events),
        claim_times=tuple(time for name, time, _ in events if name == semconv.EVENT_LEDGER_CLAIM and time),
    )
    return data, _ledger(span_id, attributes, events, end)


def _refused(path: Path, line: int, reason: str) -> ConfigError:
    reason = reason if len(reason) <= _REASON_CHARS else reason[:_REASON_CHARS] + "..."
    return ConfigError(f"{path}, line {line}: {reason}".replace("\n", " ").replace("\r", " "))


def _requests(
    path: Path,
    lines: IO[str],
    stats: ReadStats,
    on_line: Callable[[int], object] | None,
    max_line_chars: int,
) -> Iterator[tuple[int, Mapping[str, Any]]]:
    while True:
        line = lines.readline(max_line_chars + 1)
        if not line:
            return
        stats.lines += 1
        if len(line) > max_line_chars:
            raise _refused(path, stats.lines, f"longer than {max_line_chars} characters; not read further")
        if on_line is not None:
            on_line(len(line.encode("utf-8")))
        if not line.strip():
            continue
        if too_deep(line, MAX_DEPTH):
            raise _refused(path, stats.lines, f"nested deeper than {MAX_DEPTH} levels")
        try:
            request = json.loads(line)
        except RecursionError:  # within MAX_DEPTH, but the stack was short already
            raise _refused(path, stats.lines, "nested too deeply to parse") from None
        except ValueError:
            stats.bad_lines += 1
            continue
        if isinstance(request, Mapping):
            yield stats.lines, request
        else:
            stats.bad_lines += 1


def _read_spans(
    path: Path, number: int, request: Mapping[str, Any]
) -> list[tuple[SpanData, LedgerData | None]]:
    """The usable spans of one request; a value of the wrong type refuses the line."""
    try:
        return [read for raw in _spans(request) if (read := read_span(raw)) is not None]
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as error:
        raise _refused(path, number, f"not OTLP/JSON: {type(error).__name__}: {error}") from None


def _spans(request: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for resource_spans in _get(request, "resourceSpans", "resource_spans") or ():
        for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans") or ():
            for span in scope_spans.get("spans") or ():
                if isinstance(span, Mapping):
                    yield span


class OTLPFileReader:
    """Iterate the traces of an OTLP JSON file in bounded memory (see the module docstring).

    Args:
        path: the file (``.gz`` read through gzip).
        max_buffered_spans: spans held while their traces are incomplete.
        on_bytes: called with the size of each line read (a progress bar's ``update``).

    Raises:
        ConfigError: the file cannot be opened (raised when iteration starts), or a line is beyond a
            bound or holds values of the wrong type (raised when that line is read).
    """

    def __init__(
        self,
        path: Path,
        *,
        max_buffered_spans: int = DEFAULT_MAX_BUFFERED_SPANS,
        on_bytes: Callable[[int], object] | None = None,
        max_line_chars: int = MAX_LINE_CHARS,
    ) -> None:
        self.path = path
        self.max_buffered_spans = max_buffered_spans
        self.max_line_chars = max_line_chars
        self.on_bytes = on_bytes
        self.stats = ReadStats()

    def _open(self) -> IO[str]:
        try:
            if self.path.suffix == ".gz":
                return gzip.open(self.path, "rt", encoding="utf-8")
            return self.path.open(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the OTLP JSON file {self.path}: {exc}") from exc

    def __iter__(self) -> Iterator[TraceData]:
        pending: OrderedDict[str, TraceData] = OrderedDict()
        buffered = 0
        with self._open() as lines:
            requests = _requests(self.path, lines, self.stats, self.on_bytes, self.max_line_chars)
            for number, request in requests:
                for span, books in _read_spans(self.path, number, request):
                    self.stats.spans += 1
                    trace = pending.get(span.trace_id)
                    if trace is None:
                        trace = pending[span.trace_id] = TraceData(span.trace_id)
                    trace.spans.append(span)
                    buffered += 1
                    if books is not None:
                        trace.ledgers[span.span_id] = books
                    if span.parent_span_id is None:  # the root ends last: the trace is complete
                        buffered -= len(trace.spans)
                        yield pending.pop(span.trace_id)
                    while buffered > self.max_buffered_spans and pending:
                        _, oldest = pending.popitem(last=False)
                        buffered -= len(oldest.spans)
                        self.stats.evicted_traces += 1
                        yield oldest
        if self.stats.evicted_traces:
            _logger.warning(
                "%d traces of %s were exported before all their spans were read (more than %d spans "
                "waiting); their runs may be split",
                self.stats.evicted_traces,
                self.path,
                self.max_buffered_spans,
            )
        yield from pending.values()
