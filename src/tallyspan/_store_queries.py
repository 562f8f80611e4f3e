"""Read side of the embedded store: plain dataclasses for the ``tallyspan`` command and for scripts.

Usage::

    from tallyspan._store_queries import open_store, report, list_spans

    with open_store(".tallyspan/tallyspan.db") as db:
        print(report(db).model_calls)

Every query takes an open connection (see ``open_store``) and returns frozen dataclasses of plain
values (str, int, bool, None, lists), so ``dataclasses.asdict`` turns them into JSON directly.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tallyspan import semconv
from tallyspan._datasets._model import (
    EntryData,
    LedgerData,
    TraceData,
    ViolationData,
    span_data,
)
from tallyspan._errors import TallyspanError
from tallyspan._ledger import Discrepancy
from tallyspan._store_schema import LEDGER_ENTRIES, LEDGER_RECONCILIATIONS, RUNS, SPANS, VIOLATIONS, connect

__all__ = [
    "DEFAULT_BOOKS_LIMIT",
    "ErrorCount",
    "LedgerDiscrepancy",
    "LedgerLine",
    "LedgerRun",
    "LedgerSide",
    "ModelUsage",
    "Report",
    "RunBooks",
    "RunNotFoundError",
    "SpanRow",
    "StageSummary",
    "StoreNotFoundError",
    "ViolationCount",
    "count_traces",
    "iter_traces",
    "ledger_books",
    "ledger_runs",
    "list_spans",
    "open_store",
    "prune",
    "report",
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


@contextmanager
def open_store(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """Open an existing store (migrating it if it is older than this tallyspan), and close it after.

    Raises:
        StoreNotFoundError: there is no file at ``path``; reading never creates one.
    """
    location = Path(path)
    if not location.is_file():
        raise StoreNotFoundError(location)
    db = connect(location)
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
    """Spans that ended with one ``error.type`` (the call failed, as opposed to a bad deliverable)."""

    error_type: str
    count: int


@dataclass(frozen=True)
class ViolationCount:
    """Violations of one type in one stage (stage None: spans outside any stage)."""

    stage: str | None
    type: str
    failure_class: str | None
    count: int


@dataclass(frozen=True)
class LedgerRun:
    """The state of one run's books, from its reconciliation record (the one stored source of it)."""

    trace_id: str
    run_span_id: str
    run_name: str | None
    balanced: bool | None
    protocol_ok: bool | None
    discrepancy_types: list[str]
    observed_count: int | None
    claimed_count: int | None


@dataclass(frozen=True)
class Report:
    """What ``tallyspan report`` shows: volumes, models, stages, errors, violations, ledger status."""

    store: str
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
    ledger: list[LedgerRun]
    unbalanced_runs: int
    """Runs of ``ledger`` whose books do not balance or whose logging protocol was broken."""


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


_MODEL_OPERATIONS = tuple(sorted(semconv.MODEL_OPERATIONS | {semconv.OPERATION_EMBEDDINGS}))
_IN_MODEL_OPERATIONS = f"operation IN ({', '.join('?' for _ in _MODEL_OPERATIONS)})"


def _scalar(db: sqlite3.Connection, sql: str, parameters: tuple[Any, ...] = ()) -> int:
    row = db.execute(sql, parameters).fetchone()
    return int(row[0] or 0) if row is not None else 0


def _bool(value: object) -> bool | None:
    return None if value is None else bool(value)


def _list(value: object) -> list[str]:
    if not isinstance(value, str) or not value:
        return []
    try:
        parsed = json.loads(value)
    except ValueError:  # written by an older or foreign writer: show it rather than fail the report
        return [value]
    return [str(item) for item in parsed] if isinstance(parsed, list) else [str(parsed)]


