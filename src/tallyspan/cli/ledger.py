"""``tallyspan ledger [--run ID] [--unbalanced] [--json]``: the books of agent runs, latest first, both
columns side by side.

The left column is what the instrumentation observed, the right one what the agent logged; each
claim sits on the line of the call it names (by call id, else the earliest unclaimed call of its tool),
and a claim for no call gets a line of its own. Below: the balance and the reconciliation's
discrepancies, as stored by the ledger sink.
"""

from __future__ import annotations

from pathlib import Path

import click

from tallyspan._store._store_queries import (
    DEFAULT_BOOKS_LIMIT,
    LedgerDiscrepancy,
    LedgerLine,
    LedgerSide,
    RunBooks,
    RunNotFoundError,
    ledger_books,
    open_store,
)
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state

__all__ = [
    "DEFAULT_LIMIT",
    "LedgerDiscrepancy",
    "LedgerLine",
    "LedgerSide",
    "RunBooks",
    "RunNotFoundError",
    "command",
    "format_books",
    "load_books",
]

DEFAULT_LIMIT = DEFAULT_BOOKS_LIMIT
"""Runs shown without ``--run`` (the latest ones)."""


def load_books(
    db_path: Path, run_id: str | None = None, limit: int = DEFAULT_LIMIT, *, unbalanced: bool = False
) -> list[RunBooks]:
    """The books of the runs whose run span id or trace id starts with ``run_id``, else of the latest
    ``limit``; latest first; with ``unbalanced``, only runs whose books do not balance or whose logging
    protocol was broken (the runs ``tallyspan report`` counts as not balancing).

    Raises:
        StoreNotFoundError: there is no store at ``db_path``.
        RunNotFoundError: no reconciled run matches ``run_id``.
    """
    with open_store(db_path) as db:
        return ledger_books(db, run_id, limit, unbalanced=unbalanced)


def _cells(side: LedgerSide | None) -> list[object]:
    if side is None:
        return [None, None, None]
    return [side.call_id, side.tool_name, side.outcome]


def _number(count: int | None) -> str:
    # Unknown for a run whose balance came from its span (a store written before m002): no counts.
    return "-" if count is None else str(count)


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
            f"  {balance}, {protocol}: {_number(run.observed_count)} observed, "
            f"{_number(run.claimed_count)} claimed"
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
    "--unbalanced", is_flag=True,
    help="Only runs whose books do not balance or whose logging protocol was broken (as report counts them).",
)  # fmt: skip
@click.option(
    "--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
    help="Latest runs shown without --run.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(state: CliState, run_id: str | None, unbalanced: bool, limit: int, as_json: bool) -> None:
    """Show the double-entry ledger, latest run first: observed tool calls beside the agent's own log."""
    books = load_books(state.db_path, run_id, limit, unbalanced=unbalanced)
    text = format_books if books or not unbalanced else lambda _: "No unbalanced runs found."
    emit("ledger", books, as_json=as_json, text=text)
