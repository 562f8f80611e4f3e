"""``tallyspan report --html`` opened in a real browser (headless Chromium): what a person sees.

The store is written by the real chain (``tallyspan.instrument()``, a real OpenAI client, a local
model), four runs moved back in time so that they fall in different periods of the chart, and names
from the app (a tool, a run, a stage, a model) that are markup trying to run a script. Skips where
Chromium is absent; fails so in CI (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from tests.browser import (
    INSTALL_HINT,
    Element,
    chromium_executable,
    dump_dom,
    parse_dom,
    png_size,
    screenshot,
)
from tests.cli.conftest import GOOD_REPORT, age_trace
from tests.conftest import skip_or_fail_in_ci

import tallyspan
from tallyspan._store._store_schema import connect
from tallyspan.cli import main
from tallyspan.cli._html import CONTENT_SECURITY_POLICY
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

TITLE = "tallyspan report"
PLANTED_TOOL = "<script>document.title='pwned by a tool name'</script>"
PLANTED_RUN = "<img src=x onerror=\"document.title='pwned by a run name'\">"
PLANTED_STAGE = "<svg onload=\"document.title='pwned by a stage name'\">triage"
PLANTED_MODEL = "qwen\"><script>document.title='pwned by a model name'</script>"
CONTRACTS = {
    "contracts": {
        "weekly_report": {"language": "ja", "min_chars": 20},
        PLANTED_STAGE: {"allow_refusal": False},
    }
}
ENGLISH_REPORT = "Sales went well this week: the team closed five deals and opened fourteen new ones."
REFUSAL = "申し訳ありませんが、そのご依頼にはお応えできません。"
FINE = "今週の問い合わせは三件で、すべて対応済みです。"


@dataclass(frozen=True)
class Scenario:
    """The store and the trace id of each run, by run name."""

    path: Path
    traces: dict[str, str]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """Four runs, written by the real chain; only the store is shared (the tests render the page themselves).

    - ``PLANTED_RUN``, three hours before the others: two tool calls, the planted one never logged (the books do not
      balance); a good weekly report;
    - ``reporter``, an hour before the last two: a weekly report in English (not_japanese); a fine
      answer in the planted stage;
    - ``triager``: a good weekly report; a refusal in the planted stage;
    - ``clean``, a minute later: a good weekly report.
    """
    import openai

    folder = tmp_path_factory.mktemp("html")
    db_path, contracts = folder / "tallyspan.db", folder / "contracts.json"
    contracts.write_text(json.dumps(CONTRACTS), encoding="utf-8")
    replies = [ScriptedReply(text=text) for text in (GOOD_REPORT, ENGLISH_REPORT, FINE, GOOD_REPORT)]
    replies += [ScriptedReply(text=REFUSAL), ScriptedReply(text=GOOD_REPORT)]
    tallyspan.reset_stats()
    provider = TracerProvider()
    instrumentation = tallyspan.instrument(
        contracts=CONTRACTS, tracer_provider=provider, store=db_path, instrumentors=["tallyspan_openai"]
    )

    @tallyspan.tool(name="search")
    def search(tool_call_id: str) -> str:
        return "14"

    @tallyspan.tool(name=PLANTED_TOOL)
    def planted(tool_call_id: str) -> str:
        return "done"

    def ask(client: openai.OpenAI, stage: str, model: str = "qwen3-32b") -> None:
        with tallyspan.stage(stage):
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "報告して"}])

    traces: dict[str, str] = {}
    try:
        with (
            OpenAICompatibleServer(replies=replies) as server,
            openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client,
        ):
            for name in (PLANTED_RUN, "reporter", "triager", "clean"):
                with tallyspan.run(name) as span:
                    if name == PLANTED_RUN:
                        search(tool_call_id="call_a1")
                        tallyspan.ledger.claim("call_a1", "search", "succeeded")
                        planted(tool_call_id="call_a2")  # never logged
                        ask(client, "weekly_report", PLANTED_MODEL)
                    elif name in ("reporter", "triager"):
                        ask(client, "weekly_report")
                        ask(client, PLANTED_STAGE)
                    else:
                        ask(client, "weekly_report")
                traces[name] = format(span.get_span_context().trace_id, "032x")
        instrumentation.force_flush()
    finally:
        tallyspan.uninstrument()
        provider.shutdown()
    # Each run moved to a fixed minute of a whole hour: its calls fall in one 10-minute period whatever
    # the clock said, and the chart's 3 h 6 min need 10-minute periods (5-minute ones would be 38).
    hour = 3600 * 10**9
    anchor = time.time_ns() // hour * hour - 6 * hour
    for name, minutes in ((PLANTED_RUN, 5), ("reporter", 125), ("triager", 185), ("clean", 186)):
        _move(db_path, traces[name], anchor + minutes * 60 * 10**9)
    return Scenario(db_path, traces)


def _move(db_path: Path, trace_id: str, start_unix_nano: int) -> None:
    """Move one trace so that its first span starts at ``start_unix_nano``."""
    db = connect(db_path)
    try:
        (first,) = db.execute(
            "SELECT MIN(start_unix_nano) FROM spans WHERE trace_id = ?", (trace_id,)
        ).fetchone()
    finally:
        db.close()
    age_trace(db_path, trace_id, days=(first - start_unix_nano) / 86400e9)


@pytest.fixture
def chromium() -> str:
    """Chromium's path; skips where it is absent, fails so in CI."""
    found = chromium_executable()
    if found is None:
        skip_or_fail_in_ci(INSTALL_HINT)
    return found


