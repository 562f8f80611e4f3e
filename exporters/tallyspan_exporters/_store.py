"""The embedded SQLite store as an OpenTelemetry exporter (the schema and ``connect`` live in the core).

Usage::

    from tallyspan_exporters import SQLiteSpanExporter
    provider.add_span_processor(BatchSpanProcessor(SQLiteSpanExporter(".tallyspan/tallyspan.db")))

``tallyspan.instrument()`` adds the store for you through ``store_component`` (entry point ``store``):
a ``StoreProcessor``, which writes from a thread of its own. Both write through the one writer of the
store (``_writer.StoreWriter``), like the ledger sink.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from tallyspan import semconv
from tallyspan.plugin import (
    HandOvers,
    Settings,
    ShutdownBudget,
    count,
    plain_attributes,
    renew_lock_after_fork,
    stats,
    swallowed,
)
from tallyspan.plugin.exporters import (
    BUSY_TIMEOUT_MS,
    FAILURE_CLASS_OF,
    RUNS,
    SELF_STATS,
    SPANS,
    VIOLATIONS,
    ViolationType,
    is_run_span,
    json_bytes_encoder,
    resolve_db_path,
)
from tallyspan_exporters._writer import (
    DEFAULT_MAX_PENDING,
    Rows,
    StoreWriter,
    WriterThread,
    delete_sql,
    insert_sql,
    span_hex,
    trace_hex,
)

__all__ = ["SQLiteSpanExporter", "StoreProcessor", "store_component"]

_logger = logging.getLogger(__name__)

#: Spans kept while another connection holds the write lock (``tallyspan prune``, a backup); the oldest
#: beyond this are dropped and counted.
MAX_PENDING_SPANS: Final = DEFAULT_MAX_PENDING
#: The counter of the spans the store lost, by any cause.
LOST_SPANS: Final = "dropped.store_spans"

#: The span columns written as JSON in UTF-8 bytes (``json_bytes_encoder``) and stored as TEXT.
_JSON_BYTES_COLUMNS: Final = frozenset({"violation_types", "attributes"})
_SPAN_COLUMNS: Final = (
    "trace_id", "span_id", "parent_span_id", "name", "kind", "operation", "provider", "request_model",
    "response_model", "stage", "start_unix_nano", "end_unix_nano", "duration_ns", "status_code",
    "status_description", "error_type", "input_tokens", "output_tokens", "violation_count",
    "violation_types", "failure_class", "service_name", "attributes",
)  # fmt: skip
# A run's balance is not here: the ledger sink's reconciliation is its one stored record.
_RUN_COLUMNS: Final = (
    "trace_id", "span_id", "name", "operation", "agent_name", "run_name", "start_unix_nano",
    "end_unix_nano", "status_code",
)  # fmt: skip
_VIOLATION_COLUMNS: Final = ("trace_id", "span_id", "stage", "type", "failure_class", "detail")


@functools.lru_cache(maxsize=64)
def _insert_without(table: str, columns: tuple[str, ...], absent: tuple[int, ...]) -> str:
    """The INSERT OR REPLACE of ``columns`` into ``table`` without the columns at ``absent`` (whose
    values are None).

    A left-out column is stored NULL, as a bound None would be: every nullable span and run column has
    no default, and the columns with one (``violation_count``, ``violation_types``, ``attributes``) are
    never None. Binding None costs ``sqlite3`` a failed adapter lookup, about 2,000 to 3,300
    instructions each (a chat span has about ten, its run row two), more than the rest of the row's
    binding.
    """
    absent_set = set(absent)
    kept = [column for index, column in enumerate(columns) if index not in absent_set]
    return insert_sql(table, kept, verb="INSERT OR REPLACE", text_bytes=_JSON_BYTES_COLUMNS)


def _add_rows_without_none(
    rows: Rows, table: str, columns: tuple[str, ...], values: Sequence[tuple[Any, ...]]
) -> None:
    """Add the INSERTs of ``values``: one statement per run of rows with None in the same columns (in
    order, so a span exported twice in a batch keeps its later row), without those columns."""
    _add_keyed_rows(rows, table, columns, map(_without_none, values))


def _without_none(row: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """(the indexes of the None values in ``row``, ``row`` without them)."""
    absent = tuple([index for index, value in enumerate(row) if value is None])
    return absent, tuple([value for value in row if value is not None]) if absent else row


def _add_keyed_rows(
    rows: Rows, table: str, columns: tuple[str, ...], keyed: Iterable[tuple[tuple[int, ...], tuple[Any, ...]]]
) -> None:
    """Add the INSERTs of ``keyed`` rows (the columns left out, the row without them): one statement per
    run of rows with the same columns left out, in order (a span exported twice keeps its later row)."""
    statement: list[tuple[Any, ...]] = []
    current: tuple[int, ...] | None = None
    for absent, row in keyed:
        if absent != current:
            if current is not None:
                rows.add(_insert_without(table, columns, current), statement)
            current, statement = absent, []
        statement.append(row)
    if current is not None:
        rows.add(_insert_without(table, columns, current), statement)


_INSERT_VIOLATION: Final = insert_sql(VIOLATIONS, _VIOLATION_COLUMNS)
_DELETE_VIOLATIONS: Final = delete_sql(VIOLATIONS, ("trace_id", "span_id"))
#: A run row without agent and run name (a lone model call, a plain root span): both are None there, and
#: a bound None costs an adapter lookup (about 3,300 instructions each). Finding the None columns of a
#: run row the general way (``_add_rows_without_none``) costs more than it saves (9.5k a row).
_UNNAMED_RUN: Final = (_RUN_COLUMNS.index("agent_name"), _RUN_COLUMNS.index("run_name"))
_COUNTER_COLUMNS: Final = ("pid", "started_unix_nano", "service_name", "key", "value", "time_unix_nano")
_INSERT_COUNTER: Final = insert_sql(SELF_STATS, _COUNTER_COLUMNS, verb="INSERT OR REPLACE")
#: With the pid, names this process's counters in the store (a pid is reused after a restart).
_PROCESS_STARTED: Final = time.time_ns()


def _span_writer(path: str | os.PathLike[str] | None, busy_timeout_millis: int) -> StoreWriter:
    return StoreWriter(
        resolve_db_path(path),
        name="store",
        unit="spans",
        lost_key=LOST_SPANS,
        busy_timeout_millis=busy_timeout_millis,
        max_pending=MAX_PENDING_SPANS,
    )


class SQLiteSpanExporter(SpanExporter):
    """Write finished spans, their run summaries and violations to the embedded store.

    ``export`` never raises: a failure (unwritable folder, corrupt file, locked database) is logged
    once, counted in ``tallyspan.stats()`` and reported as ``SpanExportResult.FAILURE``. The database
    is opened on the first export, so constructing the exporter never touches the disk. Thread-safe;
    one transaction per batch, on the exporting thread.

    While another connection holds the write lock longer than the busy timeout, the batches are kept
    (at most ``MAX_PENDING_SPANS`` spans) and written with the next export that gets the lock; until
    then each export tries once without waiting, so a long lock costs the exporting thread one busy
    timeout, not one per batch. Spans that cannot be written (the store cannot be opened, more than
    the pending limit) are counted in ``dropped.store_spans``.

    Args:
        path: the database file; default ``TALLYSPAN_DB`` or ``./.tallyspan/tallyspan.db``.
        busy_timeout_millis: how long a write waits for another connection's lock.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, busy_timeout_millis: int = BUSY_TIMEOUT_MS
    ) -> None:
        self._writer = _span_writer(path, busy_timeout_millis)
        self._counters = _Counters()

    @property
    def path(self) -> Path:
        """The database file this exporter writes."""
        return Path(self._writer.path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` in one transaction; SUCCESS, or FAILURE (logged and counted) without raising."""
        written = self._writer.write(span_rows(spans, self._writer, self._counters))
        return SpanExportResult.SUCCESS if written else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write the batches kept while the database was locked, and the counters; True when nothing is
        left unwritten."""
        self._write_counters()
        return self._writer.flush(timeout_millis)

    def shutdown(self) -> None:
        """Write what is still kept (one last wait for the lock), close the database; later exports fail."""
        self._write_counters()
        self._writer.close()

    def _write_counters(self) -> None:
        # Counters alone never open (or retry) a store that failed: they ride on the writes that work.
        if self._writer.is_open:
            self._writer.write(self._counters.rows())


class StoreProcessor(SpanProcessor):
    """The embedded store as a span processor: ``on_end`` turns the span into its rows and queues them,
    and a thread of its own writes them, one transaction per batch.

    A batch writer, not a simple one, even though the chain already runs on a worker: SQLite pays per
    commit, so one transaction per batch keeps the store cheap under load, and disk latency or another
    connection's lock never holds up the checks of the spans behind it. ``force_flush`` stays exact: it
    returns True once every span handed over before it is committed, so ``instrumentation.force_flush()``
    followed by a read sees every span. Spans that do not fit the queue are dropped and counted in
    ``dropped.store_spans``, like every other loss of the store.

    Args:
        path: the database file; default ``TALLYSPAN_DB`` or ``./.tallyspan/tallyspan.db``.
        busy_timeout_millis: how long a write waits for another connection's lock.
        budget: bounds ``shutdown``; default 30 s.
        hand_overs: the instrumentation's link from the app's threads to the writer's thread
            (``Settings.hand_overs``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout_millis: int = BUSY_TIMEOUT_MS,
        budget: ShutdownBudget | None = None,
        hand_overs: HandOvers | None = None,
    ) -> None:
        self._writer = writer = _span_writer(path, busy_timeout_millis)
        self._budget = budget
        counters = _Counters()
        # None in the queue asks for the counters alone (a flush with no span to write).
        self._thread: WriterThread[_SpanRows | None] = WriterThread(
            writer, lambda items: _batch_rows(items, counters), name="tallyspan-store", hand_overs=hand_overs
        )

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context  # a property: read once
        if context is not None and not context.trace_flags.sampled:
            return  # recorded but not sampled: not exported, like the SDK's own batch processor
        # The span's rows are made here, on the thread that hands it over (the chain's worker, while it
        # holds the GIL anyway); the writer's thread then needs the GIL only briefly around each SQLite
        # statement. Made there, they took it for about 30 ms a batch, which a busy app cut into
        # switch intervals, each won back only after futile wake-ups (0.8 a call of the app).
        rows_of_span = _readable_rows(span, self._writer)
        if rows_of_span is not None:
            self._thread.submit(rows_of_span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._submit_counters()
        return self._thread.flush(timeout_millis)

    def shutdown(self) -> None:
        self._submit_counters()
        # The local disk gets its grace past the budget: a backend that took the budget must not cost it.
        self._thread.shutdown(30000 if self._budget is None else self._budget.local_remaining_millis())

    def _submit_counters(self) -> None:
        # Counters alone never open (or retry) a store that failed: they ride on the writes that work.
        if self._writer.is_open:
            self._thread.submit(None, size=0)


def store_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor | None:
    """The ``store`` link of ``instrument()``'s chain: a ``StoreProcessor``, or None without a store.

    Args:
        downstream: unused; the store is a sink.
        settings: ``settings.db_path`` is the database; None means the user asked for no store.
    """
    del downstream
    if settings.db_path is None:
        return None
    return StoreProcessor(settings.db_path, budget=settings.shutdown_budget, hand_overs=settings.hand_overs)


def _readable_rows(span: ReadableSpan, writer: StoreWriter) -> _SpanRows | None:
    """``span_rows_of(span)``; a span that cannot be read is logged and counted (None), so it costs
    no other span."""
    try:
        return span_rows_of(span)
    except Exception:  # a span we cannot read must not cost the spans beside it
        swallowed(_logger, "store.export", f"could not read a span for the tallyspan store at {writer.path}")
        count(LOST_SPANS)
        return None


def _batch_rows(items: Iterable[_SpanRows | None], counters: _Counters | None) -> Rows:
    """The rows of spans' rows made before (None: none, the counters alone), and of the counters if
    they changed."""
    batch = _Batch()
    for rows_of_span in items:
        if rows_of_span is not None:
            batch.take(rows_of_span)
    rows = batch.rows()
    if counters is not None:
        counters.add_to(rows, batch.service_name)
    return rows


def span_rows(spans: Iterable[ReadableSpan], writer: StoreWriter, counters: _Counters | None = None) -> Rows:
    """The rows of ``spans`` for one transaction, and of the counters if they changed; a span that
    cannot be read is logged and counted."""
    return _batch_rows((_readable_rows(span, writer) for span in spans), counters)


class _Counters:
    """Records this process's ``tallyspan.stats()`` in the store whenever they changed, with the writes
    of spans and at each flush, so ``tallyspan doctor`` can show drops after the process is gone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        renew_lock_after_fork(self)
        self._pid = os.getpid()
        self._written: dict[str, int] = {}
        self._service_name: str | None = None

    def rows(self) -> Rows:
        """The rows of the counters that changed since the last rows (none when nothing did)."""
        rows = Rows()
        self.add_to(rows, None)
        return rows

    def add_to(self, rows: Rows, service_name: str | None) -> None:
        """Add the counters that changed to ``rows`` (no items: a lost counter row is not a lost span)."""
        now = stats()
        with self._lock:
            if self._pid != os.getpid():  # a forked child records its counters under its own pid, all of them
                self._pid, self._written = os.getpid(), {}
            self._service_name = service_name or self._service_name
            changed = {key: value for key, value in now.items() if self._written.get(key) != value}
            if not changed:
                return
            self._written.update(changed)
            service = self._service_name
        stamp = time.time_ns()
        rows.add(
            _INSERT_COUNTER,
            [
                (os.getpid(), _PROCESS_STARTED, service, key, value, stamp)
                for key, value in sorted(changed.items())
            ],
        )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


#: The attributes a span's and its run's rows store as text, in the order ``_texts`` returns them.
_TEXT_KEYS: Final = (
    semconv.STAGE, semconv.GEN_AI_OPERATION_NAME, semconv.GEN_AI_PROVIDER_NAME, semconv.GEN_AI_REQUEST_MODEL,
    semconv.GEN_AI_RESPONSE_MODEL, semconv.ERROR_TYPE, semconv.FAILURE_CLASS, semconv.GEN_AI_AGENT_NAME,
    semconv.RUN_NAME,
)  # fmt: skip


def _texts(attributes: dict[str, Any]) -> list[str | None]:
    """``_text`` of each of ``_TEXT_KEYS`` in ``attributes``, in one comprehension: nine calls of
    ``_text`` cost about 1,000 instructions more a span."""
    return [
        value if value is None or value.__class__ is str else str(value)
        for value in map(attributes.get, _TEXT_KEYS)
    ]


# ``Enum.name`` is a Python-level descriptor (two calls a read); the store reads two per span.
_STATUS_NAMES: Final[dict[StatusCode, str]] = {code: code.name for code in StatusCode}
_KIND_NAMES: Final[dict[SpanKind, str]] = {kind: kind.name.lower() for kind in SpanKind}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_EMPTY_LIST: Final = b"[]"


@functools.cache
def _json_encoders() -> tuple[Callable[[Any], bytes], Callable[[Any], bytes]]:
    """The store's JSON columns, as compact UTF-8 bytes: (lists, attributes with sorted keys, so equal
    attributes make equal text). Made with the first rows, on the writer's thread (orjson loads then)."""
    return json_bytes_encoder(), json_bytes_encoder(sort_keys=True)


def _json_list(value: object) -> bytes:
    if value is None:  # a clean span: before the Sequence ABC, which costs about 2,000 instructions
        return _EMPTY_LIST
    if isinstance(value, str):
        return _json_encoders()[0]([value])
    if isinstance(value, Sequence):
        return _json_encoders()[0]([str(item) for item in value]) if value else _EMPTY_LIST
    return _EMPTY_LIST


class _SpanRows:
    """One span's rows in the store: its row, its violations' rows and its run's row, if it is a run."""

    __slots__ = ("key", "row", "run", "service_name", "violations")

    def __init__(
        self,
        key: tuple[str, str],
        row: tuple[Any, ...],
        violations: list[tuple[Any, ...]],
        run: tuple[tuple[int, ...], tuple[Any, ...]] | None,
        service_name: str | None,
    ) -> None:
        self.key = key
        self.row = row
        self.violations = violations
        self.run = run
        """(the columns left out, the row without them)"""
        self.service_name = service_name


class _Batch:
    """The rows of a batch of spans, gathered per statement (one ``executemany`` each)."""

    def __init__(self) -> None:
        self.spans: list[tuple[Any, ...]] = []
        self.span_keys: list[tuple[str, str]] = []
        self.violations: list[list[tuple[Any, ...]]] = []
        """each span's violation rows, in the order of ``span_keys``"""
        self.runs: list[tuple[tuple[int, ...], tuple[Any, ...]]] = []
        """(the columns left out, the row without them)"""
        self.service_name: str | None = None

    def rows(self) -> Rows:
        rows = Rows(items=len(self.spans))
        _add_rows_without_none(rows, SPANS, _SPAN_COLUMNS, self.spans)
        keys = self.span_keys
        if len(set(keys)) == len(keys):
            violations = [row for rows_of_span in self.violations for row in rows_of_span]
        else:  # a span exported twice in this batch: only its later rows, as a later batch would leave
            last = {key: index for index, key in enumerate(keys)}
            violations = [
                row
                for index, rows_of_span in enumerate(self.violations)
                if last[keys[index]] == index
                for row in rows_of_span
            ]
        rows.add(_DELETE_VIOLATIONS, keys)  # a span exported again replaces its rows
        rows.add(_INSERT_VIOLATION, violations)
        _add_keyed_rows(rows, RUNS, _RUN_COLUMNS, self.runs)
        return rows

    def add(self, span: ReadableSpan) -> None:
        rows_of_span = span_rows_of(span)
        if rows_of_span is not None:
            self.take(rows_of_span)

    def take(self, rows_of_span: _SpanRows) -> None:
        """Add a span's rows, made before (``span_rows_of``)."""
        self.spans.append(rows_of_span.row)
        self.span_keys.append(rows_of_span.key)
        self.violations.append(rows_of_span.violations)
        if rows_of_span.run is not None:
            self.runs.append(rows_of_span.run)
        self.service_name = rows_of_span.service_name or self.service_name


#: (the last resource read, its service name): a provider's spans share one resource, which never
#: changes, and reading its bounded attribute mapping costs Python-level calls.
_last_service: tuple[Resource | None, str | None] = (None, None)


def _service_name(resource: Resource | None) -> str | None:
    global _last_service
    if resource is None:
        return None
    last_resource, last_name = _last_service  # one read: another thread may replace the pair
    if last_resource is resource:
        return last_name
    name = _text(resource.attributes.get(SERVICE_NAME))
    _last_service = (resource, name)
    return name


def span_rows_of(span: ReadableSpan) -> _SpanRows | None:
    """A span's rows in the store (None for a span without a context); raises on a span it cannot read."""
    context = span.get_span_context()
    if context is None:
        return None
    trace_id, span_id = trace_hex(context.trace_id), span_hex(context.span_id)
    # A plain dict: the SDK's bounded attribute mapping is several times slower to read.
    attributes = plain_attributes(span)
    (stage, operation, provider, request_model, response_model, error_type, failure_class, agent_name,
     run_name) = _texts(attributes)  # fmt: skip
    # Each of these is a Python-level property of the span: read once.
    status, kind, parent, name, resource = span.status, span.kind, span.parent, span.name, span.resource
    code = status.status_code
    status_code = _STATUS_NAMES.get(code) or code.name
    start, end = span.start_time, span.end_time
    violation_types = attributes.get(semconv.VIOLATION_TYPES)
    service = _service_name(resource)
    violations = _violation_rows(span, trace_id, span_id, stage, violation_types)
    declared_count = _int(attributes.get(semconv.VIOLATION_COUNT))
    row = (
        trace_id,
        span_id,
        span_hex(parent.span_id) if parent is not None else None,
        name,
        _KIND_NAMES.get(kind) or kind.name.lower(),
        operation,
        provider,
        request_model,
        response_model,
        stage,
        start,
        end,
        end - start if start is not None and end is not None else None,
        status_code,
        status.description,
        error_type,
        _int(attributes.get(semconv.GEN_AI_USAGE_INPUT_TOKENS)),
        _int(attributes.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS)),
        declared_count if declared_count is not None else len(violations),
        _json_list(violation_types),
        failure_class,
        service,
        _json_encoders()[1](attributes),
    )
    run: tuple[tuple[int, ...], tuple[Any, ...]] | None = None
    if is_run_span(attributes, parent):
        if agent_name is None and run_name is None:
            run = (_UNNAMED_RUN, (trace_id, span_id, name, operation, start, end, status_code))
        else:
            named = (trace_id, span_id, name, operation, agent_name, run_name, start, end, status_code)
            run = ((), named)
    return _SpanRows((trace_id, span_id), row, violations, run, service)


def _violation_rows(
    span: ReadableSpan, trace_id: str, span_id: str, stage: str | None, violation_types: object
) -> list[tuple[str, str, str | None, str, str | None, str | None]]:
    rows = [
        (
            trace_id,
            span_id,
            stage,
            str(event.attributes.get(semconv.VIOLATION_TYPE, "")),
            _text(event.attributes.get(semconv.VIOLATION_FAILURE_CLASS)),
            _text(event.attributes.get(semconv.VIOLATION_DETAIL)),
        )
        for event in span.events
        if event.name == semconv.EVENT_VIOLATION and event.attributes is not None
    ]
    if rows or violation_types is None:
        return rows
    # No events (another producer, or events dropped by limits): one row per listed type.
    types = json.loads(_json_list(violation_types))
    return [(trace_id, span_id, stage, str(kind), _failure_class(str(kind)), None) for kind in types]


def _failure_class(kind: str) -> str | None:
    try:
        return FAILURE_CLASS_OF[ViolationType(kind)].value
    except ValueError:  # a type from a newer tallyspan or another producer: keep the row, class unknown
        return None
