"""``tallyspan demo``: the instrumented workflow on a local scripted model finds every scripted failure."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan.cli import main
from tallyspan.cli.demo import load_script

SCRIPT = load_script()


@pytest.fixture(scope="module")
def demo_text(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo run once for the module, as a user runs it (text output)."""
    db = tmp_path_factory.mktemp("demo") / "store" / "tallyspan.db"
    result = CliRunner().invoke(main, ["--db", str(db), "demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return db, result.output


@pytest.fixture(scope="module")
def demo_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db = tmp_path_factory.mktemp("demo-json") / "tallyspan.db"
    result = CliRunner().invoke(main, ["--db", str(db), "demo", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    return document


def _report(db: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["--db", str(db), "report", "--json"], catch_exceptions=False)
    data: dict[str, Any] = json.loads(result.output)["data"]
    return data


def test_demo_json_is_the_pinned_document(demo_json: dict[str, Any]) -> None:
    assert demo_json["format_version"] == 1
    assert demo_json["command"] == "demo"
    data = demo_json["data"]
    assert set(data) == {
        "store",
        "model_url",
        "agent",
        "runs",
        "instrumented",
        "components",
        "notes",
        "report",
    }
    assert data["agent"] == "weekly-report-agent"
    assert data["runs"] == len(SCRIPT["runs"]) == 9
    assert data["model_url"].startswith("http://127.0.0.1:")
    assert data["instrumented"] == ["OpenAIInstrumentor"]
    assert set(data["components"]) == {"store", "checks", "ledger"}
    assert data["notes"] == []
    assert set(data["report"]) == {
        "store", "since_unix_nano", "spans", "traces", "runs", "model_calls", "tool_calls", "violating_calls",
        "models", "stages", "errors", "violations", "failing_traces", "failing_trace_count", "ledger",
        "unbalanced_runs", "losses",
    }  # fmt: skip


def test_demo_records_every_call_of_every_run(demo_text: tuple[Path, str]) -> None:
    report = _report(demo_text[0])
    tool_calls = sum(len(run["tool_calls"]) for run in SCRIPT["runs"])
    log_calls = sum(call["logged"] for run in SCRIPT["runs"] for call in run["tool_calls"])
    model_calls = tool_calls + log_calls + 2 * len(SCRIPT["runs"])  # + "ready" and the report, per run
    assert (report["runs"], report["traces"], report["tool_calls"], report["model_calls"]) == (9, 9, 11, 39)
    assert report["model_calls"] == model_calls
    assert report["spans"] == model_calls + tool_calls + len(SCRIPT["runs"])
    assert report["models"][0]["model"] == SCRIPT["model"]
    assert report["models"][0]["calls"] == model_calls
    assert report["errors"] == [{"error_type": "ToolUnavailableError", "count": 1}]


def test_demo_finds_exactly_the_scripted_failures(demo_text: tuple[Path, str]) -> None:
    report = _report(demo_text[0])
    expected = Counter(kind for run in SCRIPT["runs"] for kind in run["expected_violations"])
    assert {row["type"]: row["count"] for row in report["violations"]} == dict(expected)
    assert {row["stage"] for row in report["violations"]} == {"weekly_report"}
    failing = sum(1 for run in SCRIPT["runs"] if run["expected_violations"])
    assert report["stages"] == [{"stage": "weekly_report", "calls": 9, "violating": failing}]
    assert report["violating_calls"] == failing == 7


def test_demo_books_balance_except_for_the_unlogged_call(demo_text: tuple[Path, str]) -> None:
    report = _report(demo_text[0])
    assert len(report["ledger"]) == 9
    assert report["unbalanced_runs"] == 1
    unbalanced = [run for run in report["ledger"] if not run["balanced"]]
    expected = next(run for run in SCRIPT["runs"] if run.get("expected_ledger"))
    assert [run["discrepancy_types"] for run in unbalanced] == [expected["expected_ledger"]]
    assert unbalanced[0]["observed_count"] == 2
    assert unbalanced[0]["claimed_count"] == 1
    assert all(run["protocol_ok"] for run in report["ledger"])


def test_demo_prints_the_report(demo_text: tuple[Path, str]) -> None:
    db, output = demo_text
    lines = output.splitlines()
    assert lines[0].startswith(
        "tallyspan demo: 9 runs of weekly-report-agent against a scripted local model ("
    )
    assert lines[1] == "  instrumented: OpenAIInstrumentor; processors: store, ledger, checks"
    assert f"tallyspan report — {db}" in lines
    assert "  59 spans in 9 traces, 9 runs; 39 model calls (7 violating), 11 tool calls" in lines
    assert any(
        line.split()[:3] == ["weekly_report", "chinese_in_japanese", "language_corruption"] for line in lines
    )
    assert "  1 of 9 runs do not balance" in lines
    assert lines[-1].startswith("Next: `tallyspan spans --violated` says why each failing call failed")


def test_demo_leaves_nothing_instrumented(demo_text: tuple[Path, str]) -> None:
    assert tallyspan.instrumentation() is None
    assert demo_text[0].is_file()


def test_demo_without_openai_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch, db_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # what `import openai` sees when it is not installed
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 1
    assert (
        result.output == "Error: `tallyspan demo` needs the openai package: pip install 'tallyspan[openai]'\n"
    )
    assert not db_path.exists()


def test_demo_refuses_to_take_over_an_active_instrumentation(db_path: Path) -> None:
    provider = TracerProvider()
    active = tallyspan.instrument(tracer_provider=provider, store=db_path, instrumentors=[])
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: tallyspan is already instrumented in this process; the demo needs its own set-up\n"
    )
    assert tallyspan.instrumentation() is active
    tallyspan.uninstrument()
    provider.shutdown()
