"""``tallyspan report``: calls, models, stages, errors, violations by stage and type, ledger status."""

from __future__ import annotations

from pathlib import Path

import click

from tallyspan._store_queries import Report, open_store, report
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state

__all__ = ["TRACE_PREFIX", "build_report", "command", "format_report"]

TRACE_PREFIX = 12
"""Characters of a trace id shown in text; ``tallyspan spans --trace`` accepts such a prefix."""


def build_report(db_path: Path) -> Report:
    """Read the summary of the store at ``db_path``.

    Raises:
        StoreNotFoundError: there is no store there.
    """
    with open_store(db_path) as db:
        return report(db, store=str(db_path))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def format_report(result: Report) -> str:
    """The report as readable text."""
    lines = [
        f"tallyspan report — {result.store}",
        f"  {_count(result.spans, 'span')} in {_count(result.traces, 'trace')}, {_count(result.runs, 'run')}; "
        f"{_count(result.model_calls, 'model call')} ({result.violating_calls} violating), "
        f"{_count(result.tool_calls, 'tool call')}",
        "",
        "Models",
        table(
            ["model", "calls", "input tokens", "output tokens"],
            [[m.model, m.calls, m.input_tokens, m.output_tokens] for m in result.models],
        ),
        "",
        "Stages",
        table(["stage", "calls", "violating"], [[s.stage, s.calls, s.violating] for s in result.stages]),
        "",
        "Errors",
        table(["error type", "spans"], [[e.error_type, e.count] for e in result.errors]),
        "",
        "Violations by stage and type",
        table(
            ["stage", "type", "failure class", "count"],
            [[v.stage, v.type, v.failure_class, v.count] for v in result.violations],
        ),
        "",
        "Ledger",
        table(
            ["trace", "run", "balanced", "protocol ok", "observed", "claimed", "discrepancies"],
            [
                [
                    r.trace_id[:TRACE_PREFIX],
                    r.run_name,
                    r.balanced,
                    r.protocol_ok,
                    r.observed_count,
                    r.claimed_count,
                    r.discrepancy_types,
                ]
                for r in result.ledger
            ],
        ),
    ]
    if result.ledger:
        verdict = (
            "all books balance"
            if result.unbalanced_runs == 0
            else f"{result.unbalanced_runs} of {len(result.ledger)} runs do not balance"
        )
        lines.append(f"  {verdict}")
    return "\n".join(lines)


@click.command("report")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(state: CliState, as_json: bool) -> None:
    """Summarise the store: calls, models, stages, errors, violations, ledger status."""
    emit("report", build_report(state.db_path), as_json=as_json, text=format_report)
