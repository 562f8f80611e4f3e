"""``tallyspan spans``: recorded spans with their violations and why, filtered.

::

    tallyspan spans --violated --since 2h            # what failed in the last two hours, and why
    tallyspan spans --stage weekly_report --type too_short
    tallyspan spans --trace 4bf92f35                 # one trace (an id or a prefix)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import click

from tallyspan._store._store_queries import SpanRow, list_spans, open_store
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state
from tallyspan.cli._time import since_option

__all__ = ["DEFAULT_LIMIT", "SpanFilters", "command", "format_spans", "load_spans"]

DEFAULT_LIMIT = 200
"""Spans listed without ``--trace`` (the latest ones)."""


@dataclass(frozen=True)
class SpanFilters:
    """What ``tallyspan spans`` keeps: every filter given must pass."""

    trace_id: str | None = None
    violated: bool = False
    stages: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    since_unix_nano: int | None = None


def load_spans(
    db_path: Path, filters: SpanFilters | None = None, limit: int | None = DEFAULT_LIMIT
) -> list[SpanRow]:
    """The spans that pass ``filters`` in start order: all of one trace, else the latest ``limit``.

    Raises:
        StoreNotFoundError: there is no store at ``db_path``.
    """
    wanted = filters or SpanFilters()
    with open_store(db_path) as db:
        return list_spans(
            db,
            trace_id=wanted.trace_id,
            limit=None if wanted.trace_id else limit,
            violated=wanted.violated,
            stages=wanted.stages,
            types=wanted.types,
            since_unix_nano=wanted.since_unix_nano,
        )


def _clock(start_unix_nano: int | None) -> str | None:
    if start_unix_nano is None:
        return None
    return datetime.fromtimestamp(start_unix_nano / 1e9, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def format_spans(spans: list[SpanRow]) -> str:
    """The spans as an aligned table per trace; below the table, each violation and its detail."""
    if not spans:
        return "No spans found."
    lines: list[str] = []
    for trace_id in dict.fromkeys(span.trace_id for span in spans):
        in_trace = [span for span in spans if span.trace_id == trace_id]
        if lines:
            lines.append("")
        lines.append(f"trace {trace_id}")
        lines.append(
            table(
                ["start (UTC)", "span", "name", "stage", "ms", "status", "tokens in/out", "violations"],
                [
                    [
                        _clock(span.start_unix_nano),
                        span.span_id,
                        span.name,
                        span.stage,
                        span.duration_ms,
                        span.status_code,
                        None if span.input_tokens is None else f"{span.input_tokens}/{span.output_tokens}",
                        span.violation_types or span.error_type,
                    ]
                    for span in in_trace
                ],
            )
        )
        for span in in_trace:
            if span.violations:
                lines.append(f"  why {span.span_id} ({span.name}):")
                lines.extend(
                    f"    {violation.type} ({violation.failure_class or 'unknown class'}): {violation.detail or '-'}"
                    for violation in span.violations
                )
    return "\n".join(lines)


@click.command("spans")
@click.option("--trace", "trace_id", metavar="ID", help="Only this trace (its id or a prefix).")
@click.option(
    "--violated", is_flag=True, help="Only spans with violations of their own (model calls, not their runs)."
)
@click.option(
    "--stage", "stages", multiple=True, metavar="STAGE", help="Only spans in this stage; repeatable."
)
@click.option(
    "--type", "types", multiple=True, metavar="TYPE",
    help="Only spans with a violation of this type (too_short, not_japanese, ...); repeatable.",
)  # fmt: skip
@since_option
@click.option(
    "--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
    help="Latest spans listed without --trace.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(
    state: CliState,
    trace_id: str | None,
    violated: bool,
    stages: tuple[str, ...],
    types: tuple[str, ...],
    since_unix_nano: int | None,
    limit: int,
    as_json: bool,
) -> None:
    """List recorded spans with their stage, status, tokens, and each violation with its detail."""
    filters = SpanFilters(trace_id, violated, stages, types, since_unix_nano)
    emit("spans", load_spans(state.db_path, filters, limit), as_json=as_json, text=format_spans)
