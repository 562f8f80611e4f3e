"""End to end on each provider: an agent's plain tool loop on the real client library against the local
server that speaks its protocol, through ``tallyspan.instrument()`` with a contract. The agent calls a
tool, logs it, sends an e-mail it never logs, then writes a deliverable in English that is too short for
its Japanese contract. Every provider must give the same trace: one run span over the model and tool
spans, the contract violations on the deliverable's span only, no content exported, and the unlogged
e-mail as the run's one ledger discrepancy.

The test is written once; what differs per provider (its client, how it numbers tool calls, whether its
log call can be traced as a tool) is in :class:`Provider`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import ollama
import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan.testing import (
    AnthropicReply,
    AnthropicServer,
    OllamaReply,
    OllamaServer,
    OpenAICompatibleServer,
    ScriptedReply,
    ScriptedToolCall,
)

CONTRACTS = {"weekly_report": {"language": "ja", "min_chars": 40}}
TASK = "今週の週報を書いて"
DELIVERABLE = "Weekly report: all good."  # a bad deliverable: English and too short
API_KEY = "sk-test-tallyspan-SECRET-0123456789"


@tallyspan.tool
def get_weather(city: str, tool_call_id: str = "") -> str:
    return f"{city}: 晴れ"


@tallyspan.tool
def send_email(to: str, body: str, tool_call_id: str = "") -> str:
    return "sent"


@tallyspan.tool(name="log_action")
def log_action(
    call_id: str, tool_name: str, claimed_outcome: str, summary: str, tool_call_id: str = ""
) -> str:
    return "logged"


def untraced_log_action(call_id: str, tool_name: str, claimed_outcome: str, summary: str) -> str:
    # Not traced as a tool where the provider gives tool calls no ids: an executed log call could not be
    # paired with the one the model requested (the claim the ledger reads from the chat span) and would
    # count twice.
    return "logged"


TRACED_TOOLS: dict[str, Callable[..., str]] = {
    "get_weather": get_weather,
    "send_email": send_email,
    "log_action": log_action,
}


def deliverable_stage(final_turn: bool) -> contextlib.AbstractContextManager[object]:
    """The third model call writes the deliverable, under the contract's stage."""
    return tallyspan.stage("weekly_report") if final_turn else contextlib.nullcontext()


# --- one agent loop per client library, as an agent harness writes it -----------------------------------


def run_on_anthropic(replies: Sequence[ScriptedReply], model: str) -> str:
    """Call the model, execute the tool_use blocks, send the results back."""
    with (
        AnthropicServer(replies=replies) as server,
        anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0) as client,
    ):
        messages: list[dict[str, object]] = [{"role": "user", "content": TASK}]
        with tallyspan.run("weekly_agent"):
            for turn in range(3):
                with deliverable_stage(turn == 2):
                    message = client.messages.create(model=model, max_tokens=512, messages=messages)  # type: ignore[arg-type]
                uses = [block for block in message.content if block.type == "tool_use"]
                if not uses:
                    return "".join(block.text for block in message.content if block.type == "text")
                messages.append(
                    {"role": "assistant", "content": [block.model_dump() for block in message.content]}
                )
                results = [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": TRACED_TOOLS[use.name](**use.input, tool_call_id=use.id),
                    }
                    for use in uses
                ]
                messages.append({"role": "user", "content": results})
    raise AssertionError("the scripted model never answered without tools")


def run_on_ollama(replies: Sequence[ScriptedReply], model: str) -> str:
    """Ollama's tool calls carry no ids, so the harness numbers the ones it executes."""
    with OllamaServer(replies=replies) as server, ollama.Client(host=server.base_url) as client:
        tools: dict[str, Callable[..., str]] = {"get_weather": get_weather, "send_email": send_email}
        messages: list[dict[str, object]] = [{"role": "user", "content": TASK}]
        executed = 0
        with tallyspan.run("weekly_agent"):
            for turn in range(3):
                with deliverable_stage(turn == 2):
                    response = client.chat(model, messages)
                calls = response.message.tool_calls or []
                if not calls:
                    return response.message.content or ""
                messages.append(response.message.model_dump(exclude_none=True))
                for call in calls:
                    arguments = dict(call.function.arguments)
                    if call.function.name == "log_action":
                        result = untraced_log_action(**arguments)
                    else:
                        executed += 1
                        result = tools[call.function.name](**arguments, tool_call_id=f"call_{executed}")
                    messages.append({"role": "tool", "content": result, "tool_name": call.function.name})
    raise AssertionError("the scripted model never answered without tools")


def run_on_openai(replies: Sequence[ScriptedReply], model: str) -> str:
    """Chat completions: execute the tool calls, send each result back under its call id."""
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as client,
    ):
        messages: list[Any] = [{"role": "user", "content": TASK}]
        with tallyspan.run("weekly_agent"):
            for turn in range(3):
                with deliverable_stage(turn == 2):
                    reply = client.chat.completions.create(model=model, messages=messages).choices[0].message
                if not reply.tool_calls:
                    return reply.content or ""
                messages.append(reply.model_dump(exclude_none=True))
                for call in reply.tool_calls:
                    assert call.type == "function"
                    result = TRACED_TOOLS[call.function.name](
                        **json.loads(call.function.arguments), tool_call_id=call.id
                    )
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError("the scripted model never answered without tools")


