"""The pytest plugin, run by pytest itself (``pytester``): passing and failing agent tests, readable output.

Each inner test drives the real ``openai`` client against the local scripted server through the
``tallyspan`` fixture. Until tallyspan is reinstalled with its ``pytest11`` entry point, the inner runs
load the plugin with ``-p tallyspan.pytest_plugin``. Each inner run is a process of its own, as when a
user runs pytest (in one process, pytester would drop and re-import the client libraries the
instrumentors patched), so each runs several inner tests at once.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PLUGIN = "tallyspan.pytest_plugin"
GOOD_REPORT = "判定: 合格\\n今週の売上は前週比で五パーセント増えました。来週も同じ施策を続けます。"
BAD_REPORT = "Sales went up this week, thanks to the new campaign."

AGENT = """
import json
import openai
import pytest
import tallyspan as ts
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

CONTRACTS = {"contracts": {"weekly_report": {
    "language": "ja", "min_chars": 20, "required": [{"name": "verdict", "pattern": "^判定[:：]"}]
}}}


@ts.tool
def fetch_sales(week: str, tool_call_id: str) -> str:
    return "120"


def run_agent(report, log=True, phantom=None):
    replies = [ScriptedReply(tool_calls=[ScriptedToolCall("fetch_sales", {"week": "W18"}, "call_1")])]
    if log:
        arguments = {"call_id": "call_1", "tool_name": "fetch_sales", "claimed_outcome": "succeeded"}
        logs = [ScriptedToolCall("log_action", arguments, "call_1_log")]
        if phantom is not None:  # the agent also logs a call it never made
            logs.append(ScriptedToolCall("log_action", phantom, "call_9_log"))
        replies.append(ScriptedReply(tool_calls=logs))
    replies += [ScriptedReply(text="準備ができました"), ScriptedReply(text=report)]
    with OpenAICompatibleServer(replies=replies) as server, openai.OpenAI(
        base_url=server.base_url, api_key="k", max_retries=0
    ) as client, ts.run("weekly-agent"):
        messages = [{"role": "user", "content": "週報を書いて"}]
        for _ in range(3):
            message = client.chat.completions.create(model="qwen3", messages=messages).choices[0].message
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                if call.function.name == "fetch_sales":
                    fetch_sales(**json.loads(call.function.arguments), tool_call_id=call.id)
        with ts.stage("weekly_report"):
            client.chat.completions.create(model="qwen3", messages=messages)
"""


def _plugin_args() -> list[str]:
    installed = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", PLUGIN]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    options = ("-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function")
    return pytester.runpytest_subprocess(*_plugin_args(), *options, *args)


def _section(result: pytest.RunResult, test: str) -> str:
    """The failure report of one inner test."""
    text = result.stdout.str()
    start = text.index(f"_ {test} _")
    end = min(i for i in (text.find("\n___", start + 1), text.find("short test summary", start)) if i > 0)
    return text[start:end]


def _error_lines(result: pytest.RunResult) -> str:
    """What the failures said (pytest's ``E`` lines), without the test sources it quotes."""
    return "\n".join(line for line in result.stdout.lines if line.startswith("E "))


def test_passing_and_failing_agent_tests_read_well(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        AGENT
        + f'''
@pytest.mark.tallyspan(contracts=CONTRACTS)
def test_compliant(tallyspan):
    run_agent("{GOOD_REPORT}")
    tallyspan.assert_no_violations()
    tallyspan.assert_no_violations(stage="weekly_report")
    tallyspan.assert_ledger_balanced()
    assert tallyspan.verdicts == []
    assert [run.run_name for run in tallyspan.ledger] == ["weekly-agent"]
    assert {{span.name for span in tallyspan.spans}} >= {{"chat qwen3", "execute_tool fetch_sales"}}
    assert tallyspan.store is None


@pytest.mark.tallyspan(contracts=CONTRACTS)
def test_violating(tallyspan):
    run_agent("{BAD_REPORT}")
    tallyspan.assert_no_violations(stage="other_stage")  # nothing there
    tallyspan.assert_ledger_balanced()
    tallyspan.assert_no_violations(stage="weekly_report")


@pytest.mark.tallyspan(contracts=CONTRACTS)
def test_unlogged(tallyspan):
    run_agent("{GOOD_REPORT}", log=False)
    tallyspan.assert_no_violations()
    tallyspan.assert_ledger_balanced()
'''
    )
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=2)
    violating = _section(result, "test_violating")
    for line in (
        "tallyspan: 2 violations in stage 'weekly_report' on 1 span(s):",
        "chat qwen3 (span ",
        ", stage weekly_report, contract weekly_report): missing_required, not_japanese",
        "- missing_required: pattern 'verdict' not found",
        "fix: the deliverable must contain the pattern named verdict",
        "- not_japanese: primary language en, not ja",
        "fix: write the deliverable in Japanese",
    ):
        assert line in violating
    # Content is off: the output is never shown (the traceback quotes the test's own source, not it).
    assert "Sales went up" not in _error_lines(result)
    assert "output (captured)" not in violating
    unlogged = _section(result, "test_unlogged")
    for line in (
        "tallyspan: the books of 1 of 1 run(s) are not in order:",
        "weekly-agent (span ",
        "): unbalanced, protocol ok",
        "- unlogged_call call_1: fetch_sales succeeded, not logged",
        "- ledger_missing: 1 calls, no log",
        "fix: keep the log: call the log tool (log_action) after every tool call",
    ):
        assert line in unlogged