def report(db: sqlite3.Connection, store: str = "") -> Report:
    """Summarise everything in the store."""
    models = [
        ModelUsage(row["model"], row["calls"], row["input_tokens"] or 0, row["output_tokens"] or 0)
        for row in db.execute(
            f"""SELECT COALESCE(response_model, request_model, '(unknown)') AS model, COUNT(*) AS calls,
                       SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens
                FROM {SPANS} WHERE {_IN_MODEL_OPERATIONS} GROUP BY model ORDER BY calls DESC, model""",
            _MODEL_OPERATIONS,
        )
    ]
    stages = [
        StageSummary(row["stage"], row["calls"], row["violating"] or 0)
        for row in db.execute(
            f"""SELECT stage, COUNT(*) AS calls, SUM(violation_count > 0) AS violating
                FROM {SPANS} WHERE stage IS NOT NULL GROUP BY stage ORDER BY stage"""
        )
    ]
    errors = [
        ErrorCount(row["error_type"], row["n"])
        for row in db.execute(
            f"""SELECT error_type, COUNT(*) AS n FROM {SPANS} WHERE error_type IS NOT NULL
                GROUP BY error_type ORDER BY n DESC, error_type"""
        )
    ]
    ledger = ledger_runs(db)
    return Report(
        store=store,
        spans=_scalar(db, f"SELECT COUNT(*) FROM {SPANS}"),
        traces=_scalar(db, f"SELECT COUNT(DISTINCT trace_id) FROM {SPANS}"),
        runs=_scalar(db, f"SELECT COUNT(*) FROM {RUNS}"),
        model_calls=_scalar(
            db, f"SELECT COUNT(*) FROM {SPANS} WHERE {_IN_MODEL_OPERATIONS}", _MODEL_OPERATIONS
        ),
        tool_calls=_scalar(
            db, f"SELECT COUNT(*) FROM {SPANS} WHERE operation = ?", (semconv.OPERATION_EXECUTE_TOOL,)
        ),
        violating_calls=_scalar(db, f"SELECT COUNT(*) FROM {SPANS} WHERE violation_count > 0"),
        models=models,
        stages=stages,
        errors=errors,
        violations=violations_by_stage_and_type(db),
        ledger=ledger,
        unbalanced_runs=sum(1 for run in ledger if run.balanced is False or run.protocol_ok is False),
    )


def violations_by_stage_and_type(db: sqlite3.Connection) -> list[ViolationCount]:
    """Count violations per (stage, type), most frequent first."""
    return [
        ViolationCount(row["stage"], row["type"], row["failure_class"], row["n"])
        for row in db.execute(
            f"""SELECT stage, type, MAX(failure_class) AS failure_class, COUNT(*) AS n FROM {VIOLATIONS}
                GROUP BY stage, type ORDER BY n DESC, stage, type"""
        )
    ]


def ledger_runs(db: sqlite3.Connection) -> list[LedgerRun]:
    """Every reconciled run, from its latest reconciliation record, in time order."""
    runs: dict[tuple[str, str], LedgerRun] = {}
    for row in db.execute(f"SELECT * FROM {LEDGER_RECONCILIATIONS} ORDER BY time_unix_nano, rowid"):
        runs[(row["trace_id"], row["run_span_id"])] = _ledger_run(row)
    return list(runs.values())


def _ledger_run(row: sqlite3.Row) -> LedgerRun:
    return LedgerRun(
        trace_id=row["trace_id"],
        run_span_id=row["run_span_id"],
        run_name=row["run_name"],
        balanced=_bool(row["balanced"]),
        protocol_ok=_bool(row["protocol_ok"]),
        discrepancy_types=_list(row["discrepancy_types"]),
        observed_count=row["observed_count"],
        claimed_count=row["claimed_count"],
    )


# --- the books of each run (``tallyspan ledger``) ----------------------------------------------------

DEFAULT_BOOKS_LIMIT = 5
"""Runs whose books ``ledger_books`` returns without a run id (the latest ones)."""

_OBSERVED = "observed"


