"""``tallyspan report --html FILE``: the report as one self-contained HTML page.

What the text report says, laid out for looking rather than reading: the failing runs first, each led
by its reason as its run span gives it (``not_japanese, refusal in 2 of 5 calls``, ``ledger
unbalanced: phantom_log issue_refund``), then model calls per stage over time as a chart, the
tables of the report, and each run's books side by side.

The page is one file: its style inline, its chart inline SVG (``tallyspan.cli._chart``), no script at
all, and a Content-Security-Policy that forbids scripts and every fetch, so it opens offline, from disk,
with no server. Everything from the store (names of models, tools, stages, runs; reasons; details) is
escaped. It shows only what the store holds: message content appears only where the app captured it
(a claim's summary in the books), and span attributes are never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tallyspan._selfstats import is_problem
from tallyspan._store._store_queries import FailingTrace, LedgerSide, Report, RunBooks
from tallyspan._store._store_timeline import StageTimeline
from tallyspan.cli._chart import NO_STAGE, markup, stage_chart
from tallyspan.cli._time import utc_time

__all__ = ["CONTENT_SECURITY_POLICY", "ReportPage", "render_page"]

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"
"""No script runs and nothing is fetched: the page is what the file holds."""
_REASON_CHARS = 400
"""A reason longer than this (an app's own exception message on a run span) is cut, with an ellipsis."""


@dataclass(frozen=True)
class ReportPage:
    """What the page shows: the report, and what it reads beside it."""

    report: Report
    timeline: StageTimeline
    reasons: dict[str, list[str]]
    """Per failing trace: its run spans' status descriptions (``run_reasons``)."""
    books: list[RunBooks]
    """The books of the first runs of ``report.ledger`` (unbalanced first, then the latest)."""
    written_unix_nano: int
    version: str


_STYLE = """
:root { --ink:#101828; --muted:#667085; --line:#e4e7ec; --soft:#f9fafb; --bad:#b42318; --bad-bg:#fef3f2;
  --bad-line:#fda29b; --bar-bad:#d92d20; --bar-ok:#d0d5dd; --good:#067647; --good-bg:#ecfdf3; }
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: var(--ink); font: 14px/1.45 system-ui, -apple-system, "Segoe UI",
  "Noto Sans", "Noto Sans CJK JP", sans-serif; }
main, header, footer { max-width: 1120px; margin: 0 auto; padding: 0 28px; }
header { padding-top: 26px; }
h1 { font-size: 22px; margin: 0 0 2px; letter-spacing: -.01em; }
h2 { font-size: 16px; margin: 30px 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 0; }
code, .mono { font: 12.5px/1.4 ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, monospace; }
.muted, .meta { color: var(--muted); }
.meta { margin: 0; font-size: 13px; word-break: break-all; }
.tiles { display: flex; gap: 12px; margin: 18px 0 4px; flex-wrap: wrap; }
.tile { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 150px; }
.tile .n { font-size: 22px; font-weight: 650; display: block; }
.tile .l { color: var(--muted); font-size: 12.5px; }
.tile.bad { border-color: var(--bad-line); background: var(--bad-bg); }
.tile.bad .n { color: var(--bad); }
ol.failing { list-style: none; margin: 0; padding: 0; display: grid; gap: 8px; }
li.run { border: 1px solid var(--bad-line); border-left: 5px solid var(--bad); border-radius: 6px;
  background: var(--bad-bg); padding: 8px 14px; }
.reason { color: var(--bad); font-weight: 650; font-size: 15px; word-break: break-word; }
.what { margin-top: 3px; }
.what .name { font-weight: 600; }
.badge { display: inline-block; font-size: 11.5px; font-weight: 650; letter-spacing: .03em; padding: 1px 7px;
  border-radius: 10px; vertical-align: 1px; }
.badge.bad { background: var(--bad); color: #fff; }
.badge.good { background: var(--good-bg); color: var(--good); border: 1px solid #abefc6; }
.chips { margin-top: 5px; display: flex; flex-wrap: wrap; gap: 5px; }
.chip { font: 12px/1.5 ui-monospace, "DejaVu Sans Mono", monospace; background: #fff; border: 1px solid var(--line);
  border-radius: 4px; padding: 0 6px; }
.trace { margin-top: 5px; color: var(--muted); font-size: 12.5px; word-break: break-all; }
.none { border: 1px solid #abefc6; background: var(--good-bg); color: var(--good); border-radius: 6px;
  padding: 10px 14px; font-weight: 600; }
.hint { color: var(--muted); font-size: 12.5px; margin: 8px 0 0; }
svg.chart { display: block; max-width: 100%; font-size: 12px; fill: var(--ink); }
svg.chart .violating { fill: var(--bar-bad); }
svg.chart .clean { fill: var(--bar-ok); }
svg.chart .baseline { stroke: var(--line); }
svg.chart .stage-name { font-weight: 600; }
svg.chart .stage-sum, svg.chart .muted, svg.chart .axis { fill: var(--muted); }
svg.chart .stage.failing .stage-sum { fill: var(--bad); }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 8px 28px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top;
  word-break: break-word; }
th { font-size: 12px; color: var(--muted); font-weight: 600; background: var(--soft); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.bad td { color: var(--bad); }
td.gap, th.gap { border-left: 2px solid var(--line); }
td.missing { color: var(--bad); font-style: italic; }
article.books { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; margin-bottom: 12px; }
article.books.unbalanced { border-color: var(--bad-line); border-left: 5px solid var(--bad); }
article.books header { padding: 0; margin: 0 0 8px; max-width: none; }
article.books .sub { color: var(--muted); font-size: 12.5px; }
ul.found { margin: 8px 0 0; padding-left: 18px; color: var(--bad); }
footer { color: var(--muted); font-size: 12px; margin-top: 34px; padding-bottom: 30px; }
@media (max-width: 820px) { .grid { grid-template-columns: 1fr; } main, header, footer { padding: 0 14px; } }
"""


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def _cut(text: str) -> str:
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


def _chips(kinds: Iterable[str]) -> str:
    return "".join(f'<span class="chip">{markup(kind)}</span>' for kind in kinds)


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, bad: Sequence[bool] = (), numeric: int = 0
) -> str:
    """A table whose last ``numeric`` columns are numbers; rows flagged in ``bad`` in red."""
    if not rows:
        return '<p class="muted">(none)</p>'
    first = len(headers) - numeric

    def cells(values: Sequence[object], tag: str) -> str:
        return "".join(
            f"<{tag}{' class=num' if i >= first else ''}>{markup('-' if value is None else value)}</{tag}>"
            for i, value in enumerate(values)
        )

    body = "".join(
        f"<tr{' class=bad' if i < len(bad) and bad[i] else ''}>{cells(row, 'td')}</tr>"
        for i, row in enumerate(rows)
    )
    return f"<table><thead><tr>{cells(headers, 'th')}</tr></thead><tbody>{body}</tbody></table>"


