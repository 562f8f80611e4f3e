"""``tallyspan report``: the summary of the store, as text and as the pinned JSON document."""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.util.types import AttributeValue
from tests.cli.conftest import RECORDED_TOKENS, Filled, Recorded

import tallyspan
from tallyspan import semconv
from tallyspan._store._store_schema import connect
from tallyspan.cli import main
from tallyspan.plugin import count
from tallyspan_exporters import SQLiteSpanExporter


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_report_json_is_the_pinned_document(filled: Filled) -> None:
    code, output = _invoke("--db", str(filled.path), "report", "--json")
    assert code == 0
    expected: dict[str, Any] = {
        "format_version": 1,
        "command": "report",
        "data": {
            "store": str(filled.path),
            "since_unix_nano": None,
            "spans": 5,
            "traces": 2,
            "runs": 2,
            "model_calls": 3,
            "tool_calls": 1,
            "violating_calls": 2,
            "models": [
                {"model": "qwen3-32b", "calls": 2, "input_tokens": 180, "output_tokens": 250},
                {"model": "gpt-4o-mini-2024-07-18", "calls": 1, "input_tokens": 10, "output_tokens": 5},
            ],
            "stages": [
                {"stage": "triage", "calls": 1, "violating": 1},
                {"stage": "weekly_report", "calls": 2, "violating": 1},
            ],
            "errors": [{"error_type": "TimeoutError", "count": 1}],
            "violations": [
                {
                    "stage": "triage",
                    "type": "not_japanese",
                    "failure_class": "language_corruption",
                    "count": 1,
                },
                {
                    "stage": "weekly_report",
                    "type": "missing_required",
                    "failure_class": "contract_violation",
                    "count": 1,
                },
                {
                    "stage": "weekly_report",
                    "type": "too_short",
                    "failure_class": "contract_violation",
                    "count": 1,
                },
            ],
            "failing_traces": [
                {
                    "trace_id": filled.trace_id("invoke_agent reporter"),
                    "run_name": "reporter",
                    "service_name": filled.spans["chat gpt-4o-mini"].resource.attributes["service.name"],
                    "start_unix_nano": filled.spans["invoke_agent reporter"].start_time,
                    "violating_calls": 1,
                    "violation_types": ["missing_required", "too_short"],
                    "balanced": False,
                    "discrepancy_types": ["unlogged_call"],
                },
                {
                    "trace_id": filled.trace_id("chat gpt-4o-mini"),
                    "run_name": "chat gpt-4o-mini",
                    "service_name": filled.spans["chat gpt-4o-mini"].resource.attributes["service.name"],
                    "start_unix_nano": filled.spans["chat gpt-4o-mini"].start_time,
                    "violating_calls": 1,
                    "violation_types": ["not_japanese"],
                    "balanced": None,
                    "discrepancy_types": [],
                },
            ],
            "failing_trace_count": 2,
            "ledger": [
                {
                    "trace_id": filled.trace_id("invoke_agent reporter"),
                    "run_span_id": filled.span_id("invoke_agent reporter"),
                    "run_name": "reporter",
                    "balanced": False,
                    "protocol_ok": True,
                    "discrepancy_types": ["unlogged_call"],
                    "observed_count": 2,
                    "claimed_count": 1,
                }
            ],
            "unbalanced_runs": 1,
            "losses": [],
        },
    }
    assert json.loads(output) == expected


def test_report_text_shows_every_section(filled: Filled) -> None:
    code, output = _invoke("--db", str(filled.path), "report")
    assert code == 0
    lines = output.splitlines()
    assert lines[0] == f"tallyspan report — {filled.path}"
    assert lines[1] == "  5 spans in 2 traces, 2 runs; 3 model calls (2 violating), 1 tool call"
    for heading in (
        "Failing traces (unbalanced first, then the latest)",
        "Models",
        "Stages",
        "Errors",
        "Violations by stage and type",
        "Ledger (unbalanced first, then the latest)",
    ):
        assert heading in lines
    assert "  qwen3-32b                   2           180            250" in lines
    assert "  weekly_report  too_short         contract_violation       1" in lines
    assert lines[lines.index("Errors") + 1 : lines.index("Errors") + 3] == [
        "  error type    calls",
        "  TimeoutError      1",
    ]
    trace_prefix = filled.trace_id("invoke_agent reporter")[:12]
    assert f"  {trace_prefix}  reporter  no        yes                 2        1  unlogged_call" in lines
    assert lines[-1] == "  1 of 1 runs do not balance"


