"""``tallyspan prune --older-than AGE [--dry-run]``: whole old traces leave the store, recent ones stay."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.cli.conftest import Filled, Recorded, age_trace

from tallyspan._store._store_prune import prune
from tallyspan._store._store_queries import open_store
from tallyspan._store._store_schema import connect
from tallyspan.cli import main
from tallyspan.cli.prune import parse_age
from tallyspan_exporters import SQLiteSpanExporter

TABLES = ("spans", "runs", "violations", "ledger_entries", "ledger_reconciliations", "self_stats")


def _table_counts(path: Path) -> dict[str, int]:
    db = connect(path)
    try:
        return {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}
    finally:
        db.close()


def _counts(filled: Filled) -> dict[str, int]:
    return _table_counts(filled.path)


def test_prune_deletes_the_old_trace_whole_and_keeps_the_recent_one(filled: Filled) -> None:
    before = _counts(filled)
    assert before["runs"] >= 1
    assert before["ledger_reconciliations"] == 1
    old = filled.trace_id("invoke_agent reporter")
    age_trace(filled.path, old, days=10)

    result = CliRunner().invoke(main, ["prune", "--older-than", "7d", "--json"], catch_exceptions=False)

    assert result.exit_code == 0
    document = json.loads(result.output)
    assert document["command"] == "prune"
    deleted = document["data"]["deleted"]
    assert deleted["spans"] == 4  # the run and its three children
    assert deleted["violations"] == 2
    assert deleted["ledger_reconciliations"] == 1
    assert document["data"]["dry_run"] is False
    after = _counts(filled)
    assert {table: before[table] - after[table] for table in TABLES} == deleted
    db = connect(filled.path)
    assert [row[0] for row in db.execute("SELECT DISTINCT trace_id FROM spans")] == [
        filled.trace_id("chat gpt-4o-mini")
    ]
    db.close()


def test_a_trace_still_running_across_the_cutoff_is_kept_whole(filled: Filled) -> None:
    """The run began ten days ago and its last span ended a minute ago: the trace is not older than seven
    days, so none of its rows go (a trace dated by its first span, or by its spans' starts, would go)."""
    before = _counts(filled)
    run = filled.trace_id("invoke_agent reporter")
    age_trace(filled.path, run, days=10)
    a_minute_ago = time.time_ns() - 60 * 10**9
    db = connect(filled.path)
    with db:
        db.execute(
            "UPDATE spans SET end_unix_nano = ? WHERE span_id = ?",
            (a_minute_ago, filled.span_id("invoke_agent reporter")),
        )
    db.close()

    result = CliRunner().invoke(main, ["prune", "--older-than", "7d", "--json"], catch_exceptions=False)

    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["data"]["deleted"] == {
        "spans": 0,
        "runs": 0,
        "violations": 0,
        "ledger_entries": 0,
        "ledger_reconciliations": 0,
        "self_stats": 0,
    }
    assert _counts(filled) == before


def test_prune_with_nothing_old_deletes_nothing(filled: Filled) -> None:
    before = _counts(filled)
    result = CliRunner().invoke(main, ["prune", "--older-than", "1h", "--vacuum"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "rows deleted" in result.output
    assert _counts(filled) == before


def test_dry_run_says_what_would_go_and_deletes_nothing(recorded: Recorded, tmp_path: Path) -> None:
    store = recorded.copy(tmp_path / "copy.db")
    before = _table_counts(store)
    dry = CliRunner().invoke(
        main,
        ["--db", str(store), "prune", "--older-than", "2d", "--dry-run", "--json"],
        catch_exceptions=False,
    )
    assert dry.exit_code == 0
    document = json.loads(dry.output)
    assert set(document["data"]) == {"older_than", "before_unix_nano", "dry_run", "deleted"}
    assert document["data"]["dry_run"] is True
    would = document["data"]["deleted"]
    assert would == {
        "spans": 4, "runs": 1, "violations": 3, "ledger_entries": 2, "ledger_reconciliations": 1, "self_stats": 0,
    }  # fmt: skip  # the reporter's trace, recorded three days ago
    assert _table_counts(store) == before
    text = CliRunner().invoke(
        main,
        ["--db", str(store), "prune", "--older-than", "2d", "--dry-run", "--vacuum"],
        catch_exceptions=False,
    )
    assert text.output.splitlines()[:2] == [
        f"tallyspan prune --dry-run: nothing deleted — {store}",
        "  table                   rows it would delete",
    ]
    assert _table_counts(store) == before
    real = CliRunner().invoke(main, ["--db", str(store), "prune", "--older-than", "2d", "--json"])
    assert json.loads(real.output)["data"]["deleted"] == would
    assert {table: before[table] - count for table, count in _table_counts(store).items()} == would


@pytest.mark.parametrize(
    ("text", "seconds"), [("90m", 5400.0), ("36h", 129600.0), ("7d", 604800.0), ("2w", 1209600.0)]
)
def test_ages_are_read_in_their_units(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["7", "7 days", "-1d", "d", ""])
def test_a_bad_age_is_a_usage_error_naming_the_option(filled: Filled, text: str) -> None:
    result = CliRunner().invoke(main, ["prune", "--older-than", text])
    assert result.exit_code == 2
    assert "--older-than" in result.output


@pytest.mark.parametrize("text", ["99999999999999999999d", "73001d", "1" + "0" * 400 + "w"])
def test_an_age_too_long_is_a_usage_error_not_an_overflow(filled: Filled, text: str) -> None:
    result = CliRunner().invoke(main, ["prune", "--older-than", text])
    assert result.exit_code == 2, result.output
    assert "--older-than" in result.output
    assert "longer than 200 years" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_bad_age_says_why_under_the_option_name(filled: Filled) -> None:
    not_an_age = CliRunner().invoke(main, ["prune", "--older-than", "7"])
    assert not_an_age.output.splitlines()[-1] == (
        "Error: Invalid value for --older-than: '7' is not an age like 90m, 36h, 7d or 2w"
    )
    too_long = CliRunner().invoke(main, ["prune", "--older-than", "73001d"])
    assert too_long.output.splitlines()[-1] == (
        "Error: Invalid value for --older-than: '73001d' is longer than 200 years"
    )


def test_exactly_200_years_is_taken_and_a_cutoff_before_1970_deletes_nothing(db_path: Path) -> None:
    # A span stamped at the epoch itself (a producer whose clock was never set) is not older than 1970.
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("test").start_span("at the epoch", start_time=0).end(end_time=0)
    provider.shutdown()
    exporter = SQLiteSpanExporter(db_path)
    exporter.export(memory.get_finished_spans())
    exporter.shutdown()
    assert parse_age("73000d") == 200 * 365 * 86400

    result = CliRunner().invoke(main, ["prune", "--older-than", "73000d", "--json"], catch_exceptions=False)

    assert result.exit_code == 0, result.output
    data = json.loads(result.output)["data"]
    assert data["before_unix_nano"] < 0  # 200 years back from now is before 1970: clamped to 0 by prune
    assert data["deleted"]["spans"] == 0
    assert _table_counts(db_path)["spans"] == 1


def test_prune_called_from_a_script_deletes_unless_asked_for_a_dry_run(filled: Filled) -> None:
    old = filled.trace_id("invoke_agent reporter")
    age_trace(filled.path, old, days=10)
    cutoff = time.time_ns() - 7 * 86400 * 10**9
    with open_store(filled.path, write=True) as db:
        would = prune(db, cutoff, dry_run=True)
        assert _table_counts(filled.path)["spans"] == 5
        assert prune(db, cutoff) == would
    assert would["spans"] == 4
    assert _table_counts(filled.path)["spans"] == 1