def _tiles(report: Report) -> str:
    tiles = [
        (f"{report.failing_trace_count:,}", "failing runs", report.failing_trace_count > 0),
        (
            f"{report.violating_calls:,} of {report.model_calls:,}",
            "model calls violating",
            report.violating_calls > 0,
        ),
        (
            f"{report.unbalanced_runs:,} of {len(report.ledger):,}",
            "runs whose books do not balance",
            report.unbalanced_runs > 0,
        ),
        (f"{report.tool_calls:,}", "tool calls", False),
        (f"{report.runs:,}", f"runs, {_count(report.traces, 'trace')}", False),
    ]
    return (
        '<div class="tiles">'
        + "".join(
            f'<div class="tile{" bad" if bad else ""}"><span class="n">{markup(value)}</span>'
            f'<span class="l">{markup(label)}</span></div>'
            for value, label, bad in tiles
        )
        + "</div>"
    )


def _failing_run(trace: FailingTrace, reasons: Sequence[str]) -> str:
    # The run's own words first; a store whose runs carry none (status marking off) still names the types.
    lines = list(reasons) or [", ".join([*trace.discrepancy_types, *trace.violation_types]) or "failed"]
    books = ""
    if trace.balanced is False:
        books = ' <span class="badge bad">BOOKS UNBALANCED</span>'
    elif trace.balanced:
        books = ' <span class="badge good">books balance</span>'
    details = [f"started {utc_time(trace.start_unix_nano) or '-'} UTC"]
    if not reasons:  # the reason says "in 1 of 5 calls" itself
        details.append(f"{trace.violating_calls:,} violating call{'' if trace.violating_calls == 1 else 's'}")
    if trace.service_name:
        details.append(f"service {trace.service_name}")
    return (
        f'<li class="run" data-trace="{markup(trace.trace_id)}">'
        + "".join(f'<div class="reason">{markup(_cut(line))}</div>' for line in lines)
        + f'<div class="what"><span class="badge bad">FAILING</span> <span class="name">'
        f"{markup(trace.run_name or '(unnamed run)')}</span>{books} "
        f'<span class="muted">· {markup(" · ".join(details))}</span></div>'
        f'<div class="chips">{_chips([*trace.discrepancy_types, *trace.violation_types])}</div>'
        f'<div class="trace">trace <code>{markup(trace.trace_id)}</code></div></li>'
    )


