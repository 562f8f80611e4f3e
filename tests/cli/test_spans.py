"""``tallyspan spans``: recorded spans in start order with each violation's detail, filtered by trace,
violations, stage, type and time; as text and as the pinned JSON document."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.cli.conftest import Filled, Recorded

from tallyspan import semconv
from tallyspan._store._store_schema import connect
from tallyspan.cli import main
from tallyspan_exporters import SQLiteSpanExporter


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_spans_json_is_the_pinned_document(filled: Filled) -> None:
    trace_id = filled.trace_id("chat gpt-4o-mini")
    code, output = _invoke("spans", "--trace", trace_id, "--json")
    assert code == 0
    span = filled.spans["chat gpt-4o-mini"]
    assert span.start_time is not None
    assert span.end_time is not None
    assert json.loads(output) == {
        "format_version": 1,
        "command": "spans",
        "data": [
            {
                "trace_id": trace_id,
                "span_id": filled.span_id("chat gpt-4o-mini"),
                "parent_span_id": None,
                "name": "chat gpt-4o-mini",
                "operation": "chat",
                "model": "gpt-4o-mini-2024-07-18",
                "stage": "triage",
                "start_unix_nano": span.start_time,
                "duration_ms": round((span.end_time - span.start_time) / 1e6, 3),
                "status_code": "UNSET",
                "error_type": None,
                "input_tokens": 10,
                "output_tokens": 5,
                "violation_types": ["not_japanese"],
                "failure_class": None,
                "violations": [
                    {"type": "not_japanese", "failure_class": "language_corruption", "detail": None}
                ],
            }
        ],
    }


def test_spans_of_a_trace_by_prefix_in_start_order(filled: Filled) -> None:
    trace_id = filled.trace_id("invoke_agent reporter")
    code, output = _invoke("spans", "--trace", trace_id[:12].upper(), "--json")
    assert code == 0
    rows = json.loads(output)["data"]
    assert [row["name"] for row in rows] == [
        "invoke_agent reporter",
        "chat qwen3-32b",
        "execute_tool fetch_metrics",
        "chat qwen3-32b ok",
    ]
    assert {row["trace_id"] for row in rows} == {trace_id}
    assert rows[1]["parent_span_id"] == filled.span_id("invoke_agent reporter")
    assert rows[1]["violation_types"] == ["missing_required", "too_short"]
    assert rows[2]["error_type"] == "TimeoutError"


def test_spans_without_trace_lists_the_latest_in_start_order(filled: Filled) -> None:
    code, output = _invoke("spans", "--json")
    assert code == 0
    assert [row["name"] for row in json.loads(output)["data"]] == [
        "invoke_agent reporter",
        "chat qwen3-32b",
        "execute_tool fetch_metrics",
        "chat qwen3-32b ok",
        "chat gpt-4o-mini",
    ]
    code, output = _invoke("spans", "--limit", "2", "--json")
    assert [row["name"] for row in json.loads(output)["data"]] == ["chat qwen3-32b ok", "chat gpt-4o-mini"]


def test_spans_text_groups_by_trace(filled: Filled) -> None:
    code, output = _invoke("spans")
    assert code == 0
    lines = output.splitlines()
    assert lines[0] == f"trace {filled.trace_id('invoke_agent reporter')}"
    assert lines[1].split() == [
        "start", "(UTC)", "span", "name", "stage", "ms", "status", "tokens", "in/out", "violations",
    ]  # fmt: skip
    bad = next(line for line in lines if "chat qwen3-32b " in line and "missing_required" in line)
    assert filled.span_id("chat qwen3-32b") in bad
    assert "weekly_report" in bad
    assert "100/50" in bad
    assert bad.endswith("missing_required, too_short")
    assert f"trace {filled.trace_id('chat gpt-4o-mini')}" in lines
    assert any(line.endswith("TimeoutError") for line in lines)


def test_an_unknown_trace_lists_nothing(filled: Filled) -> None:
    assert _invoke("spans", "--trace", "ffff%_") == (0, "No spans found.\n")
    _, output = _invoke("spans", "--trace", "0" * 32, "--json")
    assert json.loads(output)["data"] == []


def test_spans_of_an_empty_store(db_path: Path) -> None:
    connect(db_path).close()
    assert _invoke("spans") == (0, "No spans found.\n")


def test_spans_without_a_store_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "x.db"
    result = CliRunner().invoke(main, ["--db", str(missing), "spans"])
    assert result.exit_code == 1
    assert f"No tallyspan store found at {missing}" in result.output


def _names(recorded: Recorded, *args: str) -> list[tuple[str, str | None]]:
    code, output = _invoke("--db", str(recorded.path), "spans", *args, "--json")
    assert code == 0, output
    return [(row["name"], row["stage"]) for row in json.loads(output)["data"]]


def test_spans_json_gives_each_violation_with_its_detail(recorded: Recorded) -> None:
    code, output = _invoke("--db", str(recorded.path), "spans", "--violated", "--json")
    assert code == 0
    rows = json.loads(output)["data"]
    assert [(row["trace_id"], row["stage"]) for row in rows] == [
        (recorded.trace_ids["reporter"], "weekly_report"),
        (recorded.trace_ids["triage"], "triage"),
    ]
    too_short, missing, english = rows[0]["violations"]
    assert too_short == {
        "type": "too_short",
        "failure_class": "contract_violation",
        "detail": "26 chars < min_chars 60",
    }
    assert missing == {
        "type": "missing_required",
        "failure_class": "contract_violation",
        "detail": "pattern 'verdict_line' not found",
    }
    assert set(english) == {"type", "failure_class", "detail"}
    assert (english["type"], english["failure_class"]) == ("not_japanese", "language_corruption")
    assert english["detail"].startswith("primary language en, not ja")
    (refusal,) = rows[1]["violations"]
    assert (refusal["type"], refusal["failure_class"]) == ("refusal", "contract_violation")
    assert refusal["detail"]
    assert set(rows[1]) == {
        "trace_id", "span_id", "parent_span_id", "name", "operation", "model", "stage", "start_unix_nano",
        "duration_ms", "status_code", "error_type", "input_tokens", "output_tokens", "violation_types",
        "failure_class", "violations",
    }  # fmt: skip


def test_spans_text_says_why_each_violating_span_failed(recorded: Recorded) -> None:
    code, output = _invoke("--db", str(recorded.path), "spans", "--violated")
    assert code == 0
    lines = output.splitlines()
    why = lines.index(next(line for line in lines if line.startswith("  why ") and "chat qwen3-32b" in line))
    assert lines[why + 1 : why + 3] == [
        "    too_short (contract_violation): 26 chars < min_chars 60",
        "    missing_required (contract_violation): pattern 'verdict_line' not found",
    ]
    assert lines[why + 3].startswith("    not_japanese (language_corruption): primary language en, not ja")
    assert any(line.startswith("    refusal (contract_violation): ") for line in lines)
    assert not any("execute_tool" in line for line in lines)


def test_stage_filter_keeps_the_calls_of_each_stage_named(recorded: Recorded) -> None:
    assert _names(recorded, "--stage", "triage") == [("chat qwen3-32b", "triage")]
    assert _names(recorded, "--stage", "weekly_report", "--stage", "triage") == [
        ("chat qwen3-32b", "weekly_report"),
        ("chat qwen3-32b", "weekly_report"),
        ("chat qwen3-32b", "triage"),
        ("chat qwen3-32b", "weekly_report"),
    ]
    assert _names(recorded, "--stage", "weekly_reprot") == []


def test_type_filter_keeps_spans_with_a_violation_of_that_type(recorded: Recorded) -> None:
    assert _names(recorded, "--type", "refusal") == [("chat qwen3-32b", "triage")]
    assert _names(recorded, "--type", "refusal", "--type", "too_short") == [
        ("chat qwen3-32b", "weekly_report"),
        ("chat qwen3-32b", "triage"),
    ]
    assert _names(recorded, "--type", "refusal", "--stage", "weekly_report") == []


def test_since_takes_an_age_or_an_iso_time(recorded: Recorded) -> None:
    everything = _names(recorded)
    assert len(everything) == 10
    recent = _names(recorded, "--since", "1d")
    assert len(recent) == 6  # the reporter's trace was recorded three days ago
    assert _names(recorded, "--since", "4d") == everything
    assert _names(recorded, "--since", "2w") == everything
    assert _names(recorded, "--since", "1970-01-01T00:00:00Z") == everything
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    assert _names(recorded, "--since", tomorrow) == []
    two_days_ago = (datetime.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")  # local time, no offset
    assert _names(recorded, "--since", two_days_ago) == recent
    assert _names(recorded, "--violated", "--since", "1d") == [("chat qwen3-32b", "triage")]


def test_trace_prefix_combines_with_the_other_filters(recorded: Recorded) -> None:
    reporter = recorded.trace_ids["reporter"][:10]
    assert len(_names(recorded, "--trace", reporter)) == 4
    assert (
        len(_names(recorded, "--trace", reporter, "--limit", "1")) == 4
    )  # the limit is for the latest spans
    assert _names(recorded, "--trace", reporter, "--violated") == [("chat qwen3-32b", "weekly_report")]
    assert _names(recorded, "--trace", reporter, "--since", "1d") == []


@pytest.mark.parametrize("since", ["yesterday", "15", "-1d", "2026-13-01", "1e400d"])
def test_a_bad_since_is_a_usage_error_naming_the_option(recorded: Recorded, since: str) -> None:
    result = CliRunner().invoke(main, ["--db", str(recorded.path), "spans", "--since", since])
    assert result.exit_code == 2
    assert "--since" in result.output


def test_a_huge_age_means_since_the_beginning(recorded: Recorded) -> None:
    assert len(_names(recorded, "--since", "999999999999w")) == 10


# --- the text table, exactly -----------------------------------------------------------------------

#: 2026-01-31 09:00:05.123456789 UTC: the run starts then, its call 250 ms later.
RUN_START = 1_769_850_005_123_456_789
CALL_START = RUN_START + 250_000_000


def _timed_store(db_path: Path) -> dict[str, ReadableSpan]:
    """Two traces at fixed times through the real exporter: a run (no tokens) around a call with a
    violation that names neither class nor detail, and a call whose start the SDK clock gave."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    run = tracer.start_span(
        "invoke_agent planner",
        attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT},
        start_time=RUN_START,
    )
    with trace.use_span(run, end_on_exit=False):
        call = tracer.start_span(
            "chat m",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
                semconv.STAGE: "plan",
                semconv.GEN_AI_USAGE_INPUT_TOKENS: 7,
                semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
                semconv.VIOLATION_TYPES: ["a_newer_type"],
                semconv.VIOLATION_COUNT: 1,
            },
            start_time=CALL_START,
        )
        call.add_event(semconv.EVENT_VIOLATION, {semconv.VIOLATION_TYPE: "a_newer_type"})
        call.end(end_time=CALL_START + 1_500_000)
    run.end(end_time=RUN_START + 2_000_000_000)
    tracer.start_span("chat other", start_time=RUN_START + 3_600_000_000_000).end(
        end_time=RUN_START + 3_600_001_000_000
    )
    provider.shutdown()
    spans = {span.name: span for span in memory.get_finished_spans()}
    exporter = SQLiteSpanExporter(db_path)
    exporter.export(list(spans.values()))
    exporter.shutdown()
    return spans


def _hex_ids(span: ReadableSpan) -> tuple[str, str]:
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


@pytest.mark.usefixtures("tokyo_clock")  # a local clock would show 18:00
def test_spans_text_is_the_table_per_trace_in_utc_whatever_the_local_zone(db_path: Path) -> None:
    spans = _timed_store(db_path)
    code, output = _invoke("spans")
    assert code == 0
    run_trace, run_id = _hex_ids(spans["invoke_agent planner"])
    _, call_id = _hex_ids(spans["chat m"])
    other_trace, other_id = _hex_ids(spans["chat other"])
    assert output.splitlines() == [
        f"trace {run_trace}",
        "  start (UTC)   span              name                  stage      ms  status  tokens in/out  violations",
        f"  09:00:05.123  {run_id}  invoke_agent planner  -      2000.0  UNSET   -              -",
        f"  09:00:05.373  {call_id}  chat m                plan      1.5  UNSET   7/3            a_newer_type",
        f"  why {call_id} (chat m):",
        "    a_newer_type (unknown class): -",
        "",
        f"trace {other_trace}",
        "  start (UTC)   span              name        stage   ms  status  tokens in/out  violations",
        f"  10:00:05.123  {other_id}  chat other  -      1.0  UNSET   -              -",
    ]
