"""``tallyspan ledger [--run ID] [--json]``: the books of agent runs, both columns side by side.

The left column is what the instrumentation observed, the right one what the agent logged; each
claim sits on the line of the call it names (by call id, else the earliest unclaimed call of its tool),
and a claim for no call gets a line of its own. Below: the balance and the reconciliation's
discrepancies, as stored by the ledger sink.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from tallyspan._errors import TallyspanError
from tallyspan._store_queries import open_store
from tallyspan._store_schema import LEDGER_ENTRIES, LEDGER_RECONCILIATIONS
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state

__all__ = [
    "DEFAULT_LIMIT",
    "LedgerDiscrepancy",
    "LedgerLine",
    "LedgerSide",
    "RunBooks",
    "command",
    "format_books",
    "load_books",
]

DEFAULT_LIMIT = 5
"""Runs shown without ``--run`` (the latest ones)."""

_OBSERVED = "observed"


@dataclass(frozen=True)
class LedgerSide:
    """One entry of one column."""

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
class RunBooks:
    """One reconciled run: its balance, its discrepancies and its books."""

    trace_id: str
    run_span_id: str
    run_name: str | None
    balanced: bool
    protocol_ok: bool
    discrepancy_types: list[str]
    observed_count: int
    claimed_count: int
    time_unix_nano: int | None
    discrepancies: list[LedgerDiscrepancy] = field(default_factory=list)
    lines: list[LedgerLine] = field(default_factory=list)


class RunNotFoundError(TallyspanError):
    """No reconciled run has the id given to ``--run``."""


def load_books(db_path: Path, run_id: str | None = None, limit: int = DEFAULT_LIMIT) -> list[RunBooks]:
    """The books of the runs whose run span id or trace id starts with ``run_id``, else of the latest ``limit``.

    Raises:
        StoreNotFoundError: there is no store at ``db_path``.
        RunNotFoundError: no reconciled run matches ``run_id``.
    """
    with open_store(db_path) as db:
        if run_id:
            prefix = run_id.strip().lower()
            rows = [
                row
                for row in db.execute(
                    f"SELECT * FROM {LEDGER_RECONCILIATIONS} ORDER BY time_unix_nano, rowid"
                )
                if str(row["run_span_id"]).startswith(prefix) or str(row["trace_id"]).startswith(prefix)
            ]
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
        for item in _json_list(row["discrepancies"])
        if isinstance(item, dict)
    ]
    return RunBooks(
        trace_id=row["trace_id"],
        run_span_id=row["run_span_id"],
        run_name=row["run_name"],
        balanced=bool(row["balanced"]),
        protocol_ok=bool(row["protocol_ok"]),
        discrepancy_types=[str(t) for t in _json_list(row["discrepancy_types"])],
        observed_count=row["observed_count"] or 0,
        claimed_count=row["claimed_count"] or 0,
        time_unix_nano=row["time_unix_nano"],
        discrepancies=discrepancies,
        lines=_lines(entries),
    )


def _json_list(raw: object) -> list[Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:  # a hand-edited or damaged row shows as empty rather than failing the command
        return []
    return value if isinstance(value, list) else []


def _lines(entries: list[sqlite3.Row]) -> list[LedgerLine]:
    """Put each claim beside the call it names, for display only (the reconciliation is authoritative)."""
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


def _cells(side: LedgerSide | None) -> list[object]:
    if side is None:
        return [None, None, None]
    return [side.call_id, side.tool_name, side.outcome]


def format_books(runs: list[RunBooks]) -> str:
    """The runs' books as text: a header, the two columns side by side, the discrepancies."""
    if not runs:
        return "No reconciled runs found."
    blocks: list[str] = []
    for run in runs:
        balance = "balanced" if run.balanced else "UNBALANCED"
        protocol = "protocol ok" if run.protocol_ok else "protocol broken"
        header = (
            f"run {run.run_name or '-'}  span {run.run_span_id}  trace {run.trace_id}\n"
            f"  {balance}, {protocol}: {run.observed_count} observed, {run.claimed_count} claimed"
        )
        books = table(
            ["observed call", "tool", "outcome", "|", "claimed call", "tool", "outcome", "summary"],
            [
                [
                    *_cells(line.observed),
                    "|",
                    *_cells(line.claimed),
                    line.claimed.summary if line.claimed else None,
                ]
                for line in run.lines
            ],
        )
        found = (
            table(
                ["discrepancy", "call", "detail"], [[d.type, d.call_id, d.detail] for d in run.discrepancies]
            )
            if run.discrepancies
            else "  no discrepancies"
        )
        blocks.append(f"{header}\n{books}\n{found}")
    return "\n\n".join(blocks)


@click.command("ledger")
@click.option(
    "--run", "run_id", metavar="ID", help="Only this run (its run span id or trace id, or a prefix)."
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
    help="Latest runs shown without --run.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(state: CliState, run_id: str | None, limit: int, as_json: bool) -> None:
    """Show the double-entry ledger: observed tool calls beside the agent's own log, and the balance."""
    emit("ledger", load_books(state.db_path, run_id, limit), as_json=as_json, text=format_books)
