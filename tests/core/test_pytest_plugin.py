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


def run_agent(report, log=True):
    replies = [ScriptedReply(tool_calls=[ScriptedToolCall("fetch_sales", {"week": "W18"}, "call_1")])]
    if log:
        arguments = {"call_id": "call_1", "tool_name": "fetch_sales", "claimed_outcome": "succeeded"}
        replies.append(ScriptedReply(tool_calls=[ScriptedToolCall("log_action", arguments, "call_1_log")]))
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
    assert "Sales went up" not in result.stdout.str()  # content is off: the output is never shown
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


def test_captured_content_is_shown_and_instrumentation_is_never_shared(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        AGENT
        + f'''
from opentelemetry.sdk.trace import TracerProvider


@pytest.mark.tallyspan(contracts=CONTRACTS, capture_content=True)
def test_captured(tallyspan):
    run_agent("{BAD_REPORT}")
    tallyspan.assert_no_violations()


@pytest.fixture
def already():
    ts.instrument(tracer_provider=TracerProvider(), store=None)
    yield
    ts.uninstrument()


def test_shared(already, tallyspan):
    pass
'''
    )
    result = _run(pytester)
    result.assert_outcomes(failed=1, errors=1)
    assert "output (captured): 'Sales went up this week, thanks to the new campaign.'" in _section(
        result, "test_captured"
    )
    result.stdout.fnmatch_lines(["*tallyspan is already instrumented in this process*"])


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
