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

Also used by scripts/take_screenshots.py to put a violating run into Phoenix.
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

_REPLIES = (
    ScriptedReply(text="The weekly report is attached below; everything went fine this week."),
    ScriptedReply(text="I'm sorry, but I can't help with that request."),
    ScriptedReply(text="Short clean summary."),
)


@tallyspan.tool
def send_mail(to: str) -> str:
    """A tool the agent calls and then forgets to log."""
    return f"sent to {to}"


def run_weekly_agent(
    span_processors: Sequence[SpanProcessor],
    *,
    capture_content: bool = False,
    resource_attributes: Mapping[str, str] | None = None,
) -> None:
    """Run the agent once on a fresh provider; every enriched span reaches ``span_processors``.

    The provider is flushed and shut down before returning, so exporters have sent everything.
    """
    provider = TracerProvider(
        resource=Resource.create({"service.name": SERVICE_NAME, **(resource_attributes or {})})
    )
    instrumentation = tallyspan.instrument(
        CONTRACTS,
        tracer_provider=provider,
        store=None,
        capture_content=capture_content,
        # Only the client this agent uses: importing every installed SDK costs seconds.
        instrumentors=[OPENAI_INSTRUMENTOR],
        span_processors=list(span_processors),
    )
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
        instrumentation.force_flush()
    finally:
        tallyspan.uninstrument()
        provider.shutdown()