def _write_page(scenario: Scenario, out: Path) -> Path:
    result = CliRunner().invoke(
        main, ["--db", str(scenario.path), "report", "--html", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return out


def _opened(page: Path) -> Element:
    return parse_dom(dump_dom(page))


def _title(dom: Element) -> str:
    return dom.find("title").text


def test_failing_runs_come_first_each_led_by_its_reason(
    chromium: str, scenario: Scenario, tmp_path: Path
) -> None:
    dom = _opened(_write_page(scenario, tmp_path / "report.html"))
    sections = [section.attributes.get("id") for section in dom.find("main").children]
    assert sections[0] == "failing"
    runs = dom.find("section", id="failing").find_all("li", cls="run")
    # The books that do not balance first, then the latest: triager before reporter (an hour earlier).
    assert [run.attributes["data-trace"] for run in runs] == [
        scenario.traces[PLANTED_RUN],
        scenario.traces["triager"],
        scenario.traces["reporter"],
    ]
    assert [[reason.text for reason in run.find_all("div", cls="reason")] for run in runs] == [
        [f"ledger unbalanced: unlogged_call {PLANTED_TOOL}"],
        ["refusal in 1 of 2 calls"],
        ["not_japanese in 1 of 2 calls"],
    ]
    # The reason is the first thing in each entry, before the run's name.
    assert all("reason" in run.children[0].classes for run in runs)
    assert [run.find(cls="name").text for run in runs] == [PLANTED_RUN, "triager", "reporter"]


def test_chart_has_one_bar_per_stage_and_period_with_calls(
    chromium: str, scenario: Scenario, tmp_path: Path
) -> None:
    dom = _opened(_write_page(scenario, tmp_path / "report.html"))
    chart = dom.find("section", id="timeline").find("svg")
    bars = chart.find_all("g", cls="bar")
    got = [
        (
            bar.attributes["data-stage"],
            int(bar.attributes["data-calls"]),
            int(bar.attributes["data-violating"]),
        )
        for bar in bars
    ]
    # Stages by name ('<' sorts before 'w'); in each, periods in time order.
    assert got == [
        (PLANTED_STAGE, 1, 0),  # reporter's fine answer
        (PLANTED_STAGE, 1, 1),  # triager's refusal
        ("weekly_report", 1, 0),  # the planted run's good report
        ("weekly_report", 1, 1),  # reporter's English one
        ("weekly_report", 2, 0),  # triager's and clean's, in the same period
    ]
    periods = [int(bar.attributes["data-period"]) for bar in bars]
    assert periods[2] == 0  # the oldest call opens the chart
    assert periods[1] == periods[4] > periods[0] == periods[3] > 0
    # Each bar: its violating calls in red at its foot, the clean ones in grey above.
    for bar in bars:
        clean, violating = bar.find("rect", cls="clean"), bar.find("rect", cls="violating")
        assert float(violating.attributes["height"]) > 0 or bar.attributes["data-violating"] == "0"
        assert (
            float(clean.attributes["height"]) > 0
            or bar.attributes["data-calls"] == bar.attributes["data-violating"]
        )
    assert [group.attributes["data-stage"] for group in chart.find_all("g", cls="stage")] == [
        PLANTED_STAGE,
        "weekly_report",
    ]


def test_planted_markup_is_shown_as_text_and_never_runs(
    chromium: str, scenario: Scenario, tmp_path: Path
) -> None:
    page = _write_page(scenario, tmp_path / "report.html")
    # Without the page's Content-Security-Policy, escaping alone must keep the planted names inert.
    unguarded = tmp_path / "unguarded.html"
    text = page.read_text(encoding="utf-8")
    assert CONTENT_SECURITY_POLICY in text
    unguarded.write_text(text.replace(CONTENT_SECURITY_POLICY, "default-src *"), encoding="utf-8")
    for opened in (page, unguarded):
        dom = _opened(opened)
        assert _title(dom) == TITLE
        assert dom.find_all("script") == []
        assert [img for img in dom.find_all("img") if "onerror" in img.attributes] == []
        assert [svg for svg in dom.find_all("svg") if "onload" in svg.attributes] == []
        ledger = dom.find("section", id="ledger")
        assert PLANTED_TOOL in [cell.text for cell in ledger.find_all("td")]
        assert PLANTED_RUN in [heading.text.split(" UNBALANCED")[0] for heading in ledger.find_all("h3")]
        models = dom.find("section", id="tables").find_all("td")
        assert PLANTED_MODEL in [cell.text for cell in models]


def test_a_script_in_the_page_would_run_but_for_its_policy(
    chromium: str, scenario: Scenario, tmp_path: Path
) -> None:
    """The control of the test above: this browser does run a page's script from a file, and the page's
    policy stops it."""
    script = "<script>document.title = 'ran';</script></body>"
    page = _write_page(scenario, tmp_path / "report.html")
    text = page.read_text(encoding="utf-8").replace("</body>", script)
    guarded, open_page = tmp_path / "guarded.html", tmp_path / "open.html"
    guarded.write_text(text, encoding="utf-8")
    open_page.write_text(
        text.replace(CONTENT_SECURITY_POLICY, "default-src *; script-src 'unsafe-inline'"), encoding="utf-8"
    )
    assert _title(_opened(open_page)) == "ran"
    assert _title(_opened(guarded)) == TITLE


def test_screenshot_renders_the_page(chromium: str, scenario: Scenario, tmp_path: Path) -> None:
    page = _write_page(scenario, tmp_path / "report.html")
    shot = tmp_path / "report.png"
    screenshot(page, shot, window=(1280, 900))
    assert png_size(shot) == (1280, 900)