def _failing(page: ReportPage) -> str:
    report = page.report
    if not report.failing_traces:
        return '<section id="failing"><h2>Failing runs</h2><p class="none">No failing runs.</p></section>'
    shown = len(report.failing_traces)
    note = "runs whose books do not balance first, then the latest"
    if shown < report.failing_trace_count:
        note += f"; {shown} of {report.failing_trace_count} shown (tallyspan report --limit N shows more)"
    items = "".join(
        _failing_run(trace, page.reasons.get(trace.trace_id, ())) for trace in report.failing_traces
    )
    return (
        f'<section id="failing"><h2>Failing runs</h2><p class="hint">{markup(note)}</p>'
        f'<ol class="failing">{items}</ol><p class="hint">Open one with <code>tallyspan spans --trace ID</code> '
        "and <code>tallyspan ledger --run ID</code>, or search the trace id in your tracing backend.</p>"
        "</section>"
    )


def _timeline(page: ReportPage) -> str:
    chart = stage_chart(page.timeline)
    body = chart or '<p class="muted">No model call in a stage.</p>'
    return f'<section id="timeline"><h2>Violations per stage over time</h2>{body}</section>'


def _tables(report: Report) -> str:
    stages = _table(
        ["stage", "calls", "violating"],
        [[s.stage, s.calls, s.violating] for s in report.stages],
        bad=[s.violating > 0 for s in report.stages],
        numeric=2,
    )
    violations = _table(
        ["stage", "type", "failure class", "calls"],
        [[v.stage or NO_STAGE, v.type, v.failure_class, v.count] for v in report.violations],
        numeric=1,
    )
    models = _table(
        ["model", "calls", "input tokens", "output tokens"],
        [[m.model, f"{m.calls:,}", f"{m.input_tokens:,}", f"{m.output_tokens:,}"] for m in report.models],
        numeric=3,
    )
    errors = _table(["error type", "calls"], [[e.error_type, e.count] for e in report.errors], numeric=1)
    return (
        '<section id="tables"><div class="grid">'
        f"<div><h2>Stages</h2>{stages}</div><div><h2>Violations by stage and type</h2>{violations}</div>"
        f"<div><h2>Models</h2>{models}</div><div><h2>Errors</h2>{errors}</div></div></section>"
    )


def _side(side: LedgerSide | None) -> list[object]:
    if side is None:
        return [None, None, None]
    return [side.call_id, side.tool_name, side.outcome]