# --- what differs per provider ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Provider:
    """One provider's agent run and what its trace must show."""

    id: str
    model: str
    reply: type[ScriptedReply]
    run: Callable[[Sequence[ScriptedReply], str], str]
    call_ids: Mapping[str, str | None]
    """The id the scripted model gives each tool call (None: the provider sends none)."""
    executed_ids: Mapping[str, str]
    """The id each executed tool's span carries, by tool name, in the order the tools run."""

    def replies(self) -> list[ScriptedReply]:
        logged = {
            "call_id": self.executed_ids["get_weather"],
            "tool_name": "get_weather",
            "claimed_outcome": "succeeded",
            "summary": "天気",
        }
        return [
            self.reply(
                tool_calls=[ScriptedToolCall("get_weather", {"city": "東京"}, self.call_ids["get_weather"])]
            ),
            # Logs the weather call, then sends an e-mail it never logs.
            self.reply(
                tool_calls=[
                    ScriptedToolCall("log_action", logged, self.call_ids["log_action"]),
                    ScriptedToolCall(
                        "send_email", {"to": "boss@example.com", "body": "晴れ"}, self.call_ids["send_email"]
                    ),
                ]
            ),
            self.reply(text=DELIVERABLE),
        ]


PROVIDERS = [
    Provider(
        id="anthropic",
        model="claude-test-4",
        reply=AnthropicReply,
        run=run_on_anthropic,
        call_ids={"get_weather": "toolu_w1", "log_action": "toolu_l1", "send_email": "toolu_e1"},
        executed_ids={"get_weather": "toolu_w1", "log_action": "toolu_l1", "send_email": "toolu_e1"},
    ),
    Provider(
        id="ollama",
        model="llama3.2",
        reply=OllamaReply,
        run=run_on_ollama,
        call_ids={"get_weather": None, "log_action": None, "send_email": None},
        # The harness numbers the calls it executes; the log call is not a tool span.
        executed_ids={"get_weather": "call_1", "send_email": "call_2"},
    ),
    Provider(
        id="openai",
        model="gpt-4o",
        reply=ScriptedReply,
        run=run_on_openai,
        call_ids={"get_weather": "call_w1", "log_action": "call_l1", "send_email": "call_e1"},
        executed_ids={"get_weather": "call_w1", "log_action": "call_l1", "send_email": "call_e1"},
    ),
]


@pytest.mark.parametrize("provider", PROVIDERS, ids=[provider.id for provider in PROVIDERS])
def test_agent_run_is_traced_checked_and_reconciled_end_to_end(
    provider: Provider, make_instrumented: MakeInstrumented, span_exporter: InMemorySpanExporter
) -> None:
    instrumentation = make_instrumented(contracts=CONTRACTS).instrumentation
    deliverable = provider.run(provider.replies(), provider.model)
    assert deliverable == DELIVERABLE
    instrumentation.force_flush()

    chat = f"chat {provider.model}"
    finished = span_exporter.get_finished_spans()
    second_turn_tools = [f"execute_tool {name}" for name in ("log_action", "send_email")]
    assert [span.name for span in finished] == [
        chat,
        "execute_tool get_weather",
        chat,
        *[name for name in second_turn_tools if name.removeprefix("execute_tool ") in provider.executed_ids],
        chat,
        "invoke_agent weekly_agent",
    ]
    run_span = finished[-1]
    assert run_span.parent is None
    assert run_span.context is not None
    for span in finished[:-1]:
        assert span.context is not None
        assert span.context.trace_id == run_span.context.trace_id
        assert span.parent is not None
        assert span.parent.span_id == run_span.context.span_id
    tool_attributes = [span.attributes or {} for span in finished if span.name.startswith("execute_tool")]
    assert [
        (
            attributes[semconv.GEN_AI_TOOL_NAME],
            attributes[semconv.GEN_AI_TOOL_CALL_ID],
            attributes[semconv.TOOL_OUTCOME],
        )
        for attributes in tool_attributes
    ] == [(name, call_id, semconv.OUTCOME_SUCCEEDED) for name, call_id in provider.executed_ids.items()]

    # The contract checks fire on the deliverable, and only there, with content never exported.
    report = finished[-2]
    report_attributes = report.attributes or {}
    assert report_attributes[semconv.STAGE] == "weekly_report"
    assert report_attributes[semconv.CONTRACT] == "weekly_report"
    assert tuple(report_attributes[semconv.VIOLATION_TYPES]) == ("not_japanese", "too_short")  # type: ignore[arg-type]
    assert report_attributes[semconv.VIOLATED] is True
    assert report.status.status_code is StatusCode.ERROR
    for span in finished:
        if span is not report:
            assert semconv.VIOLATION_TYPES not in (span.attributes or {}), span.name
    for span in finished:
        assert semconv.GEN_AI_OUTPUT_MESSAGES not in (span.attributes or {})

    # The unlogged e-mail is a ledger discrepancy on the run span.
    run_attributes = run_span.attributes or {}
    assert tuple(run_attributes[semconv.LEDGER_DISCREPANCY_TYPES]) == ("unlogged_call",)  # type: ignore[arg-type]
    assert run_attributes[semconv.LEDGER_BALANCED] is False
    assert run_attributes[semconv.LEDGER_OBSERVED_COUNT] == 2
    assert run_attributes[semconv.LEDGER_CLAIMED_COUNT] == 1
