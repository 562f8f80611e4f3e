"""OpenAI Agents SDK instrumentor: the real ``Runner.run`` against the local OpenAI-compatible server.

The SDK's own export is kept on (its default processor stays registered) but pointed at a local
receiver, so nothing leaves the machine and the tests can check that the export still works.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import agents
import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tests.conftest import AgentsExportReceiver, MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan._content import ModelContent, ToolCallContent, ToolContent, content_buffer
from tallyspan._store._store_queries import ledger_runs, open_store, report
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall
from tallyspan_instrumentors.openai import OpenAIInstrumentor
from tallyspan_instrumentors.openai_agents import OpenAIAgentsInstrumentor


def sdk_processors() -> tuple[Any, ...]:
    return tuple(agents.tracing.get_trace_provider()._multi_processor._processors)  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _no_swallowed_errors() -> Iterator[None]:
    """Every test here also checks that tallyspan swallowed no error of its own along the way."""
    yield
    assert {k: v for k, v in tallyspan.stats().items() if k.startswith("errors.")} == {}


@pytest.fixture(autouse=True)
def sdk_export(agents_export: AgentsExportReceiver) -> AgentsExportReceiver:
    """The SDK's default export, kept on, sent to a local receiver; the processor list restored after."""
    return agents_export


@pytest.fixture
def agent_spans(instrument_libraries: Callable[..., InMemorySpanExporter]) -> InMemorySpanExporter:
    """The Agents SDK instrumented alone (the OpenAI client is not) on the private provider."""
    return instrument_libraries(OpenAIAgentsInstrumentor, capture_content=False)


@function_tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


@function_tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


@function_tool
def send_email(to: str) -> str:
    """Send an e-mail."""
    return f"sent to {to}"


@function_tool
def log_action(call_id: str, tool_name: str, claimed_outcome: str, summary: str) -> str:
    """Log one of your own actions."""
    return "logged"


_CLIENTS: list[openai.AsyncOpenAI] = []


@pytest.fixture(autouse=True)
async def _close_clients() -> Any:
    """The model clients the agents used are closed after each test (no unclosed sockets)."""
    yield
    while _CLIENTS:
        await _CLIENTS.pop().close()


def make_agent(server: OpenAICompatibleServer, tools: list[Any], **kwargs: Any) -> Agent[Any]:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    _CLIENTS.append(client)
    model = OpenAIChatCompletionsModel(model="m1", openai_client=client)
    return Agent(
        name=kwargs.pop("name", "worker"), instructions="Be brief.", tools=tools, model=model, **kwargs
    )


