"""``tallyspan report``: the failing traces to open, then calls, models, stages, errors, violations by
stage and type, and ledger status; each model call counted once (``tallyspan._store._store_queries``).
With ``--html FILE``, the same as one self-contained page (``tallyspan.cli._html``)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Final

import click

from tallyspan._selfstats import is_problem
from tallyspan._store._store_queries import DEFAULT_FAILING_TRACES, Report, books_of, open_store, report
from tallyspan._store._store_timeline import run_reasons, stage_timeline
from tallyspan._version import __version__
from tallyspan.cli._html import ReportPage, render_page
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state
from tallyspan.cli._time import since_option, utc_time

__all__ = [
    "PAGE_BOOKS",
    "TRACE_PREFIX",
    "build_page",
    "build_report",
    "command",
    "format_report",
    "write_page",
]

TRACE_PREFIX = 12
"""Characters of a trace id shown in the ledger table; ``tallyspan spans --trace`` accepts such a prefix."""
PAGE_BOOKS: Final = 50
"""Runs whose books the HTML page shows in full (unbalanced first, then the latest)."""


def build_report(
    db_path: Path, since_unix_nano: int | None = None, failing_limit: int = DEFAULT_FAILING_TRACES
) -> Report:
    """Read the summary of the store at ``db_path`` (of what started since ``since_unix_nano``).

    Raises:
        StoreNotFoundError: there is no store there.
    """
    with open_store(db_path) as db:
        return report(db, store=str(db_path), since_unix_nano=since_unix_nano, failing_limit=failing_limit)


def build_page(
    db_path: Path, since_unix_nano: int | None = None, failing_limit: int = DEFAULT_FAILING_TRACES
) -> ReportPage:
    """Read what the HTML page shows: the report, calls per stage over time, the failing runs' reasons
    and the books of the first ``PAGE_BOOKS`` runs of its ledger.

    Raises:
        StoreNotFoundError: there is no store there.
    """
    with open_store(db_path) as db:
        summary = report(db, store=str(db_path), since_unix_nano=since_unix_nano, failing_limit=failing_limit)
        return ReportPage(
            report=summary,
            timeline=stage_timeline(db, since_unix_nano=since_unix_nano),
            reasons=run_reasons(db, [trace.trace_id for trace in summary.failing_traces]),
            books=books_of(db, summary.ledger[:PAGE_BOOKS]),
            written_unix_nano=time.time_ns(),
            version=__version__,
        )


def write_page(page: ReportPage, path: Path) -> None:
    """Write the page to ``path`` whole: into a new file beside it, renamed into place, so a reader never
    sees half a page and a failed write leaves the old one.

    Raises:
        OSError: the folder cannot be written.
    """
    document = render_page(page).encode("utf-8")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(document)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _books(balanced: bool | None) -> str | None:
    return None if balanced is None else ("balanced" if balanced else "UNBALANCED")


def _failing(result: Report) -> list[str]:
    shown = len(result.failing_traces)
    if not shown:
        return ["Failing traces", "  (none)"]
    heading = "Failing traces (unbalanced first, then the latest"
    if shown < result.failing_trace_count:
        heading += f"; {shown} of {result.failing_trace_count}"
    return [
        heading + ")",
        table(
            ["start (UTC)", "trace", "run", "books", "violating calls", "types"],
            [
                [
                    utc_time(trace.start_unix_nano),
                    trace.trace_id,
                    trace.run_name,
                    _books(trace.balanced),
                    trace.violating_calls,
                    [*trace.discrepancy_types, *trace.violation_types],
                ]
                for trace in result.failing_traces
            ],
        ),
        "  Open one with `tallyspan spans --trace ID`, or search the trace id in your tracing backend.",
    ]


def format_report(result: Report) -> str:
    """The report as readable text."""
    since = "" if result.since_unix_nano is None else f" (since {utc_time(result.since_unix_nano)} UTC)"
    lines = [
        f"tallyspan report — {result.store}{since}",
        f"  {_count(result.spans, 'span')} in {_count(result.traces, 'trace')}, {_count(result.runs, 'run')}; "
        f"{_count(result.model_calls, 'model call')} ({result.violating_calls} violating), "
        f"{_count(result.tool_calls, 'tool call')}",
        "",
        *_failing(result),
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
        table(["error type", "calls"], [[e.error_type, e.count] for e in result.errors]),
        "",
        "Violations by stage and type",
        table(
            ["stage", "type", "failure class", "calls"],
            [[v.stage, v.type, v.failure_class, v.count] for v in result.violations],
        ),
        "",
        "Ledger (unbalanced first, then the latest)",
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
    lost: list[list[object]] = []
    figures: list[list[object]] = []  # backpressure.*: waits the app gave tallyspan's threads, not losses
    for process in result.losses:
        for key, value in process.counts.items():
            (lost if is_problem(key) else figures).append(
                [process.pid, process.service_name or "-", key, value]
            )
    for heading, rows in (
        ("What tallyspan lost or failed on (tallyspan.stats() of the processes that wrote the store)", lost),
        (
            "What else tallyspan counted (not losses: backpressure.* are waits the app gave its threads)",
            figures,
        ),
    ):
        if rows:
            lines += ["", heading, table(["pid", "service", "counter", "count"], rows)]
    return "\n".join(lines)


@click.command("report")
@since_option
@click.option(
    "--limit", type=click.IntRange(min=0), default=DEFAULT_FAILING_TRACES, show_default=True,
    help="Failing traces named.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
    metavar="FILE", help="Write the report as one self-contained HTML page (no script, no network) to FILE.",
)  # fmt: skip
@pass_state
def command(
    state: CliState, since_unix_nano: int | None, limit: int, as_json: bool, html_path: Path | None
) -> None:
    """Summarise the store: the failing traces to open, calls, models, stages, errors, violations, books."""
    if html_path is None:
        emit(
            "report", build_report(state.db_path, since_unix_nano, limit), as_json=as_json, text=format_report
        )
        return
    if as_json:
        raise click.UsageError("--html writes a page and --json prints a document: choose one")
    page = build_page(state.db_path, since_unix_nano, limit)
    try:
        write_page(page, html_path)
    except OSError as exc:
        raise click.ClickException(f"Could not write the HTML report to {html_path}: {exc}") from exc
    report = page.report
    click.echo(
        f"Wrote {html_path}: {report.failing_trace_count} failing runs, "
        f"{report.violating_calls} of {report.model_calls} model calls violating, "
        f"{report.unbalanced_runs} of {len(report.ledger)} runs unbalanced"
    )
