"""Read side of the embedded store: plain dataclasses for the ``tallyspan`` command and for scripts.

Usage::

    from tallyspan._store_queries import open_store, report, list_spans

    with open_store(".tallyspan/tallyspan.db") as db:
        print(report(db).model_calls)

Every query takes an open connection (see ``open_store``) and returns frozen dataclasses of plain
values (str, int, bool, None, lists), so ``dataclasses.asdict`` turns them into JSON directly.

One call, one count. Two instrumentations of the same client (ours and
opentelemetry-instrumentation-openai-v2, or a LangChain model span over the OpenAI one) each make a
model span for one call, the second nested in the first. So a model span whose parent is a model span
of the same operation is that same call: the report counts the outermost span of such a chain as the
call, and takes its model, tokens (the largest count any span of the chain has), stage, error and
violations from the whole chain, once. Every other span counts for itself.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tallyspan import semconv
from tallyspan._errors import TallyspanError
from tallyspan._store_schema import (
    LEDGER_ENTRIES,
    LEDGER_RECONCILIATIONS,
    RUNS,
    SELF_STATS,
    SPANS,
    VIOLATIONS,
    connect,
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
    "failing_traces",
    "ledger_books",
    "ledger_runs",
    "list_spans",
    "open_store",
    "process_counters",
    "prune",
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
_IS_MODEL: Final = f"operation IN ({', '.join(':' + key for key in _OPERATION_PARAMETERS)})"
_MAX_NESTING: Final = 8
"""Model spans of one call nested deeper than this (a cycle in a damaged store) are cut there."""

# Named parameters: :since (Unix nanoseconds or NULL) and the model operations. ``scoped`` is the spans
# the report covers; ``call_of`` maps every model span to the outermost model span of its call (SQLite
# takes the bare column ``top`` from the row of MAX(depth)); ``calls`` is one row per call; ``units`` maps
# every scoped span to what is counted once: its call, or itself.
_WITH_CALLS: Final = f"""
WITH RECURSIVE
scoped AS (SELECT * FROM {SPANS} WHERE :since IS NULL OR start_unix_nano >= :since),
up (trace_id, span_id, top, depth) AS (
    SELECT trace_id, span_id, span_id, 0 FROM scoped WHERE {_IS_MODEL}
    UNION ALL
    SELECT up.trace_id, up.span_id, parent.span_id, up.depth + 1
    FROM up
    JOIN {SPANS} AS child ON child.trace_id = up.trace_id AND child.span_id = up.top
    JOIN {SPANS} AS parent ON parent.trace_id = child.trace_id AND parent.span_id = child.parent_span_id
        AND parent.operation = child.operation
    WHERE up.depth < {_MAX_NESTING}
),
call_of AS (SELECT trace_id, span_id, top AS call_span_id, MAX(depth) FROM up GROUP BY trace_id, span_id),
calls AS (
    SELECT call_of.trace_id, call_of.call_span_id,
           COALESCE(MAX(s.response_model), MAX(s.request_model), '(unknown)') AS model,
           MAX(s.input_tokens) AS input_tokens, MAX(s.output_tokens) AS output_tokens,
           MAX(s.stage) AS stage, MAX(s.violation_count > 0) AS violating, MAX(s.error_type) AS error_type
    FROM call_of JOIN {SPANS} AS s ON s.trace_id = call_of.trace_id AND s.span_id = call_of.span_id
    GROUP BY call_of.trace_id, call_of.call_span_id
),
units AS (
    SELECT scoped.trace_id, scoped.span_id, COALESCE(call_of.call_span_id, scoped.span_id) AS unit,
           COALESCE(calls.stage, scoped.stage) AS stage
    FROM scoped
    LEFT JOIN call_of ON call_of.trace_id = scoped.trace_id AND call_of.span_id = scoped.span_id
    LEFT JOIN calls ON calls.trace_id = call_of.trace_id AND calls.call_span_id = call_of.call_span_id
)
"""


def _parameters(since_unix_nano: int | None) -> dict[str, Any]:
    return {"since": since_unix_nano, **_OPERATION_PARAMETERS}


def _scalar(db: sqlite3.Connection, sql: str, parameters: Any = ()) -> int:
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
    parameters = _parameters(since_unix_nano)
    models = [
        ModelUsage(row["model"], row["calls"], row["input_tokens"] or 0, row["output_tokens"] or 0)
        for row in db.execute(
            f"""{_WITH_CALLS}
                SELECT model, COUNT(*) AS calls, SUM(input_tokens) AS input_tokens,
                       SUM(output_tokens) AS output_tokens
                FROM calls GROUP BY model ORDER BY calls DESC, model""",
            parameters,
        )
    ]
    errors = [
        ErrorCount(row["error_type"], row["n"])
        for row in db.execute(
            f"""{_WITH_CALLS}
                SELECT error_type, COUNT(*) AS n FROM (
                    SELECT error_type FROM calls WHERE error_type IS NOT NULL
                    UNION ALL
                    SELECT error_type FROM scoped WHERE error_type IS NOT NULL AND NOT ({_IS_MODEL}))
                GROUP BY error_type ORDER BY n DESC, error_type""",
            parameters,
        )
    ]
    ledger = _ledger_runs_for_report(db, since_unix_nano)
    failing = failing_traces(db, since_unix_nano=since_unix_nano, ledger=ledger)
    return Report(
        store=store,
        since_unix_nano=since_unix_nano,
        spans=_scalar(db, f"{_WITH_CALLS} SELECT COUNT(*) FROM scoped", parameters),
        traces=_scalar(db, f"{_WITH_CALLS} SELECT COUNT(DISTINCT trace_id) FROM scoped", parameters),
        runs=_scalar(
            db,
            f"SELECT COUNT(*) FROM {RUNS} WHERE :since IS NULL OR start_unix_nano >= :since",
            {"since": since_unix_nano},
        ),
        model_calls=_scalar(db, f"{_WITH_CALLS} SELECT COUNT(*) FROM calls", parameters),
        tool_calls=_scalar(
            db,
            f"{_WITH_CALLS} SELECT COUNT(*) FROM scoped WHERE operation = :tool",
            {**parameters, "tool": semconv.OPERATION_EXECUTE_TOOL},
        ),
        violating_calls=_scalar(
            db,
            f"""{_WITH_CALLS} SELECT (SELECT COUNT(*) FROM calls WHERE violating)
                + (SELECT COUNT(*) FROM scoped WHERE violation_count > 0 AND NOT ({_IS_MODEL}))""",
            parameters,
        ),
        models=models,
        stages=stage_summaries(db, since_unix_nano=since_unix_nano),
        errors=errors,
        violations=violations_by_stage_and_type(db, since_unix_nano=since_unix_nano),
        failing_traces=failing[: max(0, failing_limit)],
        failing_trace_count=len(failing),
        ledger=ledger,
        unbalanced_runs=sum(1 for run in ledger if _books_broken(run)),
    )


def _books_broken(run: LedgerRun) -> bool:
    return run.balanced is False or run.protocol_ok is False


def stage_summaries(db: sqlite3.Connection, *, since_unix_nano: int | None = None) -> list[StageSummary]:
    """Model calls per stage and how many of them violated its contract, by stage name."""
    return [
        StageSummary(row["stage"], row["calls"], row["violating"] or 0)
        for row in db.execute(
            f"""{_WITH_CALLS}
                SELECT stage, COUNT(*) AS calls, SUM(violating) AS violating
                FROM calls WHERE stage IS NOT NULL GROUP BY stage ORDER BY stage""",
            _parameters(since_unix_nano),
        )
    ]


def violations_by_stage_and_type(
    db: sqlite3.Connection, *, since_unix_nano: int | None = None
) -> list[ViolationCount]:
    """Calls (other spans: each itself) with a violation, per (stage, type), most frequent first."""
    return [
        ViolationCount(row["stage"], row["type"], row["failure_class"], row["n"])
        for row in db.execute(
            f"""{_WITH_CALLS}
                SELECT units.stage AS stage, v.type AS type, MAX(v.failure_class) AS failure_class,
                       COUNT(DISTINCT units.trace_id || '/' || units.unit) AS n
                FROM {VIOLATIONS} AS v
                JOIN units ON units.trace_id = v.trace_id AND units.span_id = v.span_id
                GROUP BY units.stage, v.type ORDER BY n DESC, units.stage, v.type""",
            _parameters(since_unix_nano),
        )
    ]


def failing_traces(
    db: sqlite3.Connection, *, since_unix_nano: int | None = None, ledger: Sequence[LedgerRun] | None = None
) -> list[FailingTrace]:
    """Traces with violations (stored for their spans, or rolled up on their run spans) or with runs
    whose books do not balance: unbalanced ones first, then the latest first.

    Args:
        db: the open store.
        since_unix_nano: only traces whose spans started then or later (runs reconciled then or later).
        ledger: the reconciled runs, if already read (``ledger_runs``).
    """
    parameters = _parameters(since_unix_nano)
    violating: dict[str, tuple[int, set[str]]] = {}
    for row in db.execute(
        f"""{_WITH_CALLS}
            SELECT units.trace_id AS trace_id, COUNT(DISTINCT units.unit) AS calls,
                   json_group_array(DISTINCT v.type) AS types
            FROM {VIOLATIONS} AS v JOIN units ON units.trace_id = v.trace_id AND units.span_id = v.span_id
            GROUP BY units.trace_id""",
        parameters,
    ):
        violating[row["trace_id"]] = (row["calls"], set(_list(row["types"])))
    # The run roll-up: a run whose failing spans the store lost (dropped, pruned) still says so.
    for row in db.execute(
        f"""SELECT run.trace_id AS trace_id, json_extract(s.attributes, :path) AS types
            FROM {RUNS} AS run JOIN {SPANS} AS s ON s.trace_id = run.trace_id AND s.span_id = run.span_id
            WHERE (:since IS NULL OR s.start_unix_nano >= :since) AND json_extract(s.attributes, :path) IS NOT NULL""",
        {"since": since_unix_nano, "path": f'$."{semconv.RUN_VIOLATION_TYPES}"'},
    ):
        calls, types = violating.get(row["trace_id"], (0, set()))
        violating[row["trace_id"]] = (calls, types | set(_list(row["types"])))
    books: dict[str, list[LedgerRun]] = {}
    for run in ledger if ledger is not None else _ledger_runs_for_report(db, since_unix_nano):
        books.setdefault(run.trace_id, []).append(run)
    failing_ids = set(violating) | {
        trace_id for trace_id, runs in books.items() if any(_books_broken(run) for run in runs)
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
                    {kind for run in runs if _books_broken(run) for kind in run.discrepancy_types}
                ),
            )
        )
    traces.sort(key=lambda trace: (trace.balanced is False, trace.start_unix_nano or 0), reverse=True)
    return traces


def ledger_runs(db: sqlite3.Connection) -> list[LedgerRun]:
    """Every reconciled run, from its latest reconciliation record, in time order."""
    runs: dict[tuple[str, str], LedgerRun] = {}
    for row in db.execute(f"SELECT * FROM {LEDGER_RECONCILIATIONS} ORDER BY time_unix_nano, rowid"):
        runs[(row["trace_id"], row["run_span_id"])] = _ledger_run(row)
    return list(runs.values())


def _ledger_runs_for_report(db: sqlite3.Connection, since_unix_nano: int | None) -> list[LedgerRun]:
    """The runs reconciled since ``since_unix_nano``: those whose books do not balance first, then the latest."""
    latest: dict[tuple[str, str], tuple[int, LedgerRun]] = {}
    for row in db.execute(
        f"""SELECT * FROM {LEDGER_RECONCILIATIONS} WHERE :since IS NULL OR time_unix_nano >= :since
            ORDER BY time_unix_nano, rowid""",
        {"since": since_unix_nano},
    ):
        latest[(row["trace_id"], row["run_span_id"])] = (row["time_unix_nano"] or 0, _ledger_run(row))
    ordered = sorted(latest.values(), key=lambda item: (_books_broken(item[1]), item[0]), reverse=True)
    return [run for _, run in ordered]


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
    db: sqlite3.Connection,
    run_id: str | None = None,
    limit: int = DEFAULT_BOOKS_LIMIT,
    *,
    unbalanced: bool = False,
) -> list[RunBooks]:
    """The books of the runs whose run span id or trace id starts with ``run_id``, else of the latest
    ``limit`` reconciled runs; latest first.

    Args:
        db: the open store.
        run_id: a run span id or trace id, or a prefix of one.
        limit: runs returned at most without ``run_id``.
        unbalanced: only runs whose books do not balance.

    Raises:
        RunNotFoundError: no reconciled run matches ``run_id``.
    """
    where, parameters = ["1"], {"limit": limit}  # type: list[str], dict[str, Any]
    if unbalanced:
        where.append("balanced = 0")
    if run_id:
        where.append("(run_span_id LIKE :prefix ESCAPE '\\' OR trace_id LIKE :prefix ESCAPE '\\')")
        parameters["prefix"] = _like_prefix(run_id.strip().lower())
    rows = db.execute(
        f"""SELECT * FROM {LEDGER_RECONCILIATIONS} WHERE {" AND ".join(where)}
            ORDER BY time_unix_nano DESC, rowid DESC {"" if run_id else "LIMIT :limit"}""",
        parameters,
    ).fetchall()
    if run_id and not rows:
        which = "unbalanced run" if unbalanced else "reconciled run"
        raise RunNotFoundError(f"No {which} has the id {run_id!r} (a run span id or trace id, or a prefix)")
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
        parameters["trace"] = _like_prefix(trace_id.strip().lower())
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
        violation_types=_list(row["violation_types"]),
        failure_class=row["failure_class"],
        violations=[
            ViolationDetail(str(kind), failure_class, detail)
            for kind, failure_class, detail in _json_array(row["_violations"])
        ],
    )


def _like_prefix(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%"


def prune(db: sqlite3.Connection, before_unix_nano: int, *, dry_run: bool = False) -> dict[str, int]:
    """Delete every trace whose last span ended before ``before_unix_nano``; rows deleted per table.

    Whole traces go, so a run never loses half its books; ledger rows of traces with no spans in the
    store (written by the ledger sink alone) go by their own time, and so do the counters processes
    recorded. One transaction. With ``dry_run`` nothing is deleted: the counts are those that would be.
    """
    before = min(max(0, before_unix_nano), _MAX_SQLITE_INTEGER)
    with db:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS _prune_traces (trace_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM _prune_traces")
        db.execute(
            f"INSERT INTO _prune_traces SELECT trace_id FROM {SPANS} GROUP BY trace_id"
            " HAVING max(coalesce(end_unix_nano, start_unix_nano, 0)) < ?",
            (before,),
        )
        for table in (LEDGER_ENTRIES, LEDGER_RECONCILIATIONS):
            db.execute(
                f"INSERT OR IGNORE INTO _prune_traces SELECT DISTINCT trace_id FROM {table}"
                f" WHERE time_unix_nano < ? AND trace_id NOT IN (SELECT trace_id FROM {SPANS})",
                (before,),
            )
        verb = "SELECT COUNT(*)" if dry_run else "DELETE"
        deleted = {
            table: _affected(
                db, f"{verb} FROM {table} WHERE trace_id IN (SELECT trace_id FROM _prune_traces)"
            )
            for table in (SPANS, RUNS, VIOLATIONS, LEDGER_ENTRIES, LEDGER_RECONCILIATIONS)
        }
        deleted[SELF_STATS] = _affected(db, f"{verb} FROM {SELF_STATS} WHERE time_unix_nano < ?", (before,))
        db.execute("DROP TABLE _prune_traces")
    return deleted


_MAX_SQLITE_INTEGER: Final = (1 << 63) - 1


def _affected(db: sqlite3.Connection, sql: str, parameters: tuple[Any, ...] = ()) -> int:
    """Rows a DELETE removed, or the count a SELECT COUNT(*) gave."""
    cursor = db.execute(sql, parameters)
    if sql.startswith("SELECT"):
        return int(cursor.fetchone()[0])
    return cursor.rowcount


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
