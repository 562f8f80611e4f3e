"""A small instrumented agent whose run breaks its contracts and its books, for the end-to-end tests.

The real chain end to end: ``tallyspan.instrument(contracts=...)`` on a private SDK provider, the real
``openai`` client against ``tallyspan.testing.OpenAICompatibleServer`` on 127.0.0.1, ``tallyspan.run``
and ``@tallyspan.tool``. One run of ``weekly-agent`` produces:

- ``chat m`` in stage ``weekly_report``: English text for a Japanese contract -> ``not_japanese``;
- ``chat m`` in stage ``weekly_report``: an English refusal -> ``refusal`` and ``not_japanese``;
- ``chat m`` in stage ``summary``: clean;
- ``execute_tool send_mail``: clean, but never logged by the agent ->
- ``invoke_agent weekly-agent``: ``tallyspan.ledger.balanced = false``
  (``ledger_missing``, ``unlogged_call``).

``run_single_answer_agents`` adds two more runs, each its own trace with balanced books: one whose
model answers in English (``not_japanese``) and one whose model refuses (``refusal``). Only the roll-up
makes them red in a trace list that shows root spans.

Also used by scripts/take_screenshots.py to put violating runs into Phoenix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import openai
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import tallyspan
from tallyspan import FailureClass, ViolationType
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

SERVICE_NAME = "weekly-agent"
AGENT_NAME = "weekly-agent"
REPORT_STAGE = "weekly_report"
SUMMARY_STAGE = "summary"
CONTRACTS = {REPORT_STAGE: {"language": "ja", "min_chars": 20}, SUMMARY_STAGE: {}}

RUN_SPAN = f"invoke_agent {AGENT_NAME}"
TOOL_SPAN = "execute_tool send_mail"
CHAT_SPAN = "chat m"
OPENAI_INSTRUMENTOR = "tallyspan_openai"


@dataclass(frozen=True)
class ExpectedSpan:
    """What the checks and the ledger must have put on one span."""

    name: str
    stage: str | None
    violation_types: tuple[str, ...]
    failure_class: str | None


#: The violating spans of one run; the clean summary call and the tool call are not among them.
EXPECTED_VIOLATIONS = (
    ExpectedSpan(
        CHAT_SPAN, REPORT_STAGE, (ViolationType.NOT_JAPANESE.value,), FailureClass.LANGUAGE_CORRUPTION.value
    ),
    ExpectedSpan(
        CHAT_SPAN,
        REPORT_STAGE,
        (ViolationType.NOT_JAPANESE.value, ViolationType.REFUSAL.value),
        FailureClass.CONTRACT_VIOLATION.value,
    ),
)
EXPECTED_DISCREPANCIES = (ViolationType.LEDGER_MISSING.value, ViolationType.UNLOGGED_CALL.value)

ENGLISH_AGENT = "english-agent"
REFUSING_AGENT = "refusing-agent"
#: The single-answer runs: agent name, its one reply, the types its run span must carry.
SINGLE_ANSWER_RUNS = (
    (ENGLISH_AGENT, "Here is the weekly report: all tickets were closed on time.", ("not_japanese",)),
    (REFUSING_AGENT, "申し訳ありませんが、そのご依頼にはお応えできません。", ("refusal",)),
)

_REPLIES = (
    ScriptedReply(text="The weekly report is attached below; everything went fine this week."),
    ScriptedReply(text="I'm sorry, but I can't help with that request."),
    ScriptedReply(text="Short clean summary."),
)


@tallyspan.tool
def send_mail(to: str) -> str:
    """A tool the agent calls and then forgets to log."""
    return f"sent to {to}"


def _instrumented(
    span_processors: Sequence[SpanProcessor],
    capture_content: bool,
    resource_attributes: Mapping[str, str] | None,
    contracts: Mapping[str, object] = CONTRACTS,
) -> TracerProvider:
    provider = TracerProvider(
        resource=Resource.create({"service.name": SERVICE_NAME, **(resource_attributes or {})})
    )
    tallyspan.instrument(
        dict(contracts),
        tracer_provider=provider,
        store=None,
        capture_content=capture_content,
        # Only the client this agent uses: importing every installed SDK costs seconds.
        instrumentors=[OPENAI_INSTRUMENTOR],
        span_processors=list(span_processors),
    )
    return provider


def _finish(provider: TracerProvider) -> None:
    instrumentation = tallyspan.instrumentation()
    try:
        if instrumentation is not None:
            instrumentation.force_flush()
    finally:
        tallyspan.uninstrument()
        provider.shutdown()


def run_weekly_agent(
    span_processors: Sequence[SpanProcessor],
    *,
    capture_content: bool = False,
    resource_attributes: Mapping[str, str] | None = None,
    contracts: Mapping[str, object] = CONTRACTS,
) -> None:
    """Run the agent once on a fresh provider; every enriched span reaches ``span_processors``.

    The provider is flushed and shut down before returning, so exporters have sent everything.
    ``contracts`` replaces ``CONTRACTS`` (the expectations above hold for those only).
    """
    provider = _instrumented(span_processors, capture_content, resource_attributes, contracts)
    try:
        with (
            OpenAICompatibleServer(replies=list(_REPLIES)) as server,
            openai.OpenAI(base_url=server.base_url, api_key="test-key") as client,  # closed: no socket left
            tallyspan.run(AGENT_NAME),
        ):
            with tallyspan.stage(REPORT_STAGE):
                for _ in range(2):
                    client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "今週の週報を書いてください"}]
                    )
            with tallyspan.stage(SUMMARY_STAGE):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Summarise."}]
                )
            send_mail("boss@example.com")
    finally:
        _finish(provider)


def run_single_answer_agents(
    span_processors: Sequence[SpanProcessor], *, resource_attributes: Mapping[str, str] | None = None
) -> None:
    """Run the single-answer agents, each in a trace of its own (see the module docstring)."""
    provider = _instrumented(span_processors, False, resource_attributes)
    replies = [ScriptedReply(text=text) for _, text, _ in SINGLE_ANSWER_RUNS]
    try:
        with (
            OpenAICompatibleServer(replies=replies) as server,
            openai.OpenAI(base_url=server.base_url, api_key="test-key") as client,
        ):
            for agent, _, _ in SINGLE_ANSWER_RUNS:
                with tallyspan.run(agent), tallyspan.stage(REPORT_STAGE):
                    client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "今週の週報を書いてください"}]
                    )
    finally:
        _finish(provider)
