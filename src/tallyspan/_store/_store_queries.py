"""Read side of the embedded store: plain dataclasses for the ``tallyspan`` command and for scripts.

Usage::

    from tallyspan._store._store_queries import open_store, report, list_spans

    with open_store(".tallyspan/tallyspan.db") as db:
        print(report(db).model_calls)

Every query takes an open connection (see ``open_store``) and returns frozen dataclasses of plain
values (str, int, bool, None, lists), so ``dataclasses.asdict`` turns them into JSON directly. The
ledger's reads live in ``tallyspan._store._store_ledger`` and are re-exported here: callers read the store
through this module only.

One call, one count. Two instrumentations of the same client (ours and
opentelemetry-instrumentation-openai-v2, or a LangChain model span over the OpenAI one) each make a
model span for one call, the second nested in the first. So a model span whose parent is a model span
of the same operation is that same call: the report counts the outermost span of such a chain as the
call, and takes its model, tokens (the largest count any span of the chain has), stage, error and
violations from the whole chain, once. Every other span counts for itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tallyspan import semconv
from tallyspan._books._ledger import DEFAULT_LOG_TOOL, Discrepancy
from tallyspan._errors import ConfigError, TallyspanError
from tallyspan._store._store_ledger import (
    DEFAULT_BOOKS_LIMIT,
    LedgerDiscrepancy,
    LedgerLine,
    LedgerRun,
    LedgerSide,
    RunBooks,
    RunNotFoundError,
    as_bool,
    books_broken,
    books_of,
    json_array,
    json_list,
    ledger_books,
    ledger_lines,
    ledger_runs,
    ledger_runs_latest,
    like_prefix,
)
from tallyspan._store._store_schema import (
    BUSY_TIMEOUT_MS,
    LEDGER_ENTRIES,
    LEDGER_RECONCILIATIONS,
    MIGRATIONS,
    MIGRATIONS_TABLE,
    RUNS,
    SELF_STATS,
    SPANS,
    VIOLATIONS,
    connect,
)
from tallyspan._store._store_traces import (
    EntryData,
    LedgerData,
    TraceData,
    ViolationData,
    span_data,
)

__all__ = [
    "DEFAULT_BOOKS_LIMIT",
    "DEFAULT_COUNTER_PROCESSES",
    "DEFAULT_FAILING_TRACES",
    "ErrorCount",
    "FailingTrace",
    "LedgerDiscrepancy",
    "LedgerLine",
    "LedgerRun",
    "LedgerSide",
    "ModelUsage",
    "NewerStoreError",
    "NotAStoreError",
    "ProcessCounters",
    "Report",
    "RunBooks",
    "RunNotFoundError",
    "SpanRow",
    "StageSummary",
    "StoreNotFoundError",
    "StoreOverview",
    "ViolationCount",
    "ViolationDetail",
    "books_of",
    "count_traces",
    "failing_traces",
    "iter_traces",
    "ledger_books",
    "ledger_lines",
    "ledger_runs",
    "list_spans",
    "open_store",
    "process_counters",
    "report",
    "stage_summaries",
    "store_overview",
    "violations_by_stage_and_type",
]


class StoreNotFoundError(TallyspanError):
    """There is no store at the given path: nothing has been recorded there yet."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"No tallyspan store found at {path} — run your app with tallyspan.instrument() "
            "or `tallyspan demo` first"
        )
        self.path = path


