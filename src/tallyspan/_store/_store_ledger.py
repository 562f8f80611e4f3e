"""The ledger as the embedded store holds it: each run's balance and both columns of its books.

Read through ``tallyspan._store._store_queries``, which re-exports what is public here (``ledger_runs``,
``ledger_books``, ``ledger_lines`` and their dataclasses); the report uses ``ledger_runs_latest``.
Also the row helpers every store read shares (JSON lists, booleans, id prefixes).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tallyspan._errors import TallyspanError
from tallyspan._store._store_schema import LEDGER_ENTRIES, LEDGER_RECONCILIATIONS

__all__ = [
    "DEFAULT_BOOKS_LIMIT",
    "LedgerDiscrepancy",
    "LedgerLine",
    "LedgerRun",
    "LedgerSide",
    "RunBooks",
    "RunNotFoundError",
    "as_bool",
    "books_broken",
    "books_of",
    "json_array",
    "json_list",
    "ledger_books",
    "ledger_lines",
    "ledger_runs",
    "ledger_runs_latest",
    "like_prefix",
]


def as_bool(value: object) -> bool | None:
    """An SQLite integer as a bool; NULL stays None."""
    return None if value is None else bool(value)


def json_list(value: object) -> list[str]:
    """A JSON array column as a list of strings (a value that is not JSON as a list of itself)."""
    if not isinstance(value, str) or not value:
        return []
    try:
        parsed = json.loads(value)
    except ValueError:  # written by an older or foreign writer: show it rather than fail the report
        return [value]
    return [str(item) for item in parsed] if isinstance(parsed, list) else [str(parsed)]


def like_prefix(text: str) -> str:
    """``text%`` for ``LIKE ... ESCAPE '\\'``, with the wildcards in ``text`` escaped."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%"


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


def books_broken(run: LedgerRun) -> bool:
    """True when the run's books do not balance or its logging protocol was broken."""
    return run.balanced is False or run.protocol_ok is False


def ledger_runs(db: sqlite3.Connection) -> list[LedgerRun]:
    """Every reconciled run, from its latest reconciliation record, in time order."""
    runs: dict[tuple[str, str], LedgerRun] = {}
    for row in db.execute(f"SELECT * FROM {LEDGER_RECONCILIATIONS} ORDER BY time_unix_nano, rowid"):
        runs[(row["trace_id"], row["run_span_id"])] = _ledger_run(row)
    return list(runs.values())


def ledger_runs_latest(db: sqlite3.Connection, since_unix_nano: int | None) -> list[LedgerRun]:
    """The runs reconciled since ``since_unix_nano``: those whose books do not balance first, then the latest."""
    latest: dict[tuple[str, str], tuple[int, LedgerRun]] = {}
    for row in db.execute(
        f"""SELECT * FROM {LEDGER_RECONCILIATIONS} WHERE :since IS NULL OR time_unix_nano >= :since
            ORDER BY time_unix_nano, rowid""",
        {"since": since_unix_nano},
    ):
        latest[(row["trace_id"], row["run_span_id"])] = (row["time_unix_nano"] or 0, _ledger_run(row))
    ordered = sorted(latest.values(), key=lambda item: (books_broken(item[1]), item[0]), reverse=True)
    return [run for _, run in ordered]


def _ledger_run(row: sqlite3.Row) -> LedgerRun:
    return LedgerRun(
        trace_id=row["trace_id"],
        run_span_id=row["run_span_id"],
        run_name=row["run_name"],
        balanced=as_bool(row["balanced"]),
        protocol_ok=as_bool(row["protocol_ok"]),
        discrepancy_types=json_list(row["discrepancy_types"]),
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
        unbalanced: only runs whose books do not balance or whose logging protocol was broken (what
            ``books_broken`` says, and the report counts).

    Raises:
        RunNotFoundError: no reconciled run matches ``run_id``.
    """
    where, parameters = ["1"], {"limit": limit}  # type: list[str], dict[str, Any]
    if unbalanced:  # as books_broken(): the report counts a broken protocol as books that do not balance
        where.append("(balanced = 0 OR protocol_ok = 0)")
    if run_id:
        where.append("(run_span_id LIKE :prefix ESCAPE '\\' OR trace_id LIKE :prefix ESCAPE '\\')")
        parameters["prefix"] = like_prefix(run_id.strip().lower())
    rows = db.execute(
        f"""SELECT * FROM {LEDGER_RECONCILIATIONS} WHERE {" AND ".join(where)}
            ORDER BY time_unix_nano DESC, rowid DESC {"" if run_id else "LIMIT :limit"}""",
        parameters,
    ).fetchall()
    if run_id and not rows:
        which = "unbalanced run" if unbalanced else "reconciled run"
        raise RunNotFoundError(f"No {which} has the id {run_id!r} (a run span id or trace id, or a prefix)")
    return [_books(db, row) for row in rows]


def books_of(db: sqlite3.Connection, runs: Sequence[LedgerRun]) -> list[RunBooks]:
    """The latest books of each of ``runs`` (as ``ledger_runs_latest`` lists them), in their order; a run
    no longer in the store is left out."""
    found: list[RunBooks] = []
    for run in runs:
        row = db.execute(
            f"""SELECT * FROM {LEDGER_RECONCILIATIONS} WHERE trace_id = ? AND run_span_id = ?
                ORDER BY time_unix_nano DESC, rowid DESC LIMIT 1""",
            (run.trace_id, run.run_span_id),
        ).fetchone()
        if row is not None:
            found.append(_books(db, row))
    return found


def _books(db: sqlite3.Connection, row: sqlite3.Row) -> RunBooks:
    entries = db.execute(
        f"""SELECT side, seq, call_id, tool_name, outcome, summary FROM {LEDGER_ENTRIES}
            WHERE trace_id = ? AND run_span_id = ? ORDER BY seq, rowid""",
        (row["trace_id"], row["run_span_id"]),
    ).fetchall()
    discrepancies = [
        LedgerDiscrepancy(str(item.get("type")), item.get("call_id"), str(item.get("detail", "")))
        for item in json_array(row["discrepancies"])
        if isinstance(item, dict)
    ]
    return RunBooks(
        **vars(_ledger_run(row)),
        time_unix_nano=row["time_unix_nano"],
        discrepancies=discrepancies,
        lines=ledger_lines(entries),
    )


def json_array(raw: object) -> list[Any]:
    """A JSON array column as a list; anything else (damaged, hand-edited) as an empty one."""
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