def named(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


TOOL_THEN_TEXT = [
    ScriptedReply(
        tool_calls=[
            ScriptedToolCall("lookup", {"city": "Tokyo"}, call_id="c1"),
            ScriptedToolCall("explode", {"reason": "disk full"}, call_id="c2"),
        ],
        prompt_tokens=30,
        completion_tokens=12,
    ),
    ScriptedReply(text="Tokyo is sunny.", prompt_tokens=80, completion_tokens=5),
]


async def test_run_becomes_agent_model_and_tool_spans_in_one_tree(agent_spans):
    with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
        result = await Runner.run(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
    assert result.final_output == "Tokyo is sunny."
    spans = agent_spans.get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "chat m1",
        "chat m1",
        "execute_tool explode",
        "execute_tool lookup",
        "invoke_agent worker",
        "invoke_workflow Agent workflow",
    ]
    (workflow,) = named(spans, "invoke_workflow")
    assert workflow.parent is None
    assert attrs(workflow) == {
        semconv.GEN_AI_OPERATION_NAME: "invoke_workflow",
        semconv.GEN_AI_WORKFLOW_NAME: "Agent workflow",
    }
    (agent,) = named(spans, "invoke_agent")
    assert agent.kind is SpanKind.INTERNAL
    assert attrs(agent) == {
        semconv.GEN_AI_OPERATION_NAME: "invoke_agent",
        semconv.GEN_AI_AGENT_NAME: "worker",
    }
    assert agent.parent is not None
    assert agent.parent.span_id == workflow.context.span_id
    for span in spans:
        assert span.context.trace_id == agent.context.trace_id
        if span not in (agent, workflow):
            assert span.parent is not None
            assert span.parent.span_id == agent.context.span_id
    first, second = sorted(named(spans, "chat"), key=lambda s: s.start_time or 0)
    assert first.kind is SpanKind.CLIENT
    assert attrs(first) == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: "m1",
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 30,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 12,
    }
    assert attrs(second)[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 5


async def test_function_tools_carry_call_id_and_outcome(agent_spans):
    with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
        await Runner.run(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
    spans = agent_spans.get_finished_spans()
    (ok,) = named(spans, "execute_tool lookup")
    (failed,) = named(spans, "execute_tool explode")
    assert attrs(ok) == {
        semconv.GEN_AI_OPERATION_NAME: "execute_tool",
        semconv.GEN_AI_TOOL_NAME: "lookup",
        semconv.GEN_AI_TOOL_TYPE: "function",
        semconv.GEN_AI_TOOL_CALL_ID: "c1",
        semconv.TOOL_OUTCOME: "succeeded",
    }
    assert ok.status.status_code is StatusCode.UNSET
    assert attrs(failed)[semconv.GEN_AI_TOOL_CALL_ID] == "c2"
    assert attrs(failed)[semconv.TOOL_OUTCOME] == "failed"
    assert attrs(failed)[semconv.ERROR_TYPE] == "tool_error"
    assert failed.status.status_code is StatusCode.ERROR
    assert semconv.GEN_AI_TOOL_CALL_ARGUMENTS not in attrs(ok)  # content is opt-in


async def test_model_output_and_tool_calls_reach_the_content_buffer(agent_spans):
    buffer = content_buffer()
    buffer.add_consumer()
    try:
        with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
            await Runner.run(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
        first, second = sorted(
            named(agent_spans.get_finished_spans(), "chat"), key=lambda s: s.start_time or 0
        )
        first_content = buffer.pop(first.context.span_id)
        second_content = buffer.pop(second.context.span_id)
    finally:
        buffer.remove_consumer()
    assert first_content == ModelContent(
        output_text="",
        tool_calls=(
            ToolCallContent("lookup", '{"city": "Tokyo"}', "c1"),
            ToolCallContent("explode", '{"reason": "disk full"}', "c2"),
        ),
        prompt="Weather in Tokyo?",
    )
    assert isinstance(second_content, ModelContent)
    assert second_content.output_text == "Tokyo is sunny."


async def test_capture_content_exports_tool_arguments_results_and_output(tracer_provider):
    memory = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, capture_content=True)
    try:
        with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
            await Runner.run(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
    finally:
        instrumentor.uninstrument()
    spans = memory.get_finished_spans()
    (ok,) = named(spans, "execute_tool lookup")
    assert json.loads(attrs(ok)[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"city": "Tokyo"}
    assert attrs(ok)[semconv.GEN_AI_TOOL_CALL_RESULT] == "Tokyo: sunny"
    last = max(named(spans, "chat"), key=lambda s: s.start_time or 0)
    inputs = json.loads(attrs(last)[semconv.GEN_AI_INPUT_MESSAGES])
    assert [m["role"] for m in inputs] == ["system", "user", "assistant", "tool", "tool"]
    assert inputs[1]["parts"] == [{"type": "text", "content": "Weather in Tokyo?"}]
    assert inputs[2]["parts"][0] == {
        "type": "tool_call",
        "id": "c1",
        "name": "lookup",
        "arguments": {"city": "Tokyo"},
    }
    assert inputs[3]["parts"] == [{"type": "tool_call_response", "id": "c1", "response": "Tokyo: sunny"}]
    output = json.loads(attrs(last)[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Tokyo is sunny."}],
            "finish_reason": "stop",
        }
    ]


async def test_responses_model_calls_become_chat_spans_with_response_details(agent_spans):
    with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        _CLIENTS.append(client)
        model = agents.OpenAIResponsesModel(model="m1", openai_client=client)
        agent = Agent(name="worker", instructions="Be brief.", tools=[lookup, explode], model=model)
        result = await Runner.run(agent, "Weather in Tokyo?")
    assert result.final_output == "Tokyo is sunny."
    spans = agent_spans.get_finished_spans()
    (agent_span,) = named(spans, "invoke_agent")
    first, second = sorted(named(spans, "chat"), key=lambda s: s.start_time or 0)
    assert first.name == "chat m1"
    assert first.parent is not None
    assert first.parent.span_id == agent_span.context.span_id
    assert attrs(first)[semconv.GEN_AI_RESPONSE_MODEL] == "m1"
    assert isinstance(attrs(first)[semconv.GEN_AI_RESPONSE_ID], str)
    assert attrs(first)[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 30
    assert attrs(second)[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert {attrs(s)[semconv.GEN_AI_TOOL_CALL_ID] for s in named(spans, "execute_tool")} == {"c1", "c2"}


async def test_model_call_appears_once_when_the_openai_client_is_instrumented(agent_spans, tracer_provider):
    openai_instrumentor = OpenAIInstrumentor()
    openai_instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
            await Runner.run(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
            assert len(server.requests) == 2
    finally:
        openai_instrumentor.uninstrument()
    spans = agent_spans.get_finished_spans()
    chats = named(spans, "chat")
    assert len(chats) == 2  # the OpenAI instrumentor's, not a second one from the Agents SDK's spans
    (agent,) = named(spans, "invoke_agent")
    for chat in chats:
        assert semconv.GEN_AI_RESPONSE_ID in attrs(chat)  # only the client instrumentor knows it
        assert chat.parent is not None
        assert chat.parent.span_id == agent.context.span_id


async def test_handoff_is_an_event_on_the_handing_agent(agent_spans):
    replies = [
        ScriptedReply(tool_calls=[ScriptedToolCall("transfer_to_expert", {}, call_id="h1")]),
        ScriptedReply(text="Expert answer."),
    ]
    with OpenAICompatibleServer(replies=replies) as server:
        expert = make_agent(server, [], name="expert")
        triage = make_agent(server, [], name="triage", handoffs=[expert])
        result = await Runner.run(triage, "Hard question")
    assert result.final_output == "Expert answer."
    spans = agent_spans.get_finished_spans()
    (workflow,) = named(spans, "invoke_workflow")
    (triage_span,) = named(spans, "invoke_agent triage")
    (expert_span,) = named(spans, "invoke_agent expert")
    for span in (triage_span, expert_span):
        assert span.parent is not None
        assert span.parent.span_id == workflow.context.span_id
    (event,) = [e for e in triage_span.events if e.name == semconv.EVENT_AGENT_HANDOFF]
    assert dict(event.attributes or {}) == {
        semconv.HANDOFF_FROM_AGENT: "triage",
        semconv.HANDOFF_TO_AGENT: "expert",
    }
    assert named(spans, "execute_tool") == []  # a handoff is not a tool execution for the ledger


async def test_model_error_passes_through_and_fails_the_spans(agent_spans):
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(status=500)]) as server,
        pytest.raises(openai.InternalServerError),
    ):
        await Runner.run(make_agent(server, [lookup]), "hi")
    spans = agent_spans.get_finished_spans()
    (chat,) = named(spans, "chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs(chat)[semconv.ERROR_TYPE] == "_OTHER"
    (agent,) = named(spans, "invoke_agent")
    assert agent.status.status_code is StatusCode.ERROR
    (workflow,) = named(spans, "invoke_workflow")
    assert workflow.end_time is not None


async def test_suppress_instrumentation_records_nothing(agent_spans):
    with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server, suppress_instrumentation():
        result = await Runner.run(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
    assert result.final_output == "Tokyo is sunny."
    assert agent_spans.get_finished_spans() == ()


async def test_sdk_export_and_user_processors_are_kept(tracer_provider, sdk_export):
    class UserProcessor(agents.TracingProcessor):
        def __init__(self) -> None:
            self.ended: list[str] = []

        def on_trace_start(self, trace: Any) -> None: ...
        def on_trace_end(self, trace: Any) -> None: ...
        def on_span_start(self, span: Any) -> None: ...
        def on_span_end(self, span: Any) -> None:
            self.ended.append(span.span_data.type)

        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    user = UserProcessor()
    agents.add_trace_processor(user)
    before = sdk_processors()
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        assert sdk_processors()[:-1] == before
        assert sdk_processors()[-1] is instrumentor.processor
        with OpenAICompatibleServer(replies=[ScriptedReply(text="ok")]) as server:
            await Runner.run(make_agent(server, []), "hi")
        agents.tracing.flush_traces()
    finally:
        instrumentor.uninstrument()
    assert sdk_processors() == before  # exactly: same processors, same order
    assert "agent" in user.ended
    exported = {
        item.get("span_data", {}).get("type")
        for item in sdk_export.items
        if item.get("object") == "trace.span"
    }
    assert "agent" in exported


async def test_uninstrument_mid_run_ends_the_open_spans(tracer_provider):
    memory = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    entered, release = asyncio.Event(), asyncio.Event()

    @function_tool
    async def slow(x: str) -> str:
        """Waits."""
        entered.set()
        await release.wait()
        return x

    replies = [
        ScriptedReply(tool_calls=[ScriptedToolCall("slow", {"x": "a"}, call_id="s1")]),
        ScriptedReply(text="ok"),
    ]
    with OpenAICompatibleServer(replies=replies) as server:
        run = asyncio.ensure_future(Runner.run(make_agent(server, [slow]), "go"))
        await entered.wait()
        instrumentor.uninstrument()
        assert sorted(s.name for s in memory.get_finished_spans()) == [
            "chat m1",
            "execute_tool slow",
            "invoke_agent worker",
            "invoke_workflow Agent workflow",
        ]
        release.set()
        result = await run
    assert result.final_output == "ok"
    assert len(memory.get_finished_spans()) == 4  # nothing more once uninstrumented


async def test_uninstrument_stops_spans_and_unpatches(tracer_provider):
    from agents.tool_context import ToolContext
    from agents.tracing.scope import Scope

    originals = (Scope.__dict__["set_current_span"], ToolContext.__dict__["from_agent_context"])
    memory = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    instrumentor.uninstrument()
    assert (Scope.__dict__["set_current_span"], ToolContext.__dict__["from_agent_context"]) == originals
    with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
        await Runner.run(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
    assert memory.get_finished_spans() == ()


async def test_streamed_run_builds_the_same_tree(agent_spans):
    with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server:
        streamed = Runner.run_streamed(make_agent(server, [lookup, explode]), "Weather in Tokyo?")
        events = [event async for event in streamed.stream_events()]
    assert events
    assert streamed.final_output == "Tokyo is sunny."
    spans = agent_spans.get_finished_spans()
    (agent,) = named(spans, "invoke_agent")
    children = [s for s in spans if s.parent is not None and s.parent.span_id == agent.context.span_id]
    assert sorted(s.name for s in children) == [
        "chat m1",
        "chat m1",
        "execute_tool explode",
        "execute_tool lookup",
    ]
    assert {attrs(s).get(semconv.GEN_AI_TOOL_CALL_ID) for s in named(spans, "execute_tool")} == {"c1", "c2"}


async def test_stage_and_ledger_inputs_survive_without_sensitive_trace_data(agent_spans):
    buffer = content_buffer()
    buffer.add_consumer()
    try:
        with OpenAICompatibleServer(replies=TOOL_THEN_TEXT) as server, tallyspan.stage("triage"):
            await Runner.run(
                make_agent(server, [lookup, explode]),
                "Weather in Tokyo?",
                run_config=agents.RunConfig(trace_include_sensitive_data=False),
            )
        spans = agent_spans.get_finished_spans()
        (tool,) = named(spans, "execute_tool lookup")
        tool_content = buffer.pop(tool.context.span_id)
    finally:
        buffer.remove_consumer()
    assert attrs(tool)[semconv.GEN_AI_TOOL_CALL_ID] == "c1"
    assert isinstance(tool_content, ToolContent)
    assert tool_content.arguments == {"city": "Tokyo"}  # from the SDK's ToolContext, not its span data
    for chat in named(spans, "chat"):
        assert attrs(chat)[semconv.STAGE] == "triage"


async def test_mcp_call_inside_a_tool_enriches_its_span_and_the_server_span_nests_under_it(
    agent_spans, tracer_provider
):
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from tallyspan_instrumentors.mcp import MCPInstrumentor

    server = MCPServer("remote")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    mcp_instrumentor = MCPInstrumentor()
    mcp_instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        async with Client(server) as mcp_client:

            @function_tool
            async def remote_add(a: int, b: int) -> str:
                """Add on the remote server."""
                result = await mcp_client.call_tool("add", {"a": a, "b": b})
                return str(result.structured_content)

            replies = [
                ScriptedReply(tool_calls=[ScriptedToolCall("remote_add", {"a": 2, "b": 3}, call_id="r1")]),
                ScriptedReply(text="5"),
            ]
            with OpenAICompatibleServer(replies=replies) as model_server:
                await Runner.run(make_agent(model_server, [remote_add]), "2+3?")
    finally:
        mcp_instrumentor.uninstrument()
    spans = agent_spans.get_finished_spans()
    tool_spans = named(spans, "execute_tool")
    assert sorted((s.name, s.kind) for s in tool_spans) == [
        ("execute_tool add", SpanKind.SERVER),
        ("execute_tool remote_add", SpanKind.INTERNAL),
    ]
    (tool,) = named(spans, "execute_tool remote_add")
    (served,) = named(spans, "execute_tool add")
    assert attrs(tool)[semconv.MCP_METHOD_NAME] == "tools/call"
    assert attrs(tool)[semconv.GEN_AI_TOOL_CALL_ID] == "r1"
    assert attrs(tool)[semconv.TOOL_OUTCOME] == "succeeded"
    assert served.parent is not None
    assert served.parent.span_id == tool.context.span_id
    assert served.context.trace_id == tool.context.trace_id


# --- end to end: instrument() with contracts, the checks and the ledger ------------------------------------

CONTRACTS = {"weekly_report": {"language": "ja", "min_chars": 10}}


@pytest.fixture
def full_chain(make_instrumented: MakeInstrumented) -> tallyspan.Instrumentation:
    return make_instrumented(contracts=CONTRACTS).instrumentation


async def test_end_to_end_unlogged_call_and_bad_deliverable_are_caught(full_chain, span_exporter):
    names = {type(i).__name__ for i in full_chain.instrumentors}
    assert {"OpenAIInstrumentor", "OpenAIAgentsInstrumentor"} <= names
    replies = [
        ScriptedReply(tool_calls=[ScriptedToolCall("lookup", {"city": "Osaka"}, call_id="c1")]),
        ScriptedReply(
            tool_calls=[
                ScriptedToolCall(
                    "log_action",
                    {
                        "call_id": "c1",
                        "tool_name": "lookup",
                        "claimed_outcome": "succeeded",
                        "summary": "looked up",
                    },
                    call_id="c2",
                )
            ]
        ),
        ScriptedReply(tool_calls=[ScriptedToolCall("send_email", {"to": "boss@example.com"}, call_id="c3")]),
        ScriptedReply(text="Done, the report was sent."),  # English, for a Japanese contract
    ]
    with OpenAICompatibleServer(replies=replies) as server, tallyspan.stage("weekly_report"):
        result = await Runner.run(make_agent(server, [lookup, send_email, log_action]), "週報を送って")
    assert result.final_output == "Done, the report was sent."
    assert full_chain.force_flush()
    spans = span_exporter.get_finished_spans()
    (agent,) = named(spans, "invoke_agent worker")
    chats = sorted(named(spans, "chat m1"), key=lambda s: s.start_time or 0)
    tools = {attrs(s)[semconv.GEN_AI_TOOL_CALL_ID]: s for s in named(spans, "execute_tool")}
    assert len(chats) == 4
    assert sorted((k, s.name) for k, s in tools.items()) == [
        ("c1", "execute_tool lookup"),
        ("c2", "execute_tool log_action"),
        ("c3", "execute_tool send_email"),
    ]
    for span in [*chats, *tools.values()]:
        assert span.context.trace_id == agent.context.trace_id
        assert span.parent is not None
        assert span.parent.span_id == agent.context.span_id
        assert attrs(span).get(semconv.TOOL_OUTCOME, "succeeded") == "succeeded"
    # The ledger: send_email (c3) was never logged.
    assert attrs(agent)[semconv.LEDGER_DISCREPANCY_TYPES] == ("unlogged_call",)
    assert attrs(agent)[semconv.LEDGER_BALANCED] is False
    # The checks: the deliverable is English where the contract asks for Japanese.
    final = chats[-1]
    assert attrs(final)[semconv.STAGE] == "weekly_report"
    assert "not_japanese" in attrs(final)[semconv.VIOLATION_TYPES]
    assert final.status.status_code is StatusCode.ERROR


def test_instrument_does_not_import_the_sdk_and_hooks_in_when_the_app_does():
    code = (
        "import sys\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from tallyspan_instrumentors.openai_agents import OpenAIAgentsInstrumentor\n"
        "instrumentor = OpenAIAgentsInstrumentor()\n"
        "instrumentor.instrument(tracer_provider=TracerProvider())\n"
        "assert 'agents' not in sys.modules\n"
        "import agents.tracing\n"
        "processors = agents.tracing.get_trace_provider()._multi_processor._processors\n"
        "assert processors[-1] is instrumentor.processor, processors\n"
        "instrumentor.uninstrument()\n"
        "assert instrumentor.processor not in agents.tracing.get_trace_provider()._multi_processor._processors\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr


async def test_each_runner_run_is_one_run_in_the_ledger_and_the_store(full_chain, span_exporter, db_path):
    def one_run() -> list[ScriptedReply]:
        return [
            ScriptedReply(tool_calls=[ScriptedToolCall("lookup", {"city": "Osaka"}, call_id="c1")]),
            ScriptedReply(text="Done."),  # English, for a Japanese contract
        ]

    with OpenAICompatibleServer(replies=one_run() + one_run()) as server, tallyspan.stage("weekly_report"):
        agent = make_agent(server, [lookup])
        for _ in range(2):
            await Runner.run(agent, "週報を送って")
    assert full_chain.force_flush()
    with open_store(db_path) as db:
        assert [run.run_name for run in ledger_runs(db)] == ["worker", "worker"]  # not 4, no empty workflow
        assert report(db).runs == 2
    spans = span_exporter.get_finished_spans()
    workflows = named(spans, "invoke_workflow")
    assert len(workflows) == 2
    for workflow in workflows:
        attributes = attrs(workflow)
        assert attributes[semconv.RUN_CONTAINER] is True
        assert semconv.LEDGER_BALANCED not in attributes  # the books are the agent run's
        # ... but the root of the trace still shows the failure in trace lists
        assert attributes[semconv.RUN_VIOLATION_TYPES] == ["not_japanese", "too_short"]
        assert workflow.status.status_code is StatusCode.ERROR
    for agent_span in named(spans, "invoke_agent"):
        assert attrs(agent_span)[semconv.LEDGER_DISCREPANCY_TYPES] == ("ledger_missing", "unlogged_call")


async def test_a_handoff_gives_one_run_per_agent_under_one_workflow(full_chain, span_exporter, db_path):
    replies = [
        ScriptedReply(tool_calls=[ScriptedToolCall("transfer_to_expert", {}, call_id="h1")]),
        ScriptedReply(text="専門家の回答です。"),
    ]
    with OpenAICompatibleServer(replies=replies) as server:
        expert = make_agent(server, [], name="expert")
        await Runner.run(make_agent(server, [], name="triage", handoffs=[expert]), "難しい質問")
    assert full_chain.force_flush()
    with open_store(db_path) as db:
        assert sorted(str(run.run_name) for run in ledger_runs(db)) == ["expert", "triage"]
        assert report(db).runs == 2
    (workflow,) = named(span_exporter.get_finished_spans(), "invoke_workflow")
    assert attrs(workflow)[semconv.RUN_CONTAINER] is True
