"""``tallyspan report --html``: what the page reads from the store, and what it writes (the browser's view
is tests/cli/test_report_html_browser.py)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue
from tests.cli.conftest import Filled, Recorded

from tallyspan import semconv
from tallyspan._store._store_queries import open_store
from tallyspan._store._store_schema import connect
from tallyspan._store._store_timeline import (
    StagePeriod,
    StageTimeline,
    choose_period,
    run_reasons,
    stage_timeline,
)
from tallyspan.cli import main
from tallyspan.cli._chart import period_label
from tallyspan_exporters import SQLiteSpanExporter

MS = 10**6
S = 1000 * MS
MINUTE = 60 * S
HOUR = 60 * MINUTE
#: A whole hour (2026-01-31 09:00 UTC), where the hand-made calls below start.
T0 = int(datetime(2026, 1, 31, 9, tzinfo=timezone.utc).timestamp()) * S


def _html(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _page(db: Path, out: Path, *args: str) -> str:
    code, output = _html("--db", str(db), "report", "--html", str(out), *args)
    assert code == 0, output
    return out.read_text(encoding="utf-8")


def _calls(db_path: Path, calls: list[tuple[str | None, int, bool]], *, nested: bool = False) -> None:
    """One model call per (stage, start, violated), each in a trace of its own; ``nested``: each call is a
    chain of two chat spans (another instrumentation's outside, ours inside with the stage and verdict)."""
    exporter = SQLiteSpanExporter(db_path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    chat = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT, semconv.GEN_AI_REQUEST_MODEL: "m"}
    for stage, start, violated in calls:
        ours: dict[str, AttributeValue] = dict(chat)
        if stage is not None:
            ours[semconv.STAGE] = stage
        if violated:
            ours[semconv.VIOLATION_TYPES] = ["too_short"]
        if nested:
            outer = tracer.start_span("chat m (other)", attributes=chat, start_time=start)
            inner = tracer.start_span("chat m", attributes=ours, start_time=start + MS)
            inner.end(end_time=start + 2 * MS)
            outer.end(end_time=start + 3 * MS)
        else:
            tracer.start_span("chat m", attributes=ours, start_time=start).end(end_time=start + MS)
    provider.shutdown()


def _timeline(db_path: Path, since: int | None = None) -> StageTimeline:
    with open_store(db_path) as db:
        return stage_timeline(db, since_unix_nano=since)


@pytest.mark.parametrize(
    ("first", "last", "expected"),
    [
        (T0, T0, 100 * MS),
        (T0, T0 + 2300 * MS, 100 * MS),  # 24 periods of 0.1 s
        (T0, T0 + 2400 * MS, 200 * MS),  # 25 would not fit
        (T0 + 50 * MS, T0 + 2350 * MS, 100 * MS),  # 0.0-0.1 s to 2.3-2.4 s: 24 periods
        (T0 + 99 * MS, T0 + 2400 * MS, 200 * MS),  # 2.301 s apart, but 0.0-0.1 to 2.4-2.5 s is 25 periods
        (T0, T0 + 3 * HOUR + 6 * MINUTE, 10 * MINUTE),
        (T0, T0 + 2 * HOUR - 1, 5 * MINUTE),  # 24 periods
        (T0, T0 + 2 * HOUR, 10 * MINUTE),  # 11:00 would open a 25th
        (T0, T0 + 100 * 24 * HOUR, 7 * 24 * HOUR),
        (0, 50 * 365 * 24 * HOUR, 365 * 24 * HOUR),  # more than 24 years: the longest, whatever it takes
    ],
)
def test_the_period_is_the_shortest_whose_aligned_periods_fit(first: int, last: int, expected: int) -> None:
    assert choose_period(first, last) == expected


def test_a_period_is_labelled_as_precisely_as_its_length_needs() -> None:
    moment = T0 + 15 * MINUTE + 30 * S + 200 * MS
    assert period_label(moment, 100 * MS) == "09:15:30.200"
    assert period_label(moment, 5 * S) == "09:15:30"
    assert period_label(moment, 10 * MINUTE) == "01-31 09:15"
    assert period_label(moment, 24 * HOUR) == "2026-01-31"


def test_the_timeline_counts_each_call_once_in_its_stage_and_period(db_path: Path) -> None:
    _calls(
        db_path,
        [
            ("a", T0 + 1 * MINUTE, False),
            ("a", T0 + 2 * MINUTE, True),
            ("a", T0 + 65 * MINUTE, True),
            ("b", T0 + 66 * MINUTE, False),
            (None, T0 + 67 * MINUTE, False),  # outside any stage, clean: not shown
        ],
    )
    _calls(db_path, [("a", T0 + 70 * MINUTE, True)], nested=True)  # two spans, one call
    # 09:00 to 10:10 in 5-minute periods is 15 of them (in 2-minute ones, 36).
    assert _timeline(db_path) == StageTimeline(
        start_unix_nano=T0,
        period_ns=5 * MINUTE,
        periods=15,
        stages=["a", "b"],
        points=[
            StagePeriod("a", 0, calls=2, violating=1),
            StagePeriod("a", 13, calls=1, violating=1),
            StagePeriod("a", 14, calls=1, violating=1),
            StagePeriod("b", 13, calls=1, violating=0),
        ],
    )


def test_calls_outside_any_stage_are_shown_when_one_of_them_violated(db_path: Path) -> None:
    _calls(
        db_path,
        [("a", T0 + 10 * S, False), (None, T0 + 11 * S, False), (None, T0 + 12 * S, True)],
    )
    timeline = _timeline(db_path)
    assert timeline.stages == ["a", None]
    assert [(p.stage, p.period, p.calls, p.violating) for p in timeline.points] == [
        ("a", 0, 1, 0),
        (None, 10, 1, 0),
        (None, 20, 1, 1),
    ]
    assert (timeline.start_unix_nano, timeline.period_ns, timeline.periods) == (T0 + 10 * S, 100 * MS, 21)


def test_the_timeline_since_a_time_starts_at_the_first_call_after_it(db_path: Path) -> None:
    _calls(db_path, [("a", T0, True), ("a", T0 + HOUR, False), ("a", T0 + HOUR + 30 * S, True)])
    # 30 s in 2-second periods is 16 of them (in 1-second ones, 31).
    assert _timeline(db_path, since=T0 + MINUTE) == StageTimeline(
        T0 + HOUR, 2 * S, 16, ["a"], [StagePeriod("a", 0, 1, 0), StagePeriod("a", 15, 1, 1)]
    )


def test_a_store_without_calls_in_a_stage_has_an_empty_timeline_and_a_page_that_says_so(
    db_path: Path, tmp_path: Path
) -> None:
    _calls(db_path, [(None, T0, False)])
    assert _timeline(db_path) == StageTimeline(None, 100 * MS, 0, [], [])
    page = _page(db_path, tmp_path / "r.html")
    assert "No model call in a stage." in page
    assert "<svg" not in page
    assert "No failing runs." in page


def _run(provider: TracerProvider, name: str, start: int, status: Status, *nested: Status) -> None:
    """An agent run span with ``status``, and one run span inside it per ``nested`` status."""
    tracer = provider.get_tracer("test")
    agent = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: name}
    span = tracer.start_span(f"invoke_agent {name}", attributes=agent, start_time=start)
    for i, inner_status in enumerate(nested):
        inner = tracer.start_span(
            f"invoke_agent {name}.{i}",
            context=trace.set_span_in_context(span),
            attributes=agent,
            start_time=start + (i + 1) * MS,
        )
        inner.set_status(inner_status)
        inner.end(end_time=start + S)
    span.set_status(status)
    span.end(end_time=start + 2 * S)