def _books(run: RunBooks) -> str:
    broken = run.balanced is False or run.protocol_ok is False
    badge = (
        '<span class="badge bad">UNBALANCED</span>'
        if run.balanced is False
        else '<span class="badge good">balanced</span>'
    )
    if run.protocol_ok is False:
        badge += ' <span class="badge bad">PROTOCOL BROKEN</span>'
    counts = [
        "-" if run.observed_count is None else f"{run.observed_count:,} observed",
        "-" if run.claimed_count is None else f"{run.claimed_count:,} claimed",
    ]
    with_summary = any(line.claimed is not None and line.claimed.summary for line in run.lines)
    headers = ["observed call", "tool", "outcome", "claimed call", "tool", "outcome"]
    if with_summary:  # captured content only: the summary is the agent's own words
        headers.append("summary")
    rows: list[str] = []
    for line in run.lines:
        values = [*_side(line.observed), *_side(line.claimed)]
        if with_summary:
            values.append(line.claimed.summary if line.claimed else None)
        cells = []
        for i, value in enumerate(values):
            classes = ["gap"] if i == 3 else []
            if value is None and ((i < 3 and line.observed is None) or (3 <= i < 6 and line.claimed is None)):
                classes.append("missing")
                value = "missing" if i in (0, 3) else ""
            attribute = f' class="{" ".join(classes)}"' if classes else ""
            cells.append(f"<td{attribute}>{markup('-' if value is None else value)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = "".join(f"<th{' class=gap' if i == 3 else ''}>{markup(h)}</th>" for i, h in enumerate(headers))
    table = (
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        if rows
        else '<p class="muted">No entries on either side.</p>'
    )
    found = (
        '<ul class="found">'
        + "".join(
            f"<li><strong>{markup(d.type)}</strong>"
            + (f" <code>{markup(d.call_id)}</code>" if d.call_id else "")
            + (f": {markup(d.detail)}" if d.detail else "")
            + "</li>"
            for d in run.discrepancies
        )
        + "</ul>"
        if run.discrepancies
        else ""
    )
    return (
        f'<article class="books{" unbalanced" if broken else ""}" data-run="{markup(run.run_span_id)}">'
        f"<header><h3>{markup(run.run_name or '(unnamed run)')} {badge}</h3>"
        f'<div class="sub">{markup(", ".join(counts))} · reconciled {markup(utc_time(run.time_unix_nano) or "-")}'
        f" UTC · trace <code>{markup(run.trace_id)}</code> · run span <code>{markup(run.run_span_id)}</code>"
        f"</div></header>{table}{found}</article>"
    )


def _ledger(page: ReportPage) -> str:
    report = page.report
    if not report.ledger:
        return '<section id="ledger"><h2>Ledger</h2><p class="muted">No reconciled runs.</p></section>'
    verdict = (
        "all books balance"
        if report.unbalanced_runs == 0
        else f"{report.unbalanced_runs} of {len(report.ledger)} runs do not balance"
    )
    note = "observed tool calls beside the agent's own log; runs whose books do not balance first"
    if len(page.books) < len(report.ledger):
        note += (
            f"; {len(page.books)} of {len(report.ledger)} runs shown (tallyspan ledger --run ID for the rest)"
        )
    return (
        f'<section id="ledger"><h2>Ledger: {markup(verdict)}</h2><p class="hint">{markup(note)}</p>'
        + "".join(_books(run) for run in page.books)
        + "</section>"
    )


def _losses(report: Report) -> str:
    rows = [
        [process.pid, process.service_name or "-", key, value]
        for process in report.losses
        for key, value in process.counts.items()
        if is_problem(key)
    ]
    if not rows:
        return ""
    return (
        '<section id="losses"><h2>What tallyspan lost or failed on</h2>'
        + _table(["pid", "service", "counter", "count"], rows, numeric=1)
        + "</section>"
    )


def render_page(page: ReportPage) -> str:
    """The whole HTML document of ``page``."""
    report = page.report
    since = "" if report.since_unix_nano is None else f" · since {utc_time(report.since_unix_nano)} UTC"
    meta = (
        f"{report.store}{since} · {_count(report.spans, 'span')} · written "
        f"{utc_time(page.written_unix_nano)} UTC by tallyspan {page.version}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>tallyspan report</title><style>{_STYLE}</style></head><body>"
        f'<header><h1>tallyspan report</h1><p class="meta">{markup(meta)}</p>{_tiles(report)}</header>'
        f"<main>{_failing(page)}{_timeline(page)}{_tables(report)}{_ledger(page)}{_losses(report)}</main>"
        "<footer>One self-contained page: no script, nothing fetched. Message content appears only where "
        "the app captured it.</footer></body></html>\n"
    )
