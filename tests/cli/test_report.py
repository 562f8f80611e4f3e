"""``tallyspan report``: the summary of the store, as text and as the pinned JSON document."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from tests.cli.conftest import Filled

from tallyspan.cli import main


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_report_json_is_the_pinned_document(filled: Filled) -> None:
    code, output = _invoke("--db", str(filled.path), "report", "--json")
    assert code == 0
    assert json.loads(output) == {
        "format_version": 1,
        "command": "report",
        "data": {
            "store": str(filled.path),
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
        },
    }


def test_report_text_shows_every_section(filled: Filled) -> None:
    code, output = _invoke("--db", str(filled.path), "report")
    assert code == 0
    lines = output.splitlines()
    assert lines[0] == f"tallyspan report — {filled.path}"
    assert lines[1] == "  5 spans in 2 traces, 2 runs; 3 model calls (2 violating), 1 tool call"
    for heading in ("Models", "Stages", "Errors", "Violations by stage and type", "Ledger"):
        assert heading in lines
    assert "  qwen3-32b                   2           180            250" in lines
    assert "  weekly_report  too_short         contract_violation       1" in lines
    assert "  TimeoutError      1" in lines
    trace_prefix = filled.trace_id("invoke_agent reporter")[:12]
    assert f"  {trace_prefix}  reporter  no        yes                 2        1  unlogged_call" in lines
    assert lines[-1] == "  1 of 1 runs do not balance"


def test_report_reads_the_store_named_by_tallyspan_db(filled: Filled) -> None:
    code, output = _invoke("report", "--json")
    assert code == 0
    assert json.loads(output)["data"]["store"] == str(filled.path)


def test_report_on_an_empty_store_says_none(db_path: Path) -> None:
    from tallyspan._store_schema import connect

    connect(db_path).close()
    code, output = _invoke("report")
    assert code == 0
    assert "  0 spans in 0 traces, 0 runs; 0 model calls (0 violating), 0 tool calls" in output
    assert output.count("(none)") == 5


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
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: The tallyspan store at {bogus} could not be read: ")


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


def test_a_run_whose_books_balance_but_whose_protocol_broke_counts_as_unbalanced(filled: Filled) -> None:
    from tallyspan._store_schema import connect

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
    assert text.splitlines()[-1] == "  2 of 3 runs do not balance"