def test_the_reasons_are_the_run_spans_own_error_descriptions_each_once(db_path: Path) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SQLiteSpanExporter(db_path)))
    rolled_up = "refusal in 1 of 2 calls"
    unbalanced = "ledger unbalanced: phantom_log issue_refund"
    _run(
        provider,
        "outer",
        T0,
        Status(StatusCode.ERROR, rolled_up),
        Status(StatusCode.ERROR, f"{unbalanced}; {rolled_up}"),
        Status(StatusCode.ERROR, rolled_up),  # the same words again: said once
    )
    _run(provider, "fine", T0 + HOUR, Status(StatusCode.OK))
    _run(provider, "silent", T0 + HOUR, Status(StatusCode.ERROR))  # no description: no reason
    provider.shutdown()
    with open_store(db_path) as db:
        runs = {row["name"]: row["trace_id"] for row in db.execute("SELECT name, trace_id FROM runs")}
        reasons = run_reasons(db, sorted(set(runs.values())))
    assert reasons == {runs["invoke_agent outer"]: [rolled_up, f"{unbalanced}; {rolled_up}"]}


def test_html_writes_the_page_and_names_it(filled: Filled, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, output = _html("--db", str(filled.path), "report", "--html", str(out))
    assert code == 0
    assert output == f"Wrote {out}: 2 failing runs, 2 of 3 model calls violating, 1 of 1 runs unbalanced\n"
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [path.name for path in tmp_path.iterdir() if "report" in path.name] == ["report.html"]


def test_html_replaces_an_old_page_whole(filled: Filled, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("old", encoding="utf-8")
    assert _page(filled.path, out).endswith("</html>\n")
    assert [path.name for path in tmp_path.iterdir() if "report" in path.name] == ["report.html"]


def test_html_and_json_together_are_refused(filled: Filled, tmp_path: Path) -> None:
    code, output = _html("--db", str(filled.path), "report", "--json", "--html", str(tmp_path / "r.html"))
    assert code == 2
    assert "--html writes a page and --json prints a document: choose one" in output
    assert not (tmp_path / "r.html").exists()


def test_a_page_that_cannot_be_written_is_named_with_the_reason(filled: Filled, tmp_path: Path) -> None:
    out = tmp_path / "missing-folder" / "r.html"
    code, output = _html("--db", str(filled.path), "report", "--html", str(out))
    assert code == 1
    assert output.startswith(f"Error: Could not write the HTML report to {out}: ")
    assert "No such file or directory" in output


def test_a_missing_store_is_named_and_no_page_is_written(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    code, output = _html("--db", str(tmp_path / "none.db"), "report", "--html", str(out))
    assert code == 1
    assert "No tallyspan store found at" in output
    assert not out.exists()


def test_the_page_is_self_contained(filled: Filled, tmp_path: Path) -> None:
    page = _page(filled.path, tmp_path / "r.html")
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]  # a name, never fetched
    for fetching in ("<script", "<link", "<iframe", "<img", "src=", "url(", "@import", "href="):
        assert fetching not in page
    assert (
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:; base-uri 'none'\">"
    ) in page


def test_the_page_shows_the_reports_figures(filled: Filled, tmp_path: Path) -> None:
    page = _page(filled.path, tmp_path / "r.html")
    for figure in (
        '<span class="n">2</span><span class="l">failing runs</span>',
        '<span class="n">2 of 3</span><span class="l">model calls violating</span>',
        '<span class="n">1 of 1</span><span class="l">runs whose books do not balance</span>',
        "<td>qwen3-32b</td><td class=num>2</td><td class=num>180</td><td class=num>250</td>",
        "<td>TimeoutError</td><td class=num>1</td>",
        "<td>triage</td><td>not_japanese</td><td>language_corruption</td><td class=num>1</td>",
        "<strong>unlogged_call</strong> <code>call_2</code>: no log_action for call_2",
    ):
        assert figure in page


def test_without_captured_content_the_page_shows_no_content(recorded: Recorded, tmp_path: Path) -> None:
    """The store of an app that did not capture content: the prompts, the outputs and the tool arguments
    are nowhere on the page, and its books have no summary column."""
    page = _page(recorded.path, tmp_path / "r.html")
    for content in (
        "今週の報告を書いてください",
        "Sales went well",
        "判定",
        "売上",
        "HND-CTS",
        "お応えできません",
    ):
        assert content not in page
    assert "<th>summary</th>" not in page
    assert "search" in page  # a tool's name is an identifier, not content


def test_a_summary_the_store_holds_is_shown_escaped(filled: Filled, tmp_path: Path) -> None:
    db = connect(filled.path)
    with db:
        db.execute(
            "INSERT INTO ledger_entries (trace_id, run_span_id, side, seq, call_id, tool_name, outcome, summary)"
            " VALUES (?, ?, 'claimed', 0, 'call_1', 'fetch_metrics', 'succeeded', ?)",
            (
                filled.trace_id("invoke_agent reporter"),
                filled.span_id("invoke_agent reporter"),
                "<b>14</b> & up",
            ),
        )
    db.close()
    page = _page(filled.path, tmp_path / "r.html")
    assert "<th>summary</th>" in page
    assert "<td>&lt;b&gt;14&lt;/b&gt; &amp; up</td>" in page


def test_the_failing_runs_keep_the_reports_order_and_limit(recorded: Recorded, tmp_path: Path) -> None:
    page = _page(recorded.path, tmp_path / "r.html", "--limit", "1")
    listed = re.findall(r'<li class="run" data-trace="([0-9a-f]{32})">', page)
    assert listed == [recorded.trace_ids["booker"]]  # the books that do not balance first
    assert "1 of 3 shown (tallyspan report --limit N shows more)" in page
    assert (
        json.loads(CliRunner().invoke(main, ["--db", str(recorded.path), "report", "--json"]).output)["data"][
            "failing_trace_count"
        ]
        == 3
    )
