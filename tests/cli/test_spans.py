"""``tallyspan spans [--trace ID]``: recorded spans in start order, as text and as the pinned JSON document."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from tests.cli.conftest import Filled

from tallyspan._store_schema import connect
from tallyspan.cli import main


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