class NotAStoreError(ConfigError):
    """The file is not a tallyspan store (another application's SQLite file, or no SQLite at all): it
    is refused before anything is written to it."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} is not a tallyspan store: {why}; it was left untouched")
        self.path = path


class NewerStoreError(ConfigError):
    """The store was written by a newer tallyspan, whose schema this one does not know."""

    def __init__(self, path: Path, unknown: int) -> None:
        super().__init__(
            f"{path} is a tallyspan store of a newer schema ({unknown} migration(s) this tallyspan does "
            "not know): upgrade tallyspan to read it; it was left untouched"
        )
        self.path = path


def _read_only(location: Path) -> sqlite3.Connection:
    """A connection that cannot write to ``location`` (SQLite's ``mode=ro``)."""
    db = sqlite3.connect(
        f"{location.absolute().as_uri()}?mode=ro",
        uri=True,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
    db.row_factory = sqlite3.Row
    return db


def _schema_state(location: Path) -> bool:
    """Whether the store at ``location`` needs migrating (it is ours, of an older schema), read
    without writing to it.

    Raises:
        NotAStoreError: not an SQLite file, or one without tallyspan's first migration recorded.
        NewerStoreError: it records migrations this tallyspan does not know.
    """
    db = _read_only(location)
    try:
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.OperationalError:
            raise  # locked, unreadable: not a verdict on what the file is
        except sqlite3.DatabaseError as error:
            raise NotAStoreError(location, "it is not an SQLite database") from error
        applied: list[str] = []
        if MIGRATIONS_TABLE in tables:
            applied = [row[0] for row in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")]
    finally:
        db.close()
    known = [function.__name__ for function in MIGRATIONS]
    if known[0] not in applied:
        others = len(tables - {MIGRATIONS_TABLE})
        why = (
            "an empty SQLite database"
            if not others
            else f"an SQLite database with {others} table(s) of another application and none of tallyspan's"
        )
        raise NotAStoreError(location, why)
    unknown = set(applied) - set(known)
    if unknown:
        raise NewerStoreError(location, len(unknown))
    return len(set(known) - set(applied)) > 0


@contextmanager
def open_store(path: str | os.PathLike[str], *, write: bool = False) -> Iterator[sqlite3.Connection]:
    """Open an existing store and close it after: read-only unless ``write`` (``tallyspan prune``).

    The file is first read without writing to it, and refused unless it is a tallyspan store of a
    schema this tallyspan knows; only a store of ours of an older schema is migrated (as the app would).

    Raises:
        StoreNotFoundError: there is no file at ``path``; reading never creates one.
        NotAStoreError: the file is not a tallyspan store (nothing is written to it).
        NewerStoreError: the store was written by a newer tallyspan.
    """
    location = Path(path)
    if not location.is_file():
        raise StoreNotFoundError(location)
    if _schema_state(location) and not write:
        connect(location).close()  # our own store, of an older schema: migrated, then read
    db = connect(location) if write else _read_only(location)
    try:
        yield db
    finally:
        db.close()


@dataclass(frozen=True)
class ModelUsage:
    """Model calls to one model (the response model, else the requested one) and their tokens."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class StageSummary:
    """Model calls made in one stage and how many of them violated its contract."""

    stage: str
    calls: int
    violating: int


@dataclass(frozen=True)
class ErrorCount:
    """Calls (and other spans) that ended with one ``error.type``: the call failed, as opposed to a bad
    deliverable."""

    error_type: str
    count: int


@dataclass(frozen=True)
class ViolationCount:
    """Calls (and other spans) with a violation of one type in one stage (stage None: outside any stage)."""

    stage: str | None
    type: str
    failure_class: str | None
    count: int


@dataclass(frozen=True)
class FailingTrace:
    """A trace to open in a tracing backend: violations below its runs, or books that do not balance."""

    trace_id: str
    run_name: str | None
    """Its first run: the run's name, else the agent's name, else the run span's name."""
    service_name: str | None
    start_unix_nano: int | None
    violating_calls: int
    violation_types: list[str]
    """Sorted, unique: the types of the violations stored for its spans and rolled up on its run spans."""
    balanced: bool | None
    """False when a run of the trace does not balance; None when none of its runs was reconciled."""
    discrepancy_types: list[str]
    """Sorted, unique ledger discrepancy types of its runs whose books do not balance or whose logging
    protocol was broken."""


DEFAULT_FAILING_TRACES = 10
"""Failing traces ``report`` names (unbalanced first, then the latest)."""


@dataclass(frozen=True)
class Report:
    """What ``tallyspan report`` shows: volumes, models, stages, errors, violations, failing traces and
    ledger status, each call counted once (see the module docstring)."""

    store: str
    since_unix_nano: int | None
    """Only spans that started then or later, and runs reconciled then or later; None: everything."""
    spans: int
    traces: int
    runs: int
    model_calls: int
    tool_calls: int
    violating_calls: int
    models: list[ModelUsage]
    stages: list[StageSummary]
    errors: list[ErrorCount]
    violations: list[ViolationCount]
    failing_traces: list[FailingTrace]
    """At most the limit asked for: traces whose books do not balance first, then the latest."""
    failing_trace_count: int
    """All the failing traces, listed or not."""
    ledger: list[LedgerRun]
    """Runs whose books do not balance first, then the latest."""
    unbalanced_runs: int
    """Runs of ``ledger`` whose books do not balance or whose logging protocol was broken."""
    losses: list[ProcessCounters]
    """What tallyspan itself dropped or failed on, per writing process (``tallyspan.stats()``), latest first."""


@dataclass(frozen=True)
class ViolationDetail:
    """One violation of a span: its type, failure class and a detail that never quotes the output."""

    type: str
    failure_class: str | None
    detail: str | None


@dataclass(frozen=True)
class SpanRow:
    """One span as ``tallyspan spans`` lists it (times in Unix nanoseconds, duration in milliseconds)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    operation: str | None
    model: str | None
    stage: str | None
    start_unix_nano: int | None
    duration_ms: float | None
    status_code: str
    error_type: str | None
    input_tokens: int | None
    output_tokens: int | None
    violation_types: list[str]
    failure_class: str | None
    violations: list[ViolationDetail] = field(default_factory=list)


_MODEL_OPERATIONS = tuple(sorted(semconv.MODEL_OPERATIONS | {semconv.OPERATION_EMBEDDINGS}))
_OPERATION_PARAMETERS: Final = {f"operation_{i}": name for i, name in enumerate(_MODEL_OPERATIONS)}
_MAX_NESTING: Final = 8
"""Model spans of one call nested deeper than this (a cycle in a damaged store) are cut there."""
_CALL_OF: Final = "_tallyspan_call_of"
_CALLS: Final = "_tallyspan_calls"
_UNITS: Final = "_tallyspan_units"


def _is_model(alias: str) -> str:
    return f"{alias}.operation IN ({', '.join(':' + key for key in _OPERATION_PARAMETERS)})"


@contextmanager
def _counted_once(db: sqlite3.Connection, since_unix_nano: int | None) -> Iterator[None]:
    """Materialise, for the queries inside, what is counted once (see the module docstring), as TEMP
    tables of this connection:

    - ``_CALL_OF``: every model span in scope and the outermost model span of its call;
    - ``_CALLS``: one row per model call (trace_id, call_span_id, model, tokens, stage, violating, error_type);
    - ``_UNITS``: every span in scope with its unit (its call's outermost span, else itself), the stage
      of its call, and the columns the report counts (operation, is_model, violation_count, error_type).
    """
    scope = {"since": since_unix_nano, **_OPERATION_PARAMETERS}
    try:
        # Each model span's call: its parent, when that is a model span of the same operation.
        db.execute(
            f"""CREATE TEMP TABLE {_CALL_OF} AS
                SELECT child.trace_id, child.span_id, COALESCE(parent.span_id, child.span_id) AS call_span_id
                FROM {SPANS} AS child LEFT JOIN {SPANS} AS parent
                    ON parent.trace_id = child.trace_id AND parent.span_id = child.parent_span_id
                    AND parent.operation = child.operation
                WHERE {_is_model("child")} AND (:since IS NULL OR child.start_unix_nano >= :since)""",
            scope,
        )
        db.execute(f"CREATE UNIQUE INDEX temp.{_CALL_OF}_span ON {_CALL_OF} (trace_id, span_id)")
        for _ in range(_MAX_NESTING):  # three instrumentations or more: walk up to the outermost span
            if not db.execute(
                f"""UPDATE {_CALL_OF} SET call_span_id = (
                        SELECT outer_span.call_span_id FROM {_CALL_OF} AS outer_span
                        WHERE outer_span.trace_id = {_CALL_OF}.trace_id
                          AND outer_span.span_id = {_CALL_OF}.call_span_id)
                    WHERE call_span_id != span_id AND EXISTS (
                        SELECT 1 FROM {_CALL_OF} AS outer_span
                        WHERE outer_span.trace_id = {_CALL_OF}.trace_id
                          AND outer_span.span_id = {_CALL_OF}.call_span_id
                          AND outer_span.call_span_id != outer_span.span_id)"""
            ).rowcount:
                break
        db.execute(
            f"""CREATE TEMP TABLE {_CALLS} AS
                SELECT c.trace_id, c.call_span_id,
                       COALESCE(MAX(s.response_model), MAX(s.request_model), '(unknown)') AS model,
                       MAX(s.input_tokens) AS input_tokens, MAX(s.output_tokens) AS output_tokens,
                       MAX(s.stage) AS stage, MAX(s.violation_count > 0) AS violating,
                       MAX(s.error_type) AS error_type
                FROM {_CALL_OF} AS c JOIN {SPANS} AS s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
                GROUP BY c.trace_id, c.call_span_id"""
        )
        db.execute(f"CREATE UNIQUE INDEX temp.{_CALLS}_call ON {_CALLS} (trace_id, call_span_id)")
        # A span nested in a call gets the stage of its call (the other instrumentation sets none).
        db.execute(
            f"""CREATE TEMP TABLE {_UNITS} AS
                SELECT s.trace_id, s.span_id, s.operation, s.violation_count, s.error_type,
                       c.call_span_id IS NOT NULL AS is_model, COALESCE(c.call_span_id, s.span_id) AS unit,
                       COALESCE(calls.stage, s.stage) AS stage
                FROM {SPANS} AS s
                LEFT JOIN {_CALL_OF} AS c ON c.trace_id = s.trace_id AND c.span_id = s.span_id
                LEFT JOIN {_CALLS} AS calls ON calls.trace_id = c.trace_id AND calls.call_span_id = c.call_span_id
                WHERE :since IS NULL OR s.start_unix_nano >= :since""",
            {"since": since_unix_nano},
        )
        db.execute(f"CREATE UNIQUE INDEX temp.{_UNITS}_span ON {_UNITS} (trace_id, span_id)")
        yield
    finally:
        for table in (_UNITS, _CALLS, _CALL_OF):
            db.execute(f"DROP TABLE IF EXISTS temp.{table}")


def _scalar(db: sqlite3.Connection, sql: str, parameters: Any = ()) -> int:
    row = db.execute(sql, parameters).fetchone()
    return int(row[0] or 0) if row is not None else 0


def report(
    db: sqlite3.Connection,
    store: str = "",
    *,
    since_unix_nano: int | None = None,
    failing_limit: int = DEFAULT_FAILING_TRACES,
) -> Report:
    """Summarise the store, or what it recorded since ``since_unix_nano``; each call counted once.

    Args:
        db: the open store.
        store: where it is, as the report names it.
        since_unix_nano: only spans that started then or later, and runs reconciled then or later.
        failing_limit: failing traces named at most.
    """
    with _counted_once(db, since_unix_nano):
        models = [
            ModelUsage(row["model"], row["calls"], row["input_tokens"] or 0, row["output_tokens"] or 0)
            for row in db.execute(
                f"""SELECT model, COUNT(*) AS calls, SUM(input_tokens) AS input_tokens,
                           SUM(output_tokens) AS output_tokens
                    FROM {_CALLS} GROUP BY model ORDER BY calls DESC, model"""
            )
        ]
        errors = [
            ErrorCount(row["error_type"], row["n"])
            for row in db.execute(
                f"""SELECT error_type, COUNT(*) AS n FROM (
                        SELECT error_type FROM {_CALLS} WHERE error_type IS NOT NULL
                        UNION ALL
                        SELECT error_type FROM {_UNITS} WHERE error_type IS NOT NULL AND NOT is_model)
                    GROUP BY error_type ORDER BY n DESC, error_type"""
            )
        ]
        ledger = ledger_runs_latest(db, since_unix_nano)
        failing = _failing_traces(db, since_unix_nano, ledger)
        return Report(
            store=store,
            since_unix_nano=since_unix_nano,
            spans=_scalar(db, f"SELECT COUNT(*) FROM {_UNITS}"),
            traces=_scalar(db, f"SELECT COUNT(DISTINCT trace_id) FROM {_UNITS}"),
            runs=_scalar(
                db,
                f"SELECT COUNT(*) FROM {RUNS} WHERE :since IS NULL OR start_unix_nano >= :since",
                {"since": since_unix_nano},
            ),
            model_calls=_scalar(db, f"SELECT COUNT(*) FROM {_CALLS}"),
            tool_calls=_scalar(
                db, f"SELECT COUNT(*) FROM {_UNITS} WHERE operation = ?", (semconv.OPERATION_EXECUTE_TOOL,)
            ),
            violating_calls=_scalar(
                db,
                f"""SELECT (SELECT COUNT(*) FROM {_CALLS} WHERE violating)
                    + (SELECT COUNT(*) FROM {_UNITS} WHERE violation_count > 0 AND NOT is_model)""",
            ),
            models=models,
            stages=_stage_summaries(db),
            errors=errors,
            violations=_violations_by_stage_and_type(db),
            failing_traces=failing[: max(0, failing_limit)],
            failing_trace_count=len(failing),
            ledger=ledger,
            unbalanced_runs=sum(1 for run in ledger if books_broken(run)),
            losses=process_counters(db),
        )


def stage_summaries(db: sqlite3.Connection, *, since_unix_nano: int | None = None) -> list[StageSummary]:
    """Model calls per stage and how many of them violated its contract, by stage name."""
    with _counted_once(db, since_unix_nano):
        return _stage_summaries(db)


def _stage_summaries(db: sqlite3.Connection) -> list[StageSummary]:
    return [
        StageSummary(row["stage"], row["calls"], row["violating"] or 0)
        for row in db.execute(
            f"""SELECT stage, COUNT(*) AS calls, SUM(violating) AS violating
                FROM {_CALLS} WHERE stage IS NOT NULL GROUP BY stage ORDER BY stage"""
        )
    ]


def violations_by_stage_and_type(
    db: sqlite3.Connection, *, since_unix_nano: int | None = None
) -> list[ViolationCount]:
    """Calls (other spans: each itself) with a violation, per (stage, type), most frequent first."""
    with _counted_once(db, since_unix_nano):
        return _violations_by_stage_and_type(db)


def _violations_by_stage_and_type(db: sqlite3.Connection) -> list[ViolationCount]:
    return [
        ViolationCount(row["stage"], row["type"], row["failure_class"], row["n"])
        for row in db.execute(
            f"""SELECT units.stage AS stage, v.type AS type, MAX(v.failure_class) AS failure_class,
                       COUNT(DISTINCT units.trace_id || '/' || units.unit) AS n
                FROM {VIOLATIONS} AS v
                JOIN {_UNITS} AS units ON units.trace_id = v.trace_id AND units.span_id = v.span_id
                GROUP BY units.stage, v.type ORDER BY n DESC, units.stage, v.type"""
        )
    ]


def failing_traces(db: sqlite3.Connection, *, since_unix_nano: int | None = None) -> list[FailingTrace]:
    """Traces with violations (stored for their spans, or rolled up on their run spans) or with runs
    whose books do not balance: unbalanced ones first, then the latest first.

    Args:
        db: the open store.
        since_unix_nano: only traces whose spans started then or later (runs reconciled then or later).
    """
    with _counted_once(db, since_unix_nano):
        return _failing_traces(db, since_unix_nano, ledger_runs_latest(db, since_unix_nano))


def _failing_traces(
    db: sqlite3.Connection, since_unix_nano: int | None, ledger: Sequence[LedgerRun]
) -> list[FailingTrace]:
    violating: dict[str, tuple[int, set[str]]] = {}
    for row in db.execute(
        f"""SELECT units.trace_id AS trace_id, COUNT(DISTINCT units.unit) AS calls,
                   json_group_array(DISTINCT v.type) AS types
            FROM {VIOLATIONS} AS v
            JOIN {_UNITS} AS units ON units.trace_id = v.trace_id AND units.span_id = v.span_id
            GROUP BY units.trace_id"""
    ):
        violating[row["trace_id"]] = (row["calls"], set(json_list(row["types"])))
    # The run roll-up: a run whose failing spans the store lost (dropped, pruned) still says so.
    for row in db.execute(
        f"""SELECT run.trace_id AS trace_id, json_extract(s.attributes, :path) AS types
            FROM {RUNS} AS run JOIN {SPANS} AS s ON s.trace_id = run.trace_id AND s.span_id = run.span_id
            WHERE (:since IS NULL OR s.start_unix_nano >= :since)
              AND json_extract(s.attributes, :path) IS NOT NULL""",
        {"since": since_unix_nano, "path": f'$."{semconv.RUN_VIOLATION_TYPES}"'},
    ):
        calls, types = violating.get(row["trace_id"], (0, set()))
        violating[row["trace_id"]] = (calls, types | set(json_list(row["types"])))
    books: dict[str, list[LedgerRun]] = {}
    for run in ledger:
        books.setdefault(run.trace_id, []).append(run)
    failing_ids = set(violating) | {
        trace_id for trace_id, runs in books.items() if any(books_broken(run) for run in runs)
    }
    if not failing_ids:
        return []
    ids = json.dumps(sorted(failing_ids))
    starts = {
        row["trace_id"]: (row["start"], row["service"])
        for row in db.execute(
            f"""SELECT trace_id, MIN(start_unix_nano) AS start, MAX(service_name) AS service FROM {SPANS}
                WHERE trace_id IN (SELECT value FROM json_each(:ids)) GROUP BY trace_id""",
            {"ids": ids},
        )
    }
    names = {
        row["trace_id"]: row["run_name"]
        for row in db.execute(
            f"""SELECT trace_id, COALESCE(run_name, agent_name, name) AS run_name, MIN(start_unix_nano)
                FROM {RUNS} WHERE trace_id IN (SELECT value FROM json_each(:ids)) GROUP BY trace_id""",
            {"ids": ids},
        )
    }
    traces: list[FailingTrace] = []
    for trace_id in failing_ids:
        calls, types = violating.get(trace_id, (0, set()))
        runs = books.get(trace_id, [])
        start, service = starts.get(trace_id, (None, None))
        traces.append(
            FailingTrace(
                trace_id=trace_id,
                run_name=names.get(trace_id) or next((run.run_name for run in runs if run.run_name), None),
                service_name=service,
                start_unix_nano=start,
                violating_calls=calls,
                violation_types=sorted(types),
                balanced=None if not runs else all(run.balanced is not False for run in runs),
                discrepancy_types=sorted(
                    {kind for run in runs if books_broken(run) for kind in run.discrepancy_types}
                ),
            )
        )
    traces.sort(
        key=lambda trace: (trace.balanced is False, trace.start_unix_nano or 0, trace.trace_id), reverse=True
    )
    return traces


def list_spans(
    db: sqlite3.Connection,
    trace_id: str | None = None,
    limit: int | None = None,
    *,
    violated: bool = False,
    stages: Sequence[str] = (),
    types: Sequence[str] = (),
    since_unix_nano: int | None = None,
) -> list[SpanRow]:
    """The spans that pass every filter given, in start order, each with its violations' details.

    Args:
        db: the open store.
        trace_id: only this trace (its id or a prefix, any case).
        limit: only the latest ``limit`` of them; None or 0: all.
        violated: only spans with violations of their own.
        stages: only spans in one of these stages.
        types: only spans with a violation of one of these types.
        since_unix_nano: only spans that started then or later.
    """
    where: list[str] = []
    parameters: dict[str, Any] = {}
    if trace_id:
        where.append("s.trace_id LIKE :trace ESCAPE '\\'")
        parameters["trace"] = like_prefix(trace_id.strip().lower())
    if violated:
        where.append("s.violation_count > 0")
    if stages:
        where.append("s.stage IN (SELECT value FROM json_each(:stages))")
        parameters["stages"] = json.dumps(list(stages))
    if types:
        where.append(
            f"""EXISTS (SELECT 1 FROM {VIOLATIONS} AS v WHERE v.trace_id = s.trace_id
                AND v.span_id = s.span_id AND v.type IN (SELECT value FROM json_each(:types)))"""
        )
        parameters["types"] = json.dumps(list(types))
    if since_unix_nano is not None:
        where.append("s.start_unix_nano >= :since")
        parameters["since"] = since_unix_nano
    latest = f"LIMIT {int(limit)}" if limit is not None and limit > 0 else ""
    rows = db.execute(
        f"""SELECT * FROM (
                SELECT s.*, s.rowid AS _order,
                       (SELECT json_group_array(json_array(v.type, v.failure_class, v.detail))
                        FROM (SELECT * FROM {VIOLATIONS} AS v
                              WHERE v.trace_id = s.trace_id AND v.span_id = s.span_id ORDER BY v.id) AS v
                       ) AS _violations
                FROM {SPANS} AS s {"WHERE " + " AND ".join(where) if where else ""}
                ORDER BY s.start_unix_nano DESC, s.rowid DESC {latest})
            ORDER BY start_unix_nano, _order""",
        parameters,
    ).fetchall()
    return [_span_row(row) for row in rows]


def _span_row(row: sqlite3.Row) -> SpanRow:
    return SpanRow(
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_span_id=row["parent_span_id"],
        name=row["name"],
        operation=row["operation"],
        model=row["response_model"] or row["request_model"],
        stage=row["stage"],
        start_unix_nano=row["start_unix_nano"],
        duration_ms=None if row["duration_ns"] is None else round(row["duration_ns"] / 1e6, 3),
        status_code=row["status_code"],
        error_type=row["error_type"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        violation_types=json_list(row["violation_types"]),
        failure_class=row["failure_class"],
        violations=[
            ViolationDetail(str(kind), failure_class, detail)
            for kind, failure_class, detail in json_array(row["_violations"])
        ],
    )


# --- whole traces for the dataset exports (``tallyspan export``) -------------------------------------


def _traces_in_window(since: int | None, until: int | None) -> tuple[str, tuple[Any, ...]]:
    having = ["1"]
    parameters: list[Any] = []
    if since is not None:
        having.append("MAX(COALESCE(end_unix_nano, start_unix_nano, 0)) >= ?")
        parameters.append(since)
    if until is not None:
        having.append("MIN(COALESCE(start_unix_nano, 0)) < ?")
        parameters.append(until)
    return f"FROM {SPANS} GROUP BY trace_id HAVING {' AND '.join(having)}", tuple(parameters)


def count_traces(db: sqlite3.Connection, since: int | None = None, until: int | None = None) -> int:
    """How many traces have a span in ``[since, until)`` (Unix nanoseconds; None: unbounded)."""
    window, parameters = _traces_in_window(since, until)
    return _scalar(db, f"SELECT COUNT(*) FROM (SELECT trace_id {window})", parameters)


def iter_traces(
    db: sqlite3.Connection, since: int | None = None, until: int | None = None
) -> Iterator[TraceData]:
    """Every trace with a span in ``[since, until)``, one at a time, in start order: its spans with their
    violations, and the books (latest reconciliation and entries) of each run reconciled in it.

    Memory holds one trace at a time, whatever the size of the store.
    """
    window, parameters = _traces_in_window(since, until)
    trace_ids = db.execute(f"SELECT trace_id {window} ORDER BY MIN(start_unix_nano), trace_id", parameters)
    for (trace_id,) in trace_ids:
        yield _trace_data(db, trace_id)


def _trace_data(db: sqlite3.Connection, trace_id: str) -> TraceData:
    violations: dict[str, list[ViolationData]] = {}
    for row in db.execute(
        f"SELECT span_id, type, failure_class, detail FROM {VIOLATIONS} WHERE trace_id = ? ORDER BY id",
        (trace_id,),
    ):
        violations.setdefault(row["span_id"], []).append(
            ViolationData(row["type"], row["failure_class"], row["detail"])
        )
    runs = {row[0] for row in db.execute(f"SELECT span_id FROM {RUNS} WHERE trace_id = ?", (trace_id,))}
    trace = TraceData(trace_id)
    for row in db.execute(
        f"SELECT * FROM {SPANS} WHERE trace_id = ? ORDER BY start_unix_nano, rowid", (trace_id,)
    ):
        try:
            attributes = json.loads(row["attributes"] or "{}")
        except ValueError:  # a damaged row still shows with its columns
            attributes = {}
        trace.spans.append(
            span_data(
                trace_id=trace_id,
                span_id=row["span_id"],
                parent_span_id=row["parent_span_id"],
                name=row["name"],
                start_unix_nano=row["start_unix_nano"],
                end_unix_nano=row["end_unix_nano"],
                status_code=row["status_code"],
                attributes=attributes if isinstance(attributes, dict) else {},
                is_run=row["span_id"] in runs,
                violations=tuple(violations.get(row["span_id"], ())),
            )
        )
    entries: dict[str, list[EntryData]] = {}
    for row in db.execute(
        f"SELECT * FROM {LEDGER_ENTRIES} WHERE trace_id = ? ORDER BY seq, rowid", (trace_id,)
    ):
        entries.setdefault(row["run_span_id"], []).append(
            EntryData(
                row["side"],
                row["seq"],
                row["call_id"],
                row["tool_name"],
                row["outcome"],
                row["span_id"],
                row["time_unix_nano"],
            )
        )
    for row in db.execute(
        f"SELECT * FROM {LEDGER_RECONCILIATIONS} WHERE trace_id = ? ORDER BY time_unix_nano, rowid",
        (trace_id,),
    ):  # a run reconciled twice keeps its latest books
        trace.ledgers[row["run_span_id"]] = LedgerData(
            run_span_id=row["run_span_id"],
            run_name=row["run_name"],
            balanced=as_bool(row["balanced"]),
            protocol_ok=as_bool(row["protocol_ok"]),
            discrepancies=tuple(
                Discrepancy(str(item.get("type")), item.get("call_id"), str(item.get("detail", "")))
                for item in json_array(row["discrepancies"])
                if isinstance(item, dict)
            ),
            entries=tuple(entries.get(row["run_span_id"], ())),
            time_unix_nano=row["time_unix_nano"],
        )
    if not any(span.content for span in trace.spans):
        trace.ledgers = {run: _unobserved_claims(books) for run, books in trace.ledgers.items()}
    return trace


def _unobserved_claims(books: LedgerData) -> LedgerData:
    """``books`` with each claimed tool name and call id that names nothing observed in the run read as
    ``unobserved``, in its entries and its discrepancies (their call ids and details).

    The store is the user's own disk: with content capture off it keeps the identifiers the agent claimed
    (SECURITY.md), for ``tallyspan ledger``. What ``tallyspan export`` writes is made to leave the machine
    (datasets to share, to train on), so it gives them as the OTLP export does: only names observed.
    """
    observed = [entry for entry in books.entries if entry.side == semconv.LEDGER_SIDE_OBSERVED]
    known = (
        {entry.tool_name for entry in observed} | {entry.call_id for entry in observed} | {DEFAULT_LOG_TOOL}
    )
    hidden = {
        value
        for entry in books.entries
        if entry.side != semconv.LEDGER_SIDE_OBSERVED
        for value in (entry.tool_name, entry.call_id)
        if value is not None and value not in known and value != semconv.LEDGER_UNOBSERVED
    }
    if not hidden:
        return books
    placeholder = semconv.LEDGER_UNOBSERVED
    # A hidden value stands in a detail as a whole word ("X claimed succeeded", "claimed as 'X'").
    word = re.compile(
        r"(?<![\w.:-])(?:"
        + "|".join(re.escape(value) for value in sorted(hidden, key=len, reverse=True))
        + r")(?![\w.:-])"
    )
    return dataclasses.replace(
        books,
        entries=tuple(
            dataclasses.replace(
                entry,
                tool_name=placeholder if entry.tool_name in hidden else entry.tool_name,
                call_id=placeholder if entry.call_id in hidden else entry.call_id,
            )
            if entry.side != semconv.LEDGER_SIDE_OBSERVED
            else entry
            for entry in books.entries
        ),
        discrepancies=tuple(
            dataclasses.replace(
                found,
                call_id=placeholder if found.call_id in hidden else found.call_id,
                detail=word.sub(placeholder, found.detail),
            )
            for found in books.discrepancies
        ),
    )


# --- what ``tallyspan doctor`` reads -----------------------------------------------------------------


@dataclass(frozen=True)
class ProcessCounters:
    """The counters of ``tallyspan.stats()`` one process last recorded in the store: drops
    (``dropped.*``) and errors of ours it swallowed (``errors.*``); only those above zero."""

    pid: int
    service_name: str | None
    started_unix_nano: int
    time_unix_nano: int
    """When it recorded them last (the store records them with its writes and at each flush)."""
    counts: dict[str, int]


@dataclass(frozen=True)
class StoreOverview:
    """What a store holds, for ``tallyspan doctor``."""

    spans: int
    traces: int
    runs: int
    reconciled_runs: int
    first_span_unix_nano: int | None
    last_span_unix_nano: int | None
    stages: list[StageSummary]
    counters: list[ProcessCounters]
    """The processes that recorded counters above zero, latest first."""


DEFAULT_COUNTER_PROCESSES = 5
"""Processes whose counters ``store_overview`` returns (the latest)."""


def store_overview(db: sqlite3.Connection, *, processes: int = DEFAULT_COUNTER_PROCESSES) -> StoreOverview:
    """Volumes, time range, stages seen and the counters of the latest ``processes`` that recorded any."""
    first, last = db.execute(f"SELECT MIN(start_unix_nano), MAX(start_unix_nano) FROM {SPANS}").fetchone()
    return StoreOverview(
        spans=_scalar(db, f"SELECT COUNT(*) FROM {SPANS}"),
        traces=_scalar(db, f"SELECT COUNT(DISTINCT trace_id) FROM {SPANS}"),
        runs=_scalar(db, f"SELECT COUNT(*) FROM {RUNS}"),
        reconciled_runs=_scalar(
            db, f"SELECT COUNT(*) FROM (SELECT DISTINCT trace_id, run_span_id FROM {LEDGER_RECONCILIATIONS})"
        ),
        first_span_unix_nano=first,
        last_span_unix_nano=last,
        stages=stage_summaries(db),
        counters=process_counters(db, processes),
    )


def process_counters(
    db: sqlite3.Connection, processes: int = DEFAULT_COUNTER_PROCESSES
) -> list[ProcessCounters]:
    """The counters above zero of the latest ``processes`` processes that recorded any, latest first."""
    latest = db.execute(
        f"""SELECT pid, started_unix_nano, MAX(service_name) AS service, MAX(time_unix_nano) AS time
            FROM {SELF_STATS} WHERE value > 0 GROUP BY pid, started_unix_nano
            ORDER BY time DESC LIMIT ?""",
        (processes,),
    ).fetchall()
    found: list[ProcessCounters] = []
    for process in latest:
        counts = {
            row["key"]: row["value"]
            for row in db.execute(
                f"""SELECT key, value FROM {SELF_STATS}
                    WHERE pid = ? AND started_unix_nano = ? AND value > 0 ORDER BY key""",
                (process["pid"], process["started_unix_nano"]),
            )
        }
        found.append(
            ProcessCounters(
                process["pid"], process["service"], process["started_unix_nano"], process["time"], counts
            )
        )
    return found
