"""``tallyspan spans [--trace ID]``: the spans of one trace, or the latest ones, with their violations."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from tallyspan._store_queries import SpanRow, list_spans, open_store
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state

__all__ = ["DEFAULT_LIMIT", "command", "format_spans", "load_spans"]

DEFAULT_LIMIT = 200
"""Spans listed without ``--trace`` (the latest ones)."""


def load_spans(
    db_path: Path, trace_id: str | None = None, limit: int | None = DEFAULT_LIMIT
) -> list[SpanRow]:
    """The spans of ``trace_id`` (or a prefix of it), else the latest ``limit`` spans, in start order.

    Raises:
        StoreNotFoundError: there is no store at ``db_path``.
    """
    with open_store(db_path) as db:
        return list_spans(db, trace_id=trace_id, limit=None if trace_id else limit)


def _clock(start_unix_nano: int | None) -> str | None:
    if start_unix_nano is None:
        return None
    return datetime.fromtimestamp(start_unix_nano / 1e9, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def format_spans(spans: list[SpanRow]) -> str:
    """The spans as an aligned table, grouped by trace."""
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
    return "\n".join(lines)


@click.command("spans")
@click.option("--trace", "trace_id", metavar="ID", help="Only this trace (its id or a unique prefix).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
    help="Latest spans listed without --trace.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(state: CliState, trace_id: str | None, limit: int, as_json: bool) -> None:
    """List recorded spans with their stage, status, tokens and violations."""
    emit("spans", load_spans(state.db_path, trace_id, limit), as_json=as_json, text=format_spans)
