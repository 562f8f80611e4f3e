"""``tallyspan demo``: the instrumented workflow on a local scripted model finds every scripted failure."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from tests.stats import without_backpressure

import tallyspan
from tallyspan import semconv
from tallyspan._store._store_schema import connect
from tallyspan.cli import main
from tallyspan.cli.demo import load_script

SCRIPT = load_script()


# Function-scoped on purpose: mutation testing maps code to the tests that run it, and a module-scoped
# fixture runs the demo inside the first test only, so the others could not catch a mutant in it.
@pytest.fixture
def demo_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """The demo as a user runs it (text output), with message content captured into the store."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    db = tmp_path / "store" / "tallyspan.db"
    result = CliRunner().invoke(main, ["--db", str(db), "demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return db, result.output


@pytest.fixture
def demo_json(db_path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["--db", str(db_path), "demo", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    return document


def _report(db: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["--db", str(db), "report", "--json"], catch_exceptions=False)
    data: dict[str, Any] = json.loads(result.output)["data"]
    return data


def test_demo_json_is_the_pinned_document(demo_json: dict[str, Any], db_path: Path) -> None:
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
    assert data["store"] == str(db_path)
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
    assert re.fullmatch(
        r"tallyspan demo: 9 runs of weekly-report-agent against a scripted local model "
        r"\(http://127\.0\.0\.1:\d+/v1\)",
        lines[0],
    )
    assert lines[1:5] == [
        "  instrumented: OpenAIInstrumentor; processors: store, ledger, checks",
        "",
        f"tallyspan report — {db}",
        "  59 spans in 9 traces, 9 runs; 39 model calls (7 violating), 11 tool calls",
    ]
    models = lines.index("Models")
    assert lines[models + 1 : models + 4] == [  # the tokens the scripted model counts for each request
        "  model               calls  input tokens  output tokens",
        "  qwen3-32b-instruct     39          6922           1065",
        "",
    ]
    assert any(
        line.split()[:3] == ["weekly_report", "chinese_in_japanese", "language_corruption"] for line in lines
    )
    assert "  1 of 9 runs do not balance" in lines
    assert lines[-2:] == [
        "",
        f"Next: `tallyspan --db {db} spans --violated` says why each failing call failed; `tallyspan --db {db}"
        " ledger --unbalanced` shows the books that do not balance; every command takes --json for scripts."
        " Each demo starts from a fresh store: a rerun shows the same report.",
    ]


def _without_times(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what differs from one run to the next: times, trace and span ids, and the
    GIL hand-overs a busy host made the demo's process count (``backpressure.*``, no loss)."""
    processes = [
        {**process, "counts": without_backpressure(process["counts"])} for process in report.get("losses", [])
    ]
    report = {**report, "losses": [process for process in processes if process["counts"]]}
    text = json.dumps(report, sort_keys=True)
    text = re.sub(
        r'"(\w*time\w*|\w*_unix_nano|trace_id|span_id|run_span_id)": ("[^"]*"|\d+|null)', r'"\1": 0', text
    )
    stripped: dict[str, Any] = json.loads(text)
    return stripped


def test_a_rerun_of_the_demo_starts_from_a_fresh_store_and_shows_the_same_report(db_path: Path) -> None:
    first = CliRunner().invoke(main, ["--db", str(db_path), "demo", "--json"], catch_exceptions=False)
    second = CliRunner().invoke(main, ["--db", str(db_path), "demo", "--json"], catch_exceptions=False)
    assert (first.exit_code, second.exit_code) == (0, 0), second.output
    reports = [json.loads(result.output)["data"]["report"] for result in (first, second)]
    assert [(report["runs"], report["spans"]) for report in reports] == [(9, 59), (9, 59)]  # not 18 runs
    assert _without_times(reports[1]) == _without_times(reports[0])
    assert _report(db_path)["runs"] == 9


def test_by_default_the_demo_writes_a_store_of_its_own_never_the_apps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TALLYSPAN_DB")
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        result = CliRunner().invoke(main, ["demo"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    assert f"tallyspan report — {Path('.tallyspan', 'demo.db')}" in result.output
    assert "`tallyspan --db .tallyspan/demo.db spans --violated`" in result.output
    assert sorted(path.name for path in (tmp_path / ".tallyspan").iterdir() if path.suffix == ".db") == [
        "demo.db"
    ]
    assert _report(tmp_path / ".tallyspan" / "demo.db")["runs"] == 9


def test_the_demo_leaves_a_store_with_more_than_a_demo_in_it_untouched(db_path: Path) -> None:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "shop"}))
    instrumentation = tallyspan.instrument(tracer_provider=provider, store=db_path, instrumentors=[])
    with tallyspan.run("checkout"):
        pass
    instrumentation.force_flush()
    tallyspan.uninstrument()
    provider.shutdown()
    before = db_path.read_bytes()
    result = CliRunner().invoke(main, ["--db", str(db_path), "demo"])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {db_path} holds more than a demo's spans, so the demo leaves it alone (each demo starts "
        "from a fresh store and replaces only the last demo's): pass --db with a path of its own\n"
    )
    assert db_path.read_bytes() == before
    assert _report(db_path)["runs"] == 1


def _conversation(run: dict[str, Any]) -> list[dict[str, Any]]:
    """What the agent sends for the report of ``run``, as the store records it with content captured."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "parts": [{"type": "text", "content": SCRIPT["system_prompt"]}]},
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": SCRIPT["user_prompt"].format(department=run["department"])}
            ],
        },
    ]

    def call_and_answer(call_id: str, name: str, arguments: dict[str, Any], response: str) -> None:
        messages.append(
            {
                "role": "assistant",
                "parts": [{"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}],
            }
        )
        messages.append(
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]}
        )

    for call in run["tool_calls"]:
        answer = f"エラー: {call['error']}" if "error" in call else json.dumps(call["result"])
        call_and_answer(call["call_id"], call["name"], call["arguments"], answer)
        if call["logged"]:
            claim = {
                "call_id": call["call_id"],
                "tool_name": call["name"],
                "claimed_outcome": call["claimed_outcome"],
                "summary": call["summary"],
            }
            call_and_answer(f"{call['call_id']}_log", "log_action", claim, "記録しました")
    messages.append({"role": "assistant", "parts": [{"type": "text", "content": SCRIPT["ready_reply"]}]})
    messages.append({"role": "user", "parts": [{"type": "text", "content": SCRIPT["write_prompt"]}]})
    return messages


def test_demo_agent_sends_the_whole_conversation_and_runs_each_tool_with_its_arguments(
    demo_text: tuple[Path, str],
) -> None:
    db = connect(demo_text[0])
    try:
        rows = db.execute(
            "SELECT name, stage, service_name, attributes FROM spans ORDER BY start_unix_nano, rowid"
        ).fetchall()
    finally:
        db.close()
    assert {row[2] for row in rows} == {"tallyspan-demo"}
    reports = [json.loads(row[3]) for row in rows if row[1] == SCRIPT["stage"]]
    assert [json.loads(attributes[semconv.GEN_AI_INPUT_MESSAGES]) for attributes in reports] == [
        _conversation(run) for run in SCRIPT["runs"]
    ]
    tools = [json.loads(row[3]) for row in rows if row[0].startswith("execute_tool ")]
    assert [
        (attributes[semconv.GEN_AI_TOOL_CALL_ID], json.loads(attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]))
        for attributes in tools
    ] == [
        (call["call_id"], {"tool_call_id": call["call_id"], "arguments": call["arguments"]})
        for run in SCRIPT["runs"]
        for call in run["tool_calls"]
    ]


def test_demo_without_the_openai_instrumentor_or_the_contract_engine_says_so(
    monkeypatch: pytest.MonkeyPatch, db_path: Path
) -> None:
    # What the imports see when those parts are not installed; the demo still runs and reports.
    monkeypatch.setitem(sys.modules, "tallyspan_instrumentors.openai", None)
    monkeypatch.setitem(sys.modules, "tallyspan._contract._contracts", None)
    result = CliRunner().invoke(main, ["demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:6] == [
        "  instrumented: nothing; processors: store, ledger, checks",
        "  note: the contract engine is not installed: the demo contracts were not loaded",
        "  note: the OpenAI instrumentor is not installed: model calls were not traced",
        "",
        f"tallyspan report — {db_path}",
    ]


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


def test_demo_without_the_checks_and_ledger_processors_says_what_was_not_done(
    monkeypatch: pytest.MonkeyPatch, db_path: Path
) -> None:
    # An install whose processors package lacks those two components: their entry points do not load.
    import tallyspan_processors

    monkeypatch.delattr(tallyspan_processors, "checks_component")
    monkeypatch.delattr(tallyspan_processors, "ledger_component")
    result = CliRunner().invoke(main, ["demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:6] == [
        "  instrumented: OpenAIInstrumentor; processors: store",
        "  note: the checks processor is not installed: deliverables were not checked",
        "  note: the ledger processor is not installed: the books were not kept",
        "",
        f"tallyspan report — {db_path}",
    ]


@pytest.mark.usefixtures("ascii_locale")
def test_demo_reads_its_script_as_utf8_whatever_the_locale(db_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["data"]["runs"] == len(SCRIPT["runs"])