@dataclass(frozen=True)
class LedgerSide:
    """One entry of one column of the books."""

    seq: int
    call_id: str | None
    tool_name: str | None
    outcome: str | None
    summary: str | None


@dataclass(frozen=True)
class LedgerLine:
    """One line of the books: an observed call and the claim about it; either may be missing."""

    observed: LedgerSide | None
    claimed: LedgerSide | None


@dataclass(frozen=True)
class LedgerDiscrepancy:
    """One finding of the reconciliation."""

    type: str
    call_id: str | None
    detail: str


@dataclass(frozen=True)
class RunBooks(LedgerRun):
    """One reconciled run: its balance, its discrepancies and its books."""

    time_unix_nano: int | None = None
    discrepancies: list[LedgerDiscrepancy] = field(default_factory=list)
    lines: list[LedgerLine] = field(default_factory=list)


class RunNotFoundError(TallyspanError):
    """No reconciled run has the id asked for."""


def ledger_books(
    db: sqlite3.Connection, run_id: str | None = None, limit: int = DEFAULT_BOOKS_LIMIT
) -> list[RunBooks]:
    """The books of the runs whose run span id or trace id starts with ``run_id``, else of the latest
    ``limit`` reconciled runs, in time order.

    Raises:
        RunNotFoundError: no reconciled run matches ``run_id``.
    """
    if run_id:
        prefix = _like_prefix(run_id.strip().lower())
        rows = db.execute(
            f"""SELECT * FROM {LEDGER_RECONCILIATIONS}
                WHERE run_span_id LIKE ? ESCAPE '\\' OR trace_id LIKE ? ESCAPE '\\'
                ORDER BY time_unix_nano, rowid""",
            (prefix, prefix),
        ).fetchall()
        if not rows:
            raise RunNotFoundError(
                f"No reconciled run has the id {run_id!r} (a run span id or trace id, or a prefix)"
            )
    else:
        rows = db.execute(
            f"""SELECT * FROM (SELECT *, rowid AS _order FROM {LEDGER_RECONCILIATIONS}
                ORDER BY time_unix_nano DESC, rowid DESC LIMIT ?) ORDER BY time_unix_nano, _order""",
            (limit,),
        ).fetchall()
    return [_books(db, row) for row in rows]


def _books(db: sqlite3.Connection, row: sqlite3.Row) -> RunBooks:
    entries = db.execute(
        f"""SELECT side, seq, call_id, tool_name, outcome, summary FROM {LEDGER_ENTRIES}
            WHERE trace_id = ? AND run_span_id = ? ORDER BY seq, rowid""",
        (row["trace_id"], row["run_span_id"]),
    ).fetchall()
    discrepancies = [
        LedgerDiscrepancy(str(item.get("type")), item.get("call_id"), str(item.get("detail", "")))
        for item in _json_array(row["discrepancies"])
        if isinstance(item, dict)
    ]
    return RunBooks(
        **vars(_ledger_run(row)),
        time_unix_nano=row["time_unix_nano"],
        discrepancies=discrepancies,
        lines=ledger_lines(entries),
    )