def test_report_reads_the_store_named_by_tallyspan_db(filled: Filled) -> None:
    code, output = _invoke("report", "--json")
    assert code == 0
    assert json.loads(output)["data"]["store"] == str(filled.path)


def test_report_on_an_empty_store_says_none(db_path: Path) -> None:
    connect(db_path).close()
    code, output = _invoke("report")
    assert code == 0
    assert "  0 spans in 0 traces, 0 runs; 0 model calls (0 violating), 0 tool calls" in output
    assert output.count("(none)") == 6


def test_a_missing_store_is_named_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "tallyspan.db"
    result = CliRunner().invoke(main, ["--db", str(missing), "report"])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: No tallyspan store found at {missing} — run your app with tallyspan.instrument() "
        "or `tallyspan demo` first\n"
    )
    assert not missing.parent.exists()


def test_a_file_that_is_not_a_store_is_reported_not_raised(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_bytes(b"not a database at all" * 200)
    result = CliRunner().invoke(main, ["--db", str(bogus), "report"])
    assert result.exit_code == 2  # bad input: the file given is not a store
    assert result.output == (
        f"Error: {bogus} is not a tallyspan store: it is not an SQLite database; it was left untouched\n"
    )


def test_version_and_python_dash_m(tmp_path: Path) -> None:
    import subprocess
    import sys

    code, output = _invoke("--version")
    assert code == 0
    assert output == "tallyspan, version 0.1.0\n"
    completed = subprocess.run(
        [sys.executable, "-m", "tallyspan", "--db", str(tmp_path / "none.db"), "report"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 1
    assert "No tallyspan store found at" in completed.stderr


def _report(recorded: Recorded, *args: str) -> dict[str, Any]:
    code, output = _invoke("--db", str(recorded.path), "report", *args, "--json")
    assert code == 0, output
    data: dict[str, Any] = json.loads(output)["data"]
    return data


def test_a_call_traced_by_two_instrumentations_is_counted_once(recorded: Recorded) -> None:
    """The ``both`` run's one call, traced by tallyspan and openai-v2, has one chat span (ours joins theirs);
    a chain of nested spans is counted once too (below, with three)."""
    db = connect(recorded.path)
    try:
        chat_spans = db.execute("SELECT COUNT(*) FROM spans WHERE operation = 'chat'").fetchone()[0]
        both = db.execute(
            "SELECT COUNT(*) FROM spans WHERE operation = 'chat' AND trace_id = ?",
            (recorded.trace_ids["both"],),
        ).fetchone()[0]
    finally:
        db.close()
    assert (chat_spans, both) == (5, 1)
    data = _report(recorded)
    inputs, outputs = (sum(tokens[i] for tokens in RECORDED_TOKENS.values()) for i in (0, 1))
    assert (data["model_calls"], data["violating_calls"], data["tool_calls"]) == (5, 2, 2)
    assert data["models"] == [
        {"model": "qwen3-32b", "calls": 5, "input_tokens": inputs, "output_tokens": outputs}
    ]
    assert (inputs, outputs) == (76, 72)
    assert data["stages"] == [
        {"stage": "triage", "calls": 1, "violating": 1},
        {"stage": "weekly_report", "calls": 3, "violating": 1},
    ]


def test_report_names_the_failing_traces_unbalanced_first_then_the_latest(recorded: Recorded) -> None:
    data = _report(recorded)
    failing = data["failing_traces"]
    assert data["failing_trace_count"] == 3
    assert [trace["trace_id"] for trace in failing] == [
        recorded.trace_ids["booker"],
        recorded.trace_ids["triage"],
        recorded.trace_ids["reporter"],
    ]
    booker, triage, reporter = failing
    assert set(booker) == {
        "trace_id", "run_name", "service_name", "start_unix_nano", "violating_calls", "violation_types",
        "balanced", "discrepancy_types",
    }  # fmt: skip
    assert (booker["run_name"], booker["balanced"], booker["violating_calls"]) == ("booker", False, 0)
    assert (booker["violation_types"], booker["discrepancy_types"]) == (
        [],
        ["ledger_missing", "unlogged_call"],
    )
    assert (triage["run_name"], triage["balanced"], triage["violation_types"]) == (
        "chat qwen3-32b",
        None,
        ["refusal"],
    )
    assert (reporter["run_name"], reporter["balanced"], reporter["violating_calls"]) == ("reporter", True, 1)
    assert reporter["violation_types"] == ["missing_required", "not_japanese", "too_short"]
    assert reporter["start_unix_nano"] < triage["start_unix_nano"] - 2 * 86400 * 10**9
    assert [run["run_name"] for run in data["ledger"]] == ["booker", "both", "reporter"]
    assert _report(recorded, "--limit", "1")["failing_traces"] == failing[:1]


def test_report_text_gives_full_trace_ids_to_search_in_a_backend(recorded: Recorded) -> None:
    code, output = _invoke("--db", str(recorded.path), "report", "--limit", "2")
    assert code == 0
    lines = output.splitlines()
    heading = lines.index("Failing traces (unbalanced first, then the latest; 2 of 3)")
    assert lines[heading + 1].split() == [
        "start", "(UTC)", "trace", "run", "books", "violating", "calls", "types",
    ]  # fmt: skip
    booker = lines[heading + 2].split()
    assert booker[2:] == [
        recorded.trace_ids["booker"],
        "booker",
        "UNBALANCED",
        "0",
        "ledger_missing,",
        "unlogged_call",
    ]
    assert lines[heading + 3].split()[2:] == [
        recorded.trace_ids["triage"],
        "chat",
        "qwen3-32b",
        "-",
        "1",
        "refusal",
    ]
    assert lines[heading + 4].startswith("  Open one with `tallyspan spans --trace ID`")


def test_report_since_covers_only_what_started_since(recorded: Recorded) -> None:
    data = _report(recorded, "--since", "1d")
    assert data["since_unix_nano"] > 0
    assert (data["traces"], data["runs"], data["model_calls"], data["tool_calls"]) == (3, 3, 3, 1)
    assert [trace["run_name"] for trace in data["failing_traces"]] == ["booker", "chat qwen3-32b"]
    assert [run["run_name"] for run in data["ledger"]] == ["booker", "both"]
    assert {(v["stage"], v["type"]) for v in data["violations"]} == {("triage", "refusal")}
    code, output = _invoke("--db", str(recorded.path), "report", "--since", "1d")
    assert code == 0
    assert output.splitlines()[0].startswith(f"tallyspan report — {recorded.path} (since ")
    assert _report(recorded, "--since", "2000-01-01")["model_calls"] == 5


def test_report_since_rejects_what_is_not_a_time(recorded: Recorded) -> None:
    result = CliRunner().invoke(main, ["--db", str(recorded.path), "report", "--since", "last week"])
    assert result.exit_code == 2
    assert "Invalid value for '--since'" in result.output


def test_a_chain_of_three_model_spans_is_one_call_with_its_stage_tokens_and_violations(db_path: Path) -> None:
    """LangChain over tallyspan over openai-v2: three nested chat spans; whichever carries the stage, the
    tokens or a violation, the call is counted once, with all of them."""
    exporter = SQLiteSpanExporter(db_path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    run = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT}
    chat = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT, semconv.GEN_AI_REQUEST_MODEL: "m"}
    failed: dict[str, AttributeValue] = {
        semconv.VIOLATION_TYPES: ["too_short"],
        semconv.ERROR_TYPE: "TimeoutError",
    }
    ours = {**chat, **failed, semconv.STAGE: "weekly_report"}
    official: dict[str, AttributeValue] = {
        **chat,
        **failed,
        semconv.GEN_AI_RESPONSE_MODEL: "m-2025",
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 9,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 4,
    }
    violation = {
        semconv.VIOLATION_TYPE: "too_short",
        semconv.VIOLATION_FAILURE_CLASS: "contract_violation",
        semconv.VIOLATION_DETAIL: "3 chars < min_chars 60",
    }
    for _ in range(2):
        with (
            tracer.start_as_current_span("invoke_agent a", attributes=run),
            tracer.start_as_current_span("chat m (langchain)", attributes=chat),
            tracer.start_as_current_span("chat m (tallyspan)", attributes=ours) as middle,
        ):
            middle.add_event(semconv.EVENT_VIOLATION, violation)
            with tracer.start_as_current_span("chat m (openai-v2)", attributes=official):
                pass
    provider.shutdown()
    code, output = _invoke("--db", str(db_path), "report", "--json")
    assert code == 0
    data = json.loads(output)["data"]
    assert (data["spans"], data["model_calls"], data["violating_calls"]) == (8, 2, 2)
    assert data["models"] == [{"model": "m-2025", "calls": 2, "input_tokens": 18, "output_tokens": 8}]
    assert data["stages"] == [{"stage": "weekly_report", "calls": 2, "violating": 2}]
    assert data["errors"] == [{"error_type": "TimeoutError", "count": 2}]
    assert data["violations"] == [
        {"stage": "weekly_report", "type": "too_short", "failure_class": "contract_violation", "count": 2}
    ]
    assert [trace["violating_calls"] for trace in data["failing_traces"]] == [1, 1]


def test_a_run_whose_books_balance_but_whose_protocol_broke_counts_as_unbalanced(filled: Filled) -> None:
    from tallyspan._store._store_schema import connect

    db = connect(filled.path)
    for trace_id, balanced, protocol_ok in (("ab" * 16, 1, 0), ("cd" * 16, 1, 1)):
        db.execute(
            "INSERT INTO ledger_reconciliations (trace_id, run_span_id, run_name, balanced, protocol_ok,"
            " discrepancy_types, discrepancies, observed_count, claimed_count, time_unix_nano)"
            " VALUES (?, ?, ?, ?, ?, '[]', '[]', 1, 1, 2)",
            (trace_id, "ef" * 8, "other", balanced, protocol_ok),
        )
    db.commit()
    db.close()
    code, output = _invoke("--db", str(filled.path), "report", "--json")
    assert code == 0
    data = json.loads(output)["data"]
    assert len(data["ledger"]) == 3
    assert data["unbalanced_runs"] == 2  # the reporter's books, and the broken protocol
    _, text = _invoke("--db", str(filled.path), "report")
    assert "  2 of 3 runs do not balance" in text.splitlines()  # what tallyspan counted may follow


def test_report_shows_what_tallyspan_itself_lost(recorded: Recorded) -> None:
    """The recording process dropped one ledger claim (made outside any span): the report says so."""
    [process] = _report(recorded)["losses"]
    assert process["pid"] == os.getpid()
    assert process["counts"] == {"dropped.ledger_claims": 1}
    code, output = _invoke("--db", str(recorded.path), "report")
    assert code == 0
    lines = output.splitlines()
    heading = lines.index(
        "What tallyspan lost or failed on (tallyspan.stats() of the processes that wrote the store)"
    )
    assert lines[heading - 1] == ""
    assert lines[heading + 1].split() == ["pid", "service", "counter", "count"]
    assert lines[heading + 2].split() == [
        str(os.getpid()),
        process["service_name"],
        "dropped.ledger_claims",
        "1",
    ]


def test_losses_of_a_process_whose_store_saw_no_span_show_no_service(store_without_spans: Path) -> None:
    lonely = store_without_spans
    _, output = _invoke("--db", str(lonely), "report")
    assert output.splitlines()[-1].split() == [str(os.getpid()), "-", "dropped.ledger_claims", "1"]


def _utc(unix_nano: int) -> str:
    return datetime.fromtimestamp(unix_nano // 10**9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


@pytest.mark.usefixtures("tokyo_clock")  # times in UTC, not in the local zone
def test_report_text_is_exactly_the_pinned_text(recorded: Recorded) -> None:
    ids = recorded.trace_ids
    starts = {trace["trace_id"]: trace["start_unix_nano"] for trace in _report(recorded)["failing_traces"]}
    code, output = _invoke("--db", str(recorded.path), "report")
    assert code == 0
    lines = output.splitlines()
    assert lines[
        : lines.index(
            "What tallyspan lost or failed on (tallyspan.stats() of the processes that wrote the store)"
        )
    ] == [
        f"tallyspan report — {recorded.path}",
        "  10 spans in 4 traces, 4 runs; 5 model calls (2 violating), 2 tool calls",
        "",
        "Failing traces (unbalanced first, then the latest)",
        "  start (UTC)          trace                             run             books       violating calls  types",
        f"  {_utc(starts[ids['booker']])}  {ids['booker']}  booker          UNBALANCED"
        "                0  ledger_missing, unlogged_call",
        f"  {_utc(starts[ids['triage']])}  {ids['triage']}  chat qwen3-32b  -"
        "                         1  refusal",
        f"  {_utc(starts[ids['reporter']])}  {ids['reporter']}  reporter        balanced"
        "                  1  missing_required, not_japanese, too_short",
        "  Open one with `tallyspan spans --trace ID`, or search the trace id in your tracing backend.",
        "",
        "Models",
        "  model      calls  input tokens  output tokens",
        "  qwen3-32b      5            76             72",
        "",
        "Stages",
        "  stage          calls  violating",
        "  triage             1          1",
        "  weekly_report      3          1",
        "",
        "Errors",
        "  (none)",
        "",
        "Violations by stage and type",
        "  stage          type              failure class        calls",
        "  triage         refusal           contract_violation       1",
        "  weekly_report  missing_required  contract_violation       1",
        "  weekly_report  not_japanese      language_corruption      1",
        "  weekly_report  too_short         contract_violation       1",
        "",
        "Ledger (unbalanced first, then the latest)",
        "  trace         run       balanced  protocol ok  observed  claimed  discrepancies",
        f"  {ids['booker'][:12]}  booker    no        yes                 1        0  ledger_missing, unlogged_call",
        f"  {ids['both'][:12]}  both      yes       yes                 0        0  -",
        f"  {ids['reporter'][:12]}  reporter  yes       yes                 1        1  -",
        "  1 of 3 runs do not balance",
        "",
    ]


def test_report_text_of_an_empty_store_and_of_books_that_all_balance(
    db_path: Path, tracer_provider: TracerProvider
) -> None:
    connect(db_path).close()
    code, output = _invoke("report", "--since", "2000-01-01T00:00:00Z")
    assert code == 0
    assert output.splitlines() == [
        f"tallyspan report — {db_path} (since 2000-01-01 00:00:00 UTC)",
        "  0 spans in 0 traces, 0 runs; 0 model calls (0 violating), 0 tool calls",
        "",
        "Failing traces",
        "  (none)",
        "",
        "Models",
        "  (none)",
        "",
        "Stages",
        "  (none)",
        "",
        "Errors",
        "  (none)",
        "",
        "Violations by stage and type",
        "  (none)",
        "",
        "Ledger (unbalanced first, then the latest)",
        "  (none)",
    ]
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=())
    with tallyspan.run("quiet"):
        pass
    instrumentation.force_flush()
    tallyspan.uninstrument()
    _, output = _invoke("report")
    assert "  all books balance" in output.splitlines()  # what tallyspan counted may follow


def test_a_failed_command_prints_one_line_and_keeps_the_traceback_in_the_debug_log(
    db_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    connect(db_path).close()
    caplog.set_level(logging.DEBUG, logger="tallyspan.cli")
    bad_input = CliRunner().invoke(
        main, ["export", "--format", "diagnosis", "--judge", "http://127.0.0.1:9/v1", "o"]
    )
    assert (bad_input.exit_code, bad_input.output.splitlines()[-1]) == (
        2,
        "Error: --judge and --judge-model go together",
    )
    failed = CliRunner().invoke(main, ["ledger", "--run", "no-such-run"])
    assert (failed.exit_code, failed.output) == (
        1,
        "Error: No reconciled run has the id 'no-such-run' (a run span id or trace id, or a prefix)\n",
    )
    assert [(record.getMessage(), bool(record.exc_info)) for record in caplog.records] == [
        ("tallyspan command got bad input", True),
        ("tallyspan command failed", True),
    ]


def test_the_command_lists_its_subcommands_and_takes_only_a_file_as_the_store(tmp_path: Path) -> None:
    code, output = _invoke("--help")
    assert code == 0
    assert output.split("Options:")[0].split("\n", 1)[1] == (
        "\n  Make the silent failures of LLM agents visible: read what\n  tallyspan.instrument() recorded.\n\n"
    )
    assert "  --db FILE  The store to read. [default: TALLYSPAN_DB, else\n" in output
    commands = [line.split()[0] for line in output.split("Commands:\n", 1)[1].splitlines()]
    assert commands == ["check", "demo", "doctor", "export", "ledger", "prune", "report", "spans"]
    result = CliRunner().invoke(main, ["--db", str(tmp_path), "report"])
    assert result.exit_code == 2
    assert (
        result.output.splitlines()[-1]
        == f"Error: Invalid value for '--db': File '{tmp_path}' is a directory."
    )


def _reconciled(db_path: Path, trace_id: str, run_span_id: str, *, balanced: int, at: int | None) -> None:
    db = connect(db_path)
    with db:
        db.execute(
            "INSERT INTO ledger_reconciliations (trace_id, run_span_id, balanced, protocol_ok, time_unix_nano)"
            " VALUES (?, ?, ?, 1, ?)",
            (trace_id, run_span_id, balanced, at),
        )
    db.close()


def test_books_and_traces_of_an_unknown_time_count_as_the_oldest(db_path: Path) -> None:
    """A reconciliation without a time (an older writer's row) sorts after one at 1 ns; so does a failing
    trace the store has no span of (known from its books only) after one that started at 1 ns."""
    provider = TracerProvider()
    at_one = provider.get_tracer("test").start_span("at 1 ns", start_time=1)
    at_one.end(end_time=1)
    provider.shutdown()
    exporter = SQLiteSpanExporter(db_path)
    exporter.export([at_one])  # type: ignore[list-item]
    exporter.shutdown()
    one_trace = format(at_one.get_span_context().trace_id, "032x")
    _reconciled(db_path, "a" * 32, "1" * 16, balanced=1, at=None)
    _reconciled(db_path, "b" * 32, "2" * 16, balanced=1, at=1)
    _reconciled(db_path, one_trace, "3" * 16, balanced=0, at=2)
    _reconciled(db_path, "f" * 32, "4" * 16, balanced=0, at=3)  # books only: no span in the store
    code, output = _invoke("--db", str(db_path), "report", "--json")
    assert code == 0, output
    data = json.loads(output)["data"]
    assert [run["run_span_id"] for run in data["ledger"]] == ["4" * 16, "3" * 16, "2" * 16, "1" * 16]
    assert [(trace["trace_id"], trace["start_unix_nano"]) for trace in data["failing_traces"]] == [
        (one_trace, 1),
        ("f" * 32, None),
    ]


def test_waits_the_app_gave_are_reported_apart_from_what_tallyspan_lost(tmp_path: Path) -> None:
    """``backpressure.*`` counts the turns an app thread gave tallyspan's threads: under "lost or failed"
    a clean run looked as if it had lost something (every ``tallyspan demo`` showed one)."""
    tallyspan.ledger.claim("c1", "search", "succeeded")  # outside any run: dropped and counted
    count("backpressure.worker_turns", 2)
    path = tmp_path / "turns.db"
    exporter = SQLiteSpanExporter(path)
    exporter.export([])
    exporter.shutdown()
    code, output = _invoke("--db", str(path), "report")
    assert code == 0
    lines = output.splitlines()
    lost = lines.index(
        "What tallyspan lost or failed on (tallyspan.stats() of the processes that wrote the store)"
    )
    other = lines.index(
        "What else tallyspan counted (not losses: backpressure.* are waits the app gave its threads)"
    )
    assert [line.split() for line in lines[lost + 1 : other]] == [
        ["pid", "service", "counter", "count"],
        [str(os.getpid()), "-", "dropped.ledger_claims", "1"],
        [],
    ]
    assert [line.split() for line in lines[other + 1 :]] == [
        ["pid", "service", "counter", "count"],
        [str(os.getpid()), "-", "backpressure.worker_turns", "2"],
    ]
    [process] = json.loads(_invoke("--db", str(path), "report", "--json")[1])["data"]["losses"]
    assert process["counts"] == {"backpressure.worker_turns": 2, "dropped.ledger_claims": 1}
