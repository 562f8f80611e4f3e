"""The store's read API for scripts (``tallyspan._store._store_queries``): what the commands do not reach, and the
bounds of ``--since`` and of a span row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from tests.cli.conftest import Filled, Recorded, age_trace

from tallyspan import semconv
from tallyspan._store._store_ledger import like_prefix
from tallyspan._store._store_queries import (
    LedgerRun,
    ModelUsage,
    StoreNotFoundError,
    ViolationCount,
    failing_traces,
    iter_traces,
    ledger_runs,
    list_spans,
    open_store,
    process_counters,
    report,
    stage_summaries,
    store_overview,
    violations_by_stage_and_type,
)
from tallyspan._store._store_schema import connect
from tallyspan.cli import main
from tallyspan_exporters import SQLiteSpanExporter

DAY_NS = 86400 * 10**9


def _spans(db_path: Path, *args: str) -> list[str]:
    result = CliRunner().invoke(
        main, ["--db", str(db_path), "spans", *args, "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return [row["name"] for row in json.loads(result.output)["data"]]


def _edited_copy(recorded: Recorded, tmp_path: Path, *statements: tuple[str, str]) -> Path:
    """A copy of the recorded store with ``statements`` (SQL, trace id) applied, as a damaged store would be."""
    store = recorded.copy(tmp_path / "copy.db")
    db = connect(store)
    with db:
        for sql, trace_id in statements:
            db.execute(sql, (trace_id,))
    db.close()
    return store


def _export(db_path: Path, *spans: object) -> None:
    exporter = SQLiteSpanExporter(db_path)
    exporter.export(spans)  # type: ignore[arg-type]
    exporter.shutdown()


def test_the_views_for_scripts_take_since_like_the_report(recorded: Recorded, tmp_path: Path) -> None:
    store = recorded.copy(tmp_path / "copy.db")
    age_trace(store, recorded.trace_ids["booker"], days=3)  # now both runs with trouble are old
    since = time.time_ns() - DAY_NS
    with open_store(store) as db:
        everything = report(db)
        recent = report(db, since_unix_nano=since)
        assert failing_traces(db) == everything.failing_traces
        assert [trace.trace_id for trace in failing_traces(db, since_unix_nano=since)] == [
            recorded.trace_ids["triage"]
        ]
        assert failing_traces(db, since_unix_nano=since) == recent.failing_traces
        assert violations_by_stage_and_type(db) == everything.violations
        assert violations_by_stage_and_type(db, since_unix_nano=since) == [
            ViolationCount("triage", "refusal", "contract_violation", 1)
        ]
        assert stage_summaries(db) == everything.stages
        assert stage_summaries(db, since_unix_nano=since) == recent.stages
        assert [stage.stage for stage in recent.stages] == ["triage", "weekly_report"]
        assert [(stage.calls, stage.violating) for stage in recent.stages] == [(1, 1), (1, 0)]


def test_ledger_runs_gives_each_run_once_with_its_latest_books(filled: Filled) -> None:
    db = connect(filled.path)
    with db:  # the run reconciled again later (a retried flush), now balanced; and a second run before it
        for run_span_id, balanced, time_unix_nano in (
            (filled.span_id("invoke_agent reporter"), 1, 5),
            ("ef" * 8, 0, 3),
        ):
            db.execute(
                "INSERT INTO ledger_reconciliations (trace_id, run_span_id, run_name, balanced, protocol_ok,"
                " discrepancy_types, discrepancies, observed_count, claimed_count, time_unix_nano)"
                " VALUES (?, ?, 'reporter', ?, 1, '[]', '[]', 2, 2, ?)",
                (filled.trace_id("invoke_agent reporter"), run_span_id, balanced, time_unix_nano),
            )
    db.close()
    with open_store(filled.path) as db:
        runs = ledger_runs(db)
    trace_id = filled.trace_id("invoke_agent reporter")
    assert runs == [  # in the order of their first reconciliation
        LedgerRun(trace_id, filled.span_id("invoke_agent reporter"), "reporter", True, True, [], 2, 2),
        LedgerRun(trace_id, "ef" * 8, "reporter", False, True, [], 2, 2),
    ]


def test_a_missing_store_error_keeps_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(StoreNotFoundError) as raised, open_store(missing):
        pass
    assert raised.value.path == missing


def test_a_span_row_has_its_failure_class_and_no_duration_when_it_never_ended(filled: Filled) -> None:
    result = CliRunner().invoke(
        main, ["spans", "--trace", filled.trace_id("invoke_agent reporter"), "--json"]
    )
    rows = {row["name"]: row for row in json.loads(result.output)["data"]}
    assert rows["chat qwen3-32b"]["failure_class"] == "contract_violation"
    assert rows["chat qwen3-32b ok"]["failure_class"] is None
    provider = TracerProvider()
    still_open = provider.get_tracer("test").start_span("still open")  # a producer flushing open spans
    _export(filled.path, still_open)
    still_open.end()
    provider.shutdown()
    result = CliRunner().invoke(
        main, ["spans", "--trace", format(still_open.get_span_context().trace_id, "032x"), "--json"]
    )
    (row,) = json.loads(result.output)["data"]
    assert (row["name"], row["duration_ms"]) == ("still open", None)
    text = CliRunner().invoke(
        main, ["spans", "--trace", format(still_open.get_span_context().trace_id, "032x")]
    )
    span_id = format(still_open.get_span_context().span_id, "016x")
    assert text.output.splitlines()[2].split()[1:] == [span_id, "still", "open", "-", "-", "UNSET", "-", "-"]


def test_since_bounds_are_exact(db_path: Path) -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    at_epoch = tracer.start_span("at the epoch", start_time=0)
    at_epoch.end(end_time=0)
    # 2000 weeks and a little more ago: just older than --since 2000w.
    old = tracer.start_span("older than 2000w", start_time=time.time_ns() - 2000 * 7 * DAY_NS - 600_000_000)
    old.end()
    at_nine = tracer.start_span("at 09:00:05.123", start_time=1_769_850_005_123_000_000)
    at_nine.end()
    provider.shutdown()
    _export(db_path, at_epoch, old, at_nine)
    everything = ["at the epoch", "older than 2000w", "at 09:00:05.123"]
    assert _spans(db_path, "--since", "1970-01-01T00:00:00Z") == everything
    assert _spans(db_path, "--since", "999999999999w") == everything
    assert _spans(db_path, "--since", "2000w") == ["at 09:00:05.123"]
    assert _spans(db_path, "--since", "2026-01-31T09:00:05.123Z") == ["at 09:00:05.123"]
    assert _spans(db_path, "--since", "2026-01-31t09:00:05.123z") == ["at 09:00:05.123"]
    assert _spans(db_path, "--since", "2026-01-31T09:00:05.124Z") == []


@pytest.mark.usefixtures("tokyo_clock")
def test_a_since_time_without_an_offset_is_the_local_time(db_path: Path) -> None:
    provider = TracerProvider()
    at_nine = provider.get_tracer("test").start_span(
        "at 09:00:05.123 UTC", start_time=1_769_850_005_123_000_000
    )
    at_nine.end()
    provider.shutdown()
    _export(db_path, at_nine)
    assert _spans(db_path, "--since", "2026-01-31T18:00:05.123") == ["at 09:00:05.123 UTC"]  # Tokyo time
    assert _spans(db_path, "--since", "2026-01-31T18:00:05.124") == []
    assert _spans(db_path, "--since", "2026-01-31T18:00:05.124+09:00") == []
    assert _spans(db_path, "--since", "2026-01-31T09:00:05.123+00:00") == ["at 09:00:05.123 UTC"]


def test_a_bad_since_says_what_it_takes(db_path: Path) -> None:
    connect(db_path).close()
    result = CliRunner().invoke(main, ["spans", "--since", "yesterday"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: Invalid value for '--since': 'yesterday' is neither an age like 15m, 2h, 7d "
        "nor an ISO time like 2026-01-31T09:00"
    )


def test_list_spans_for_scripts_lists_every_span_unless_asked_for_fewer(filled: Filled) -> None:
    with open_store(filled.path) as db:
        names = [span.name for span in list_spans(db)]
        assert len(names) == 5
        assert [span.name for span in list_spans(db, limit=0)] == names
        assert [span.name for span in list_spans(db, limit=1)] == names[-1:]
        assert [span.name for span in list_spans(db, violated=True)] == ["chat qwen3-32b", "chat gpt-4o-mini"]


def test_report_limit_0_names_no_failing_trace_but_counts_them(recorded: Recorded) -> None:
    with open_store(recorded.path) as db:
        result = report(db, failing_limit=0)
    assert (result.failing_traces, result.failing_trace_count) == ([], 3)


def test_a_call_without_usage_counts_no_tokens_and_a_trace_without_its_root_still_fails(
    db_path: Path,
) -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    lost_parent = tracer.start_span("invoke_agent lost")  # never exported: the process died before it ended
    with trace.use_span(lost_parent, end_on_exit=False):
        call = tracer.start_span(
            "chat m",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
                semconv.GEN_AI_REQUEST_MODEL: "m",
                semconv.VIOLATION_TYPES: ["too_short"],
                semconv.VIOLATION_COUNT: 1,
            },
        )
        call.end()
    provider.shutdown()
    _export(db_path, call)
    with open_store(db_path) as db:
        result = report(db)
    assert result.models == [ModelUsage("m", 1, 0, 0)]
    (failing,) = result.failing_traces
    assert (failing.run_name, failing.violating_calls, failing.violation_types) == (None, 1, ["too_short"])


def test_a_run_whose_failing_spans_were_lost_still_fails_by_its_roll_up(
    recorded: Recorded, tmp_path: Path
) -> None:
    reporter = recorded.trace_ids["reporter"]
    store = (
        _edited_copy(  # the reporter's violating call dropped on the way (or pruned): only its run says so
            recorded,
            tmp_path,
            ("DELETE FROM violations WHERE trace_id = ?", reporter),
            ("DELETE FROM spans WHERE trace_id = ? AND violation_count > 0", reporter),
        )
    )
    with open_store(store) as db:
        failing = {trace.trace_id: trace for trace in failing_traces(db)}
    assert (failing[reporter].violating_calls, failing[reporter].violation_types) == (
        0,
        ["missing_required", "not_japanese", "too_short"],
    )


def test_iter_traces_gives_each_trace_with_its_runs_and_survives_a_damaged_row(
    recorded: Recorded, tmp_path: Path
) -> None:
    booker = recorded.trace_ids["booker"]
    store = _edited_copy(
        recorded,
        tmp_path,
        ("UPDATE spans SET attributes = 'not json' WHERE trace_id = ? AND operation = 'chat'", booker),
    )
    with open_store(store) as db:
        traces = {data.trace_id: data for data in iter_traces(db)}
    assert set(traces) == set(recorded.trace_ids.values())
    spans = traces[booker].spans
    assert {span.trace_id for span in spans} == {booker}
    assert [(span.name, span.is_run) for span in spans] == [
        ("invoke_agent booker", True), ("execute_tool book", False), ("chat qwen3-32b", False),
    ]  # fmt: skip
    assert spans[2].stage is None  # its attributes did not parse: the columns still show
    assert spans[1].tool_name == "book"
    reporter = traces[recorded.trace_ids["reporter"]]
    (call,) = [span for span in reporter.spans if span.violations]
    assert [(v.type, v.failure_class) for v in call.violations] == [
        ("too_short", "contract_violation"),
        ("missing_required", "contract_violation"),
        ("not_japanese", "language_corruption"),
    ]
    assert [span.parent_span_id is None for span in reporter.spans] == [True, False, False, False]


def test_process_counters_name_the_process_and_when(store_without_spans: Path) -> None:
    lonely = store_without_spans
    with open_store(lonely) as db:
        (process,) = process_counters(db)
    assert (process.pid, process.service_name, process.counts) == (
        os.getpid(),
        None,
        {"dropped.ledger_claims": 1},
    )
    assert 0 < process.started_unix_nano <= process.time_unix_nano <= time.time_ns()


def test_a_prefix_for_like_escapes_the_wildcards_and_the_escape() -> None:
    assert like_prefix("a%b_c\\d") == "a\\%b\\_c\\\\d%"
    assert like_prefix("") == "%"


def test_report_for_scripts_names_no_store_unless_told(filled: Filled) -> None:
    with open_store(filled.path) as db:
        assert report(db).store == ""
        assert report(db, str(filled.path)).store == str(filled.path)


def test_the_overview_keeps_the_counters_of_the_latest_processes_asked_for(
    store_without_spans: Path,
) -> None:
    """A second process drops a claim into the same store after this one."""
    script = (
        "import sys, tallyspan\n"
        "from tallyspan_exporters import SQLiteSpanExporter\n"
        "tallyspan.ledger.claim('c2', 'search', 'succeeded')\n"
        "tallyspan.ledger.claim('c3', 'search', 'succeeded')\n"
        "exporter = SQLiteSpanExporter(sys.argv[1])\n"
        "exporter.export([])\n"
        "exporter.shutdown()\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, str(store_without_spans)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
    with open_store(store_without_spans) as db:
        assert [(p.pid == os.getpid(), p.counts) for p in store_overview(db).counters] == [
            (False, {"dropped.ledger_claims": 2}),
            (True, {"dropped.ledger_claims": 1}),
        ]
        assert [p.counts for p in store_overview(db, processes=1).counters] == [{"dropped.ledger_claims": 2}]


def test_a_types_column_an_older_or_foreign_writer_filled_shows_what_it_holds(
    recorded: Recorded, tmp_path: Path
) -> None:
    ids = recorded.trace_ids
    store = _edited_copy(
        recorded,
        tmp_path,
        ("UPDATE spans SET violation_types = '\"refusal\"' WHERE trace_id = ?", ids["triage"]),
        ("UPDATE spans SET violation_types = '' WHERE trace_id = ?", ids["booker"]),
        ("UPDATE spans SET violation_types = X'07' WHERE trace_id = ?", ids["both"]),  # not text at all
        ("UPDATE spans SET violation_types = 'too_short' WHERE trace_id = ?", ids["reporter"]),
    )
    with open_store(store) as db:
        types = {name: {tuple(row.violation_types) for row in list_spans(db, ids[name])} for name in ids}
    assert types == {
        "triage": {("refusal",)},  # one JSON string, not a list: a list of it
        "booker": {()},
        "both": {()},
        "reporter": {("too_short",)},  # not JSON: shown as it is
    }


def test_a_trace_whose_attributes_are_json_but_no_object_is_exported_with_its_columns(
    recorded: Recorded, tmp_path: Path
) -> None:
    triage = recorded.trace_ids["triage"]
    store = _edited_copy(
        recorded, tmp_path, ("UPDATE spans SET attributes = '[1, 2]' WHERE trace_id = ?", triage)
    )
    with open_store(store) as db:
        traces = {data.trace_id: data for data in iter_traces(db)}
    [span] = traces[triage].spans
    assert (span.name, span.stage, span.status_code) == ("chat qwen3-32b", None, "ERROR")


def test_iter_traces_gives_each_run_its_whole_books(recorded: Recorded, tmp_path: Path) -> None:
    ids = recorded.trace_ids
    store = _edited_copy(
        recorded,
        tmp_path,
        (
            """UPDATE ledger_reconciliations SET discrepancies = '[{"type": "unlogged_call", "call_id": "c7"}]'
               WHERE trace_id = ?""",
            ids["booker"],
        ),  # an older writer's discrepancy, without its detail
    )
    with open_store(store) as db:
        traces = {data.trace_id: data for data in iter_traces(db)}
        rows = {
            name: db.execute(
                "SELECT run_span_id, run_name, time_unix_nano FROM ledger_reconciliations WHERE trace_id = ?",
                (ids[name],),
            ).fetchone()
            for name in ("reporter", "booker")
        }
        entries = [
            tuple(row)
            for row in db.execute(
                "SELECT side, seq, call_id, tool_name, outcome, span_id, time_unix_nano FROM ledger_entries"
                " WHERE trace_id = ? ORDER BY seq",
                (ids["reporter"],),
            )
        ]
    for name in ("reporter", "booker"):
        [(run_span_id, books)] = traces[ids[name]].ledgers.items()
        assert (books.run_span_id, books.run_name, books.time_unix_nano) == tuple(rows[name])
        assert run_span_id == books.run_span_id
        assert books.time_unix_nano is not None
    reporter = traces[ids["reporter"]].ledgers[rows["reporter"][0]]
    assert [
        (e.side, e.seq, e.call_id, e.tool_name, e.outcome, e.span_id, e.time_unix_nano)
        for e in reporter.entries
    ] == entries
    tool_span = next(span.span_id for span in traces[ids["reporter"]].spans if span.tool_name == "search")
    first = reporter.entries[0]
    assert (first.side, first.tool_name, first.outcome, first.span_id) == (
        "observed",
        "search",
        "succeeded",
        tool_span,
    )
    assert all(e.time_unix_nano for e in reporter.entries)
    booker = traces[ids["booker"]].ledgers[rows["booker"][0]]
    assert [(d.type, d.call_id, d.detail) for d in booker.discrepancies] == [("unlogged_call", "c7", "")]