def _json_array(raw: object) -> list[Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:  # a hand-edited or damaged row shows as empty rather than failing the command
        return []
    return value if isinstance(value, list) else []


def ledger_lines(entries: Sequence[sqlite3.Row]) -> list[LedgerLine]:
    """Put each claim beside the call it names (by call id, else the earliest unclaimed call of its
    tool); a claim for no call gets a line of its own. For display only: the reconciliation is
    authoritative."""
    observed: list[LedgerSide] = []
    claims: list[LedgerSide] = []
    for entry in entries:
        side = LedgerSide(
            entry["seq"], entry["call_id"], entry["tool_name"], entry["outcome"], entry["summary"] or None
        )
        (observed if entry["side"] == _OBSERVED else claims).append(side)
    # Calls not yet claimed, latest first so pop() yields the earliest: by call id, and by tool.
    by_id: dict[str, list[int]] = {}
    by_tool: dict[str | None, list[int]] = {}
    for i in range(len(observed) - 1, -1, -1):
        if observed[i].call_id is not None:
            by_id.setdefault(str(observed[i].call_id), []).append(i)
        by_tool.setdefault(observed[i].tool_name, []).append(i)
    beside: dict[int, LedgerSide] = {}
    alone: list[LedgerSide] = []
    for claim in claims:
        candidates = (
            by_id.get(claim.call_id, []) if claim.call_id is not None else by_tool.get(claim.tool_name, [])
        )
        while candidates and candidates[-1] in beside:
            candidates.pop()
        if candidates:
            beside[candidates.pop()] = claim
        else:
            alone.append(claim)
    lines = [LedgerLine(call, beside.get(i)) for i, call in enumerate(observed)]
    lines.extend(LedgerLine(None, claim) for claim in alone)
    lines.sort(key=lambda line: (line.observed or line.claimed).seq)  # type: ignore[union-attr]
    return lines


def list_spans(
    db: sqlite3.Connection, trace_id: str | None = None, limit: int | None = None
) -> list[SpanRow]:
    """The spans in start order: of one trace (``trace_id`` or a unique prefix of it), else the latest ``limit``."""
    where, parameters = "", ()  # type: tuple[str, tuple[Any, ...]]
    if trace_id:
        where, parameters = "WHERE trace_id LIKE ? ESCAPE '\\'", (_like_prefix(trace_id.lower()),)
    latest = f"LIMIT {int(limit)}" if limit is not None and limit > 0 else ""
    rows = db.execute(
        f"""SELECT * FROM (SELECT * FROM {SPANS} {where} ORDER BY start_unix_nano DESC, rowid DESC {latest})
            ORDER BY start_unix_nano, rowid""",
        parameters,
    ).fetchall()
    return [
        SpanRow(
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
            violation_types=_list(row["violation_types"]),
            failure_class=row["failure_class"],
        )
        for row in rows
    ]


def _like_prefix(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%"


def prune(db: sqlite3.Connection, before_unix_nano: int) -> dict[str, int]:
    """Delete every trace whose last span ended before ``before_unix_nano``; rows deleted per table.

    Whole traces go, so a run never loses half its books; ledger rows of traces with no spans in the
    store (written by the ledger sink alone) go by their own time. One transaction.
    """
    with db:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS _prune_traces (trace_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM _prune_traces")
        db.execute(
            f"INSERT INTO _prune_traces SELECT trace_id FROM {SPANS} GROUP BY trace_id"
            " HAVING max(coalesce(end_unix_nano, start_unix_nano, 0)) < ?",
            (before_unix_nano,),
        )
        for table in (LEDGER_ENTRIES, LEDGER_RECONCILIATIONS):
            db.execute(
                f"INSERT OR IGNORE INTO _prune_traces SELECT DISTINCT trace_id FROM {table}"
                f" WHERE time_unix_nano < ? AND trace_id NOT IN (SELECT trace_id FROM {SPANS})",
                (before_unix_nano,),
            )
        deleted = {
            table: db.execute(
                f"DELETE FROM {table} WHERE trace_id IN (SELECT trace_id FROM _prune_traces)"
            ).rowcount
            for table in (SPANS, RUNS, VIOLATIONS, LEDGER_ENTRIES, LEDGER_RECONCILIATIONS)
        }
        db.execute("DROP TABLE _prune_traces")
    return deleted


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
            balanced=_bool(row["balanced"]),
            protocol_ok=_bool(row["protocol_ok"]),
            discrepancies=tuple(
                Discrepancy(str(item.get("type")), item.get("call_id"), str(item.get("detail", "")))
                for item in _json_array(row["discrepancies"])
                if isinstance(item, dict)
            ),
            entries=tuple(entries.get(row["run_span_id"], ())),
            time_unix_nano=row["time_unix_nano"],
        )
    return trace
