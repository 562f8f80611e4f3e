"""The embedded SQLite store as an OpenTelemetry exporter (the schema and ``connect`` live in the core).

Usage::

    from tallyspan_exporters import SQLiteSpanExporter
    provider.add_span_processor(BatchSpanProcessor(SQLiteSpanExporter(".tallyspan/tallyspan.db")))

``tallyspan.instrument()`` adds it for you through ``store_component`` (entry point ``store``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.resources import SERVICE_NAME
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from tallyspan import semconv
from tallyspan.plugin import (
    BUSY_TIMEOUT_MS,
    FAILURE_CLASS_OF,
    MIGRATIONS,
    RUNS,
    SPANS,
    VIOLATIONS,
    Settings,
    ViolationType,
    connect,
    count,
    is_locked,
    is_run_span,
    migration,
    renew_lock_after_fork,
    resolve_db_path,
    swallowed,
)

# connect/MIGRATIONS/migration are re-exported so the ledger sink can reach the schema from here too.
__all__ = ["MIGRATIONS", "SQLiteSpanExporter", "connect", "migration", "store_component"]

_logger = logging.getLogger(__name__)

#: How often the batch processor writes when the app is busy but no batch is full.
SCHEDULE_DELAY_MILLIS: Final = 500
#: Spans the store's batch processor holds: as many as the chain's worker queue (8192) and then some,
#: so a burst the worker accepted is not dropped here (the SDK's 2048 drops with only a log line).
MAX_QUEUE_SIZE: Final = 16384
#: Spans kept while another connection holds the write lock (``tallyspan prune``, a backup); the oldest
#: beyond this are dropped and counted.
MAX_PENDING_SPANS: Final = 16384

_SPAN_COLUMNS: Final = (
    "trace_id", "span_id", "parent_span_id", "name", "kind", "operation", "provider", "request_model",
    "response_model", "stage", "start_unix_nano", "end_unix_nano", "duration_ns", "status_code",
    "status_description", "error_type", "input_tokens", "output_tokens", "violation_count",
    "violation_types", "failure_class", "service_name", "attributes",
)  # fmt: skip
_RUN_COLUMNS: Final = (
    "trace_id", "span_id", "name", "operation", "agent_name", "run_name", "start_unix_nano",
    "end_unix_nano", "status_code", "ledger_balanced", "ledger_protocol_ok", "ledger_discrepancy_types",
)  # fmt: skip
_VIOLATION_COLUMNS: Final = ("trace_id", "span_id", "stage", "type", "failure_class", "detail")


def _insert(table: str, columns: Sequence[str], verb: str = "INSERT OR REPLACE") -> str:
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"


_INSERT_SPAN: Final = _insert(SPANS, _SPAN_COLUMNS)
_INSERT_RUN: Final = _insert(RUNS, _RUN_COLUMNS)
_INSERT_VIOLATION: Final = _insert(VIOLATIONS, _VIOLATION_COLUMNS, verb="INSERT")
_DELETE_VIOLATIONS: Final = f"DELETE FROM {VIOLATIONS} WHERE trace_id = ? AND span_id = ?"


class SQLiteSpanExporter(SpanExporter):
    """Write finished spans, their run summaries and violations to the embedded store.

    ``export`` never raises: a failure (unwritable folder, corrupt file, locked database) is logged
    once, counted in ``tallyspan.stats()`` and reported as ``SpanExportResult.FAILURE``. The database
    is opened on the first export, so constructing the exporter never touches the disk. Thread-safe;
    one transaction per batch.

    While another connection holds the write lock longer than the busy timeout, the batches are kept
    (at most ``MAX_PENDING_SPANS`` spans) and written with the next export that gets the lock; until
    then each export tries once without waiting, so a long lock costs the exporting thread one busy
    timeout, not one per batch. Spans that cannot be written (the store cannot be opened, or more than
    the pending limit) are counted in ``dropped.store_spans``.

    Args:
        path: the database file; default ``TALLYSPAN_DB`` or ``./.tallyspan/tallyspan.db``.
        busy_timeout_millis: how long a write waits for another connection's lock.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, busy_timeout_millis: int = BUSY_TIMEOUT_MS
    ) -> None:
        self._path = resolve_db_path(path)
        self._busy_timeout_millis = max(0, busy_timeout_millis)
        self._lock = threading.Lock()
        renew_lock_after_fork(self)  # a fork while the batch thread writes must not freeze the child
        self._db: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._is_shutdown = False
        self._pending: list[_Batch] = []
        self._pending_spans = 0
        self._contended = False
        """True after a write found the database locked: later writes try once without waiting."""

    @property
    def path(self) -> Path:
        """The database file this exporter writes."""
        return self._path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` in one transaction; SUCCESS, or FAILURE (logged and counted) without raising."""
        if self._is_shutdown:
            count("dropped.store_spans", len(spans))
            return SpanExportResult.FAILURE
        try:
            batch = _Batch()
            for span in spans:
                batch.add(span)
        except Exception:  # a span we cannot read must not cost the rest of the chain
            swallowed(
                _logger, "store.export", f"could not read spans for the tallyspan store at {self._path}"
            )
            count("dropped.store_spans", len(spans))
            return SpanExportResult.FAILURE
        with _suppressed(), self._lock:
            if self._pid != os.getpid():
                self._forget_parent()
            self._keep(batch)
            written = self._write_pending(wait=not self._contended)
        return SpanExportResult.SUCCESS if written else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write the batches kept while the database was locked; True when nothing is left unwritten."""
        with _suppressed(), self._lock:
            if not self._pending:
                return True
            return self._write_pending(wait=True, timeout_millis=timeout_millis)

    def shutdown(self) -> None:
        """Write what is still kept (one last wait for the lock), close the database; later exports fail."""
        with _suppressed(), self._lock:
            if self._is_shutdown:
                return
            self._is_shutdown = True
            if self._pid != os.getpid():
                self._forget_parent()
            if self._pending:
                self._write_pending(wait=True)
            if self._pending_spans:
                count("dropped.store_spans", self._pending_spans)
            self._pending, self._pending_spans = [], 0
            db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception:  # closing a broken connection must not raise out of provider shutdown
                swallowed(_logger, "store.close", f"could not close the tallyspan store at {self._path}")

    def _forget_parent(self) -> None:
        # A forked child must not use its parent's SQLite connection: abandon it (closing it could
        # disturb the parent's locks) and open its own. The batches it kept are the parent's to write.
        self._db, self._pid = None, os.getpid()
        self._pending, self._pending_spans, self._contended = [], 0, False

    def _keep(self, batch: _Batch) -> None:
        self._pending.append(batch)
        self._pending_spans += len(batch.spans)
        while self._pending_spans > MAX_PENDING_SPANS and len(self._pending) > 1:
            oldest = self._pending.pop(0)
            self._pending_spans -= len(oldest.spans)
            count("dropped.store_spans", len(oldest.spans))

    def _write_pending(self, *, wait: bool, timeout_millis: int | None = None) -> bool:
        """Write every kept batch in one transaction (under ``self._lock``); False if it failed."""
        db: sqlite3.Connection | None = None
        try:
            if self._db is None:
                self._db = connect(self._path)
            db = self._db
            busy_millis = self._busy_timeout_millis if wait else 0
            if timeout_millis is not None:
                busy_millis = min(busy_millis, max(0, timeout_millis))
            db.execute(f"PRAGMA busy_timeout = {int(busy_millis)}")
            db.execute("BEGIN")
            try:
                for batch in self._pending:
                    batch.write(db)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as error:
            if not is_locked(error):
                return self._lost()
            self._contended = True
            swallowed(
                _logger,
                "store.locked",
                f"the tallyspan store at {self._path} is locked by another connection; up to "
                f"{MAX_PENDING_SPANS} spans are kept and written once it is free",
            )
            return False
        except Exception:  # the store is a convenience: losing it must never break the app or the chain
            return self._lost()
        self._pending, self._pending_spans, self._contended = [], 0, False
        return True

    def _lost(self) -> bool:
        swallowed(_logger, "store.export", f"could not write spans to the tallyspan store at {self._path}")
        count("dropped.store_spans", self._pending_spans)
        self._pending, self._pending_spans = [], 0
        if self._db is not None:
            # A connection that failed other than by a lock may be broken: open afresh next time.
            with contextlib.suppress(Exception):
                self._db.close()
            self._db = None
        return False


def store_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor:
    """The ``store`` link of ``instrument()``'s chain: a BatchSpanProcessor over ``SQLiteSpanExporter``.

    A batch processor, not a simple one, even though the chain already runs on a worker: SQLite pays
    per commit, so one transaction per batch keeps the store cheap under load, and disk latency never
    holds up the checks of the spans behind it. ``force_flush`` stays exact: the worker drains its
    queue into this processor first, whose own ``force_flush`` returns only once every queued span is
    committed, so ``instrumentation.force_flush()`` followed by a read sees every span.

    Args:
        downstream: unused; the store is a sink.
        settings: ``settings.db_path`` is the database (None falls back to ``TALLYSPAN_DB`` or default).
    """
    del downstream
    return BatchSpanProcessor(
        SQLiteSpanExporter(settings.db_path),
        schedule_delay_millis=SCHEDULE_DELAY_MILLIS,
        max_queue_size=MAX_QUEUE_SIZE,
    )


@contextmanager
def _suppressed() -> Iterator[None]:
    # Our own writes must not be traced by a database instrumentation the app installed.
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        yield
    finally:
        detach(token)


def _hex_trace(trace_id: int) -> str:
    return format(trace_id, "032x")


def _hex_span(span_id: int) -> str:
    return format(span_id, "016x")


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _flag(value: object) -> int | None:
    return int(value) if isinstance(value, bool) else None


def _json_list(value: object) -> str:
    if isinstance(value, str):
        return json.dumps([value])
    if isinstance(value, Sequence):
        return json.dumps([str(item) for item in value], ensure_ascii=False)
    return "[]"


def _json_attributes(attributes: Mapping[str, Any]) -> str:
    plain = {key: list(value) if isinstance(value, tuple) else value for key, value in attributes.items()}
    return json.dumps(plain, ensure_ascii=False, sort_keys=True, default=str)


class _Batch:
    """The rows of a batch of spans, written with one ``executemany`` per statement."""

    def __init__(self) -> None:
        self.spans: list[tuple[Any, ...]] = []
        self.span_keys: list[tuple[str, str]] = []
        self.violations: list[tuple[Any, ...]] = []
        self.runs: list[tuple[Any, ...]] = []

    def write(self, db: sqlite3.Connection) -> None:
        db.executemany(_INSERT_SPAN, self.spans)
        db.executemany(_DELETE_VIOLATIONS, self.span_keys)  # a span exported again replaces its rows
        db.executemany(_INSERT_VIOLATION, self.violations)
        db.executemany(_INSERT_RUN, self.runs)

    def add(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        if context is None:
            return
        trace_id, span_id = _hex_trace(context.trace_id), _hex_span(context.span_id)
        # A plain dict: the SDK's bounded attribute mapping is several times slower to read.
        attributes: dict[str, Any] = dict(span.attributes or {})
        stage = _text(attributes.get(semconv.STAGE))
        status_code = span.status.status_code.name
        start, end = span.start_time, span.end_time
        violation_types = attributes.get(semconv.VIOLATION_TYPES)
        service = span.resource.attributes.get(SERVICE_NAME) if span.resource is not None else None
        violations = _violation_rows(span, trace_id, span_id, stage, violation_types)
        declared_count = _int(attributes.get(semconv.VIOLATION_COUNT))
        operation = _text(attributes.get(semconv.GEN_AI_OPERATION_NAME))
        self.spans.append(
            (
                trace_id,
                span_id,
                _hex_span(span.parent.span_id) if span.parent is not None else None,
                span.name,
                span.kind.name.lower(),
                operation,
                _text(attributes.get(semconv.GEN_AI_PROVIDER_NAME)),
                _text(attributes.get(semconv.GEN_AI_REQUEST_MODEL)),
                _text(attributes.get(semconv.GEN_AI_RESPONSE_MODEL)),
                stage,
                start,
                end,
                end - start if start is not None and end is not None else None,
                status_code,
                span.status.description,
                _text(attributes.get(semconv.ERROR_TYPE)),
                _int(attributes.get(semconv.GEN_AI_USAGE_INPUT_TOKENS)),
                _int(attributes.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS)),
                declared_count if declared_count is not None else len(violations),
                _json_list(violation_types),
                _text(attributes.get(semconv.FAILURE_CLASS)),
                _text(service),
                _json_attributes(attributes),
            )
        )
        self.span_keys.append((trace_id, span_id))
        self.violations.extend(violations)
        if is_run_span(attributes, span.parent):
            self.runs.append(
                (
                    trace_id,
                    span_id,
                    span.name,
                    operation,
                    _text(attributes.get(semconv.GEN_AI_AGENT_NAME)),
                    _text(attributes.get(semconv.RUN_NAME)),
                    start,
                    end,
                    status_code,
                    _flag(attributes.get(semconv.LEDGER_BALANCED)),
                    _flag(attributes.get(semconv.LEDGER_PROTOCOL_OK)),
                    _json_list(attributes.get(semconv.LEDGER_DISCREPANCY_TYPES)),
                )
            )


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