def test_captured_content_is_shown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        AGENT
        + f'''
@pytest.mark.tallyspan(contracts=CONTRACTS, capture_content=True)
def test_captured(tallyspan):
    run_agent("{BAD_REPORT}")
    tallyspan.assert_no_violations()
'''
    )
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    assert "output (captured): 'Sales went up this week, thanks to the new campaign.'" in _section(
        result, "test_captured"
    )


def test_the_assertions_raise_assertion_errors_that_pytest_raises_catches(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        AGENT
        + f'''
from tallyspan.pytest_plugin import LedgerNotInOrderError, ViolationsFoundError


@pytest.mark.tallyspan(contracts=CONTRACTS)
def test_expected_failures(tallyspan):
    run_agent("{BAD_REPORT}", log=False)
    with pytest.raises(AssertionError, match="^tallyspan: 2 violations on 1 span\\(s\\):\\n") as caught:
        tallyspan.assert_no_violations()
    assert type(caught.value) is ViolationsFoundError
    assert [verdict.types for verdict in caught.value.verdicts] == [("missing_required", "not_japanese")]
    with pytest.raises(AssertionError, match="^tallyspan: the books of 1 of 1 run\\(s\\) are not in order:") as caught:
        tallyspan.assert_ledger_balanced()
    assert type(caught.value) is LedgerNotInOrderError
    assert [run.run_name for run in caught.value.runs] == ["weekly-agent"]


@pytest.mark.tallyspan(contracts=CONTRACTS)
def test_unexpected_failure(tallyspan):
    run_agent("{BAD_REPORT}")
    tallyspan.assert_no_violations()
'''
    )
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    failed = _section(result, "test_unexpected_failure")
    assert (
        "E       tallyspan.pytest_plugin.ViolationsFoundError: tallyspan: 2 violations on 1 span(s):"
        in failed
    )
    assert "E           - missing_required: pattern 'verdict' not found" in failed
    assert "Failed:" not in result.stdout.str()


def test_an_app_instrumented_at_import_keeps_its_instrumentation_around_the_fixture(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        app="""
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan

APP_SPANS = InMemorySpanExporter()
# The README's one line, run when the app is imported, with an exporter to see what the app's chain gets.
INSTRUMENTATION = tallyspan.instrument(store=None, span_processors=[SimpleSpanProcessor(APP_SPANS)])
"""
    )
    pytester.makepyfile(
        AGENT
        + f'''
import app


def test_before():
    assert ts.instrumentation() is app.INSTRUMENTATION


@pytest.mark.tallyspan(contracts=CONTRACTS)
def test_in_the_fixture(tallyspan):
    assert ts.instrumentation() is tallyspan.instrumentation is not app.INSTRUMENTATION
    assert tallyspan.instrumentation.tracer_provider is app.INSTRUMENTATION.tracer_provider
    run_agent("{BAD_REPORT}")
    assert [verdict.types for verdict in tallyspan.verdicts] == [("missing_required", "not_japanese")]
    assert [run.run_name for run in tallyspan.ledger] == ["weekly-agent"]
    app.INSTRUMENTATION.force_flush()
    assert app.APP_SPANS.get_finished_spans() == ()  # the app's chain is paused for the test


def test_after():
    assert ts.instrumentation() is app.INSTRUMENTATION
    run_agent("{BAD_REPORT}")
    assert app.INSTRUMENTATION.force_flush()
    names = [span.name for span in app.APP_SPANS.get_finished_spans()]
    assert names.count("chat qwen3") == 4
    assert names.count("invoke_agent weekly-agent") == 1
'''
    )
    result = _run(pytester)
    result.assert_outcomes(passed=3)


def test_a_phantom_log_names_the_tool_it_claims_with_capture_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        AGENT
        + f'''
PHANTOM = {{
    "call_id": "call_9", "tool_name": "issue_refund", "claimed_outcome": "succeeded",
    "summary": "Refunded 12,000 yen to Tanaka Hanako",
}}


@pytest.mark.tallyspan(contracts=CONTRACTS)
def test_phantom(tallyspan):
    run_agent("{GOOD_REPORT}", phantom=PHANTOM)
    assert not tallyspan.capture_content
    assert [run.discrepancies for run in tallyspan.ledger] == [
        (("phantom_log", "call_9", "issue_refund claimed succeeded, never called"),)
    ]
    tallyspan.assert_ledger_balanced()
'''
    )
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    phantom = _section(result, "test_phantom")
    assert "E         weekly-agent (span " in phantom
    assert "): unbalanced, protocol ok\nE           - phantom_log call_9: " in phantom
    assert "- phantom_log call_9: issue_refund claimed succeeded, never called\n" in phantom
    assert "Tanaka" not in _error_lines(result)  # the summary is content: capture is off


def test_contracts_from_the_command_line_and_a_store_on_request(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    contracts = tmp_path / "contracts.yaml"
    contracts.write_text("contracts:\n  weekly_report:\n    min_chars: 500\n", encoding="utf-8")
    pytester.makepyfile(
        AGENT
        + f'''
@pytest.mark.tallyspan(store=True)
def test_report(tallyspan):
    run_agent("{GOOD_REPORT}")
    assert [v.types for v in tallyspan.verdicts] == [("too_short",)]
    assert tallyspan.store is not None
    tallyspan.flush()
    assert tallyspan.store.is_file()
'''
    )
    result = _run(pytester, "--tallyspan-contracts", str(contracts))
    result.assert_outcomes(passed=1)
