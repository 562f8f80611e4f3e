"""LangChain / LangGraph instrumentor: a real LangGraph graph with a ToolNode driving ChatOpenAI against the
local OpenAI-compatible server; spans read back from an in-memory exporter."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import openai
import pytest
from langchain_core.callbacks.manager import CallbackManager
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tests.conftest import mid_stream_error_class

import tallyspan
from tallyspan import semconv
from tallyspan._content import ModelContent, ToolCallContent, ToolContent, content_buffer
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall
from tallyspan_instrumentors.langchain import LangChainInstrumentor, TallyspanCallbackHandler
from tallyspan_instrumentors.openai import OpenAIInstrumentor

API_KEY = "sk-test-tallyspan-SECRET-langchain"
MODEL = "gpt-4o-mini"
CHAT = f"chat {MODEL}"


# --- the app under test: a LangGraph graph with a ToolNode, as users write it ------------------------------


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


@tool
def broken_lookup(city: str) -> str:
    """A tool that fails."""
    raise ToolException(f"no data for {city}")


def _handled_lookup(city: str) -> str:
    """A tool whose failure LangChain turns into an error result."""
    raise ToolException(f"no data for {city}")


handled_lookup = StructuredTool.from_function(_handled_lookup, name="handled_lookup", handle_tool_error=True)


@tool
def crashing_lookup(city: str) -> str:
    """A tool with a bug."""
    raise ValueError("bug in the tool")


def make_model(server: OpenAICompatibleServer, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=server.base_url, api_key=API_KEY, max_retries=0, **kwargs)  # type: ignore[arg-type]


def build_graph(
    model: ChatOpenAI, tools: Sequence[BaseTool], *, name: str | None = None, handle_tool_errors: bool = True
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """model -> tools -> model ... until the model answers without tool calls."""
    bound = model.bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [bound.invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", RunnableLambda(call_model, afunc=acall_model))
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=handle_tool_errors))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(name=name) if name else builder.compile()


def weather_replies(tool_name: str = "get_weather") -> list[ScriptedReply]:
    return [
        ScriptedReply(
            tool_calls=[ScriptedToolCall(tool_name, {"city": "Tokyo"}, call_id="call_1")],
            prompt_tokens=13,
            completion_tokens=5,
        ),
        ScriptedReply(text="It is sunny in Tokyo.", prompt_tokens=40, completion_tokens=6),
    ]


USER_INPUT = {"messages": [("user", "weather in Tokyo?")]}


# --- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture
def exporter(instrument_libraries: Callable[..., InMemorySpanExporter]) -> InMemorySpanExporter:
    """The private provider's spans as they end, whatever the test instruments."""
    return instrument_libraries()


@pytest.fixture
def instrument_langchain(
    instrument_libraries: Callable[..., InMemorySpanExporter],
) -> Callable[..., LangChainInstrumentor]:
    def instrument(*, capture_content: bool = False) -> LangChainInstrumentor:
        instrument_libraries(LangChainInstrumentor, capture_content=capture_content)
        return LangChainInstrumentor()  # instrumentors are singletons: the one just instrumented

    return instrument


@pytest.fixture
def langchain(instrument_langchain: Callable[..., LangChainInstrumentor]) -> LangChainInstrumentor:
    return instrument_langchain()


@pytest.fixture
def with_openai(
    instrument_libraries: Callable[..., InMemorySpanExporter], langchain: LangChainInstrumentor
) -> None:
    """The OpenAI instrumentor on too, on the same provider."""
    instrument_libraries(OpenAIInstrumentor, capture_content=False)


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as started:
        yield started


def handler_of(instrumentor: LangChainInstrumentor) -> TallyspanCallbackHandler:
    handler = instrumentor.handler
    assert handler is not None
    return handler


def spans_by_start(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return sorted(exporter.get_finished_spans(), key=lambda span: span.start_time or 0)


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    identifier: int = span.context.span_id
    return identifier


def assert_weather_tree(
    spans: list[ReadableSpan], *, workflow: str = "invoke_workflow weather_agent"
) -> None:
    assert [span.name for span in spans] == [workflow, CHAT, "execute_tool get_weather", CHAT]
    root, first_chat, tool_span, second_chat = spans
    assert root.parent is None
    assert root.kind is SpanKind.INTERNAL
    assert {span.context.trace_id for span in spans if span.context} == {root.context.trace_id}
    for child in (first_chat, tool_span, second_chat):
        assert parent_id(child) == span_id(root)

    assert first_chat.kind is SpanKind.CLIENT
    assert dict(first_chat.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_ID: "chatcmpl-1",
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",),
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 13,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 5,
    }
    assert (second_chat.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-2"
    assert (second_chat.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert (second_chat.attributes or {})[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 40

    assert tool_span.kind is SpanKind.INTERNAL
    assert dict(tool_span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "execute_tool",
        semconv.GEN_AI_TOOL_NAME: "get_weather",
        semconv.GEN_AI_TOOL_TYPE: "function",
        semconv.GEN_AI_TOOL_DESCRIPTION: "Weather for a city.",
        semconv.GEN_AI_TOOL_CALL_ID: "call_1",
        semconv.TOOL_OUTCOME: semconv.OUTCOME_SUCCEEDED,
    }
    for span in spans:
        assert span.status.status_code is StatusCode.UNSET


# --- the span tree ------------------------------------------------------------------------------------------


def test_graph_with_tool_node_gives_workflow_over_chats_and_tool(langchain, exporter, server):
    for reply in weather_replies():
        server.add_reply(reply)
    graph = build_graph(make_model(server), [get_weather], name="weather_agent")

    result = graph.invoke(USER_INPUT)

    assert result["messages"][-1].content == "It is sunny in Tokyo."
    assert_weather_tree(spans_by_start(exporter))
    assert len(server.requests) == 2
    tool_message = server.requests[1].body["messages"][-1]
    assert (tool_message["role"], tool_message["tool_call_id"], tool_message["content"]) == (
        "tool",
        "call_1",
        "sunny in Tokyo",
    )
    assert handler_of(langchain).open_runs() == 0


async def test_ainvoke_gives_the_same_tree(langchain, exporter, server):
    for reply in weather_replies():
        server.add_reply(reply)
    graph = build_graph(make_model(server), [get_weather], name="weather_agent")

    result = await graph.ainvoke(USER_INPUT)

    assert result["messages"][-1].content == "It is sunny in Tokyo."
    assert_weather_tree(spans_by_start(exporter))
    assert handler_of(langchain).open_runs() == 0


def test_unnamed_graph_is_a_langgraph_workflow(langchain, exporter, server):
    for reply in weather_replies():
        server.add_reply(reply)

    build_graph(make_model(server), [get_weather]).invoke(USER_INPUT)

    root = spans_by_start(exporter)[0]
    assert root.name == "invoke_workflow LangGraph"
    assert dict(root.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_WORKFLOW,
        semconv.GEN_AI_WORKFLOW_NAME: "LangGraph",
    }


def test_agent_name_metadata_opens_invoke_agent_and_a_subagent_nests_under_it(langchain, exporter, server):
    server.add_reply(ScriptedReply(text="inner answer"))
    server.add_reply(ScriptedReply(text="outer answer"))
    inner = build_graph(make_model(server), [get_weather], name="researcher")

    def delegate(state: MessagesState) -> dict[str, list[BaseMessage]]:
        answer = inner.invoke(state, config={"metadata": {"lc_agent_name": "researcher"}})
        return {"messages": [answer["messages"][-1]]}

    builder = StateGraph(MessagesState)
    builder.add_node("delegate", delegate)
    builder.add_node("agent", lambda state: {"messages": [make_model(server).invoke(state["messages"])]})
    builder.add_edge(START, "delegate")
    builder.add_edge("delegate", "agent")
    builder.add_edge("agent", END)
    builder.compile(name="planner").invoke(USER_INPUT, config={"metadata": {"lc_agent_name": "planner"}})  # type: ignore[call-overload]

    spans = spans_by_start(exporter)
    assert [span.name for span in spans] == ["invoke_agent planner", "invoke_agent researcher", CHAT, CHAT]
    planner, researcher, inner_chat, outer_chat = spans
    assert (planner.attributes or {})[semconv.GEN_AI_AGENT_NAME] == "planner"
    assert (researcher.attributes or {})[semconv.GEN_AI_AGENT_NAME] == "researcher"
    assert parent_id(researcher) == span_id(planner)
    assert parent_id(inner_chat) == span_id(researcher)
    assert parent_id(outer_chat) == span_id(planner)


def test_root_graph_nests_under_the_callers_current_span(langchain, exporter, server, tracer_provider):
    for reply in weather_replies():
        server.add_reply(reply)
    graph = build_graph(make_model(server), [get_weather], name="weather_agent")

    with tracer_provider.get_tracer("app").start_as_current_span("request") as outer:
        graph.invoke(USER_INPUT)

    workflow = next(span for span in exporter.get_finished_spans() if span.name.startswith("invoke_workflow"))
    assert parent_id(workflow) == outer.get_span_context().span_id


def test_bare_model_call_is_a_root_chat_span(langchain, exporter, server):
    server.add_reply(ScriptedReply(text="hello", prompt_tokens=3, completion_tokens=1))

    message = make_model(server, temperature=0.2, max_tokens=64).invoke("hi")

    assert message.content == "hello"
    (span,) = exporter.get_finished_spans()
    assert span.name == CHAT
    assert span.parent is None
    attributes = span.attributes or {}
    assert attributes[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert (
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS],
        attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS],
    ) == (3, 1)


# --- tool outcomes -----------------------------------------------------------------------------------------


def test_tool_exception_handled_by_tool_node_is_failed(langchain, exporter, server):
    for reply in weather_replies("broken_lookup"):
        server.add_reply(reply)

    build_graph(make_model(server), [broken_lookup]).invoke(USER_INPUT)

    (tool_span,) = [
        span for span in exporter.get_finished_spans() if span.name == "execute_tool broken_lookup"
    ]
    attributes = tool_span.attributes or {}
    assert attributes[semconv.TOOL_OUTCOME] == semconv.OUTCOME_FAILED
    assert attributes[semconv.ERROR_TYPE] == "ToolException"
    assert attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert tool_span.status.status_code is StatusCode.ERROR
    assert [span.name for span in spans_by_start(exporter)].count(CHAT) == 2


def test_tool_returning_error_tool_message_is_failed(langchain, exporter, server):
    for reply in weather_replies("handled_lookup"):
        server.add_reply(reply)

    build_graph(make_model(server), [handled_lookup]).invoke(USER_INPUT)

    (tool_span,) = [
        span for span in exporter.get_finished_spans() if span.name == "execute_tool handled_lookup"
    ]
    attributes = tool_span.attributes or {}
    assert attributes[semconv.TOOL_OUTCOME] == semconv.OUTCOME_FAILED
    assert attributes[semconv.ERROR_TYPE] == "tool_error"
    assert tool_span.status.status_code is StatusCode.ERROR
    assert server.requests[1].body["messages"][-1]["content"] == "no data for Tokyo"


def test_tool_crash_propagates_unchanged_and_fails_tool_and_workflow(langchain, exporter, server):
    for reply in weather_replies("crashing_lookup"):
        server.add_reply(reply)
    graph = build_graph(make_model(server), [crashing_lookup], handle_tool_errors=False)

    with pytest.raises(ValueError, match="bug in the tool"):
        graph.invoke(USER_INPUT)

    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"invoke_workflow LangGraph", CHAT, "execute_tool crashing_lookup"}
    tool_attributes = spans["execute_tool crashing_lookup"].attributes or {}
    assert tool_attributes[semconv.TOOL_OUTCOME] == semconv.OUTCOME_FAILED
    assert tool_attributes[semconv.ERROR_TYPE] == "ValueError"
    workflow = spans["invoke_workflow LangGraph"]
    assert workflow.status.status_code is StatusCode.ERROR
    assert (workflow.attributes or {})[semconv.ERROR_TYPE] == "ValueError"
    assert handler_of(langchain).open_runs() == 0


def test_model_error_fails_the_chat_span_and_passes_through(langchain, exporter, server):
    server.add_reply(ScriptedReply(status=500))

    with pytest.raises(openai.InternalServerError):
        make_model(server).invoke("hi")

    (span,) = exporter.get_finished_spans()
    assert span.name == CHAT
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[semconv.ERROR_TYPE] == "500"  # the HTTP status, as the OpenAI spans say


# --- streams ------------------------------------------------------------------------------------------------


def test_stream_exhausted_ends_its_chat_span_once(langchain, exporter, server, span_end_calls):
    server.add_reply(ScriptedReply(text="streamed answer"))

    text = "".join(str(chunk.content) for chunk in make_model(server).stream("hi"))

    assert text == "streamed answer"
    (span,) = exporter.get_finished_spans()
    assert span.name == CHAT
    assert span.status.status_code is StatusCode.UNSET
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert handler_of(langchain).open_runs() == 0
    assert list(span_end_calls.values()) == [1]  # the exporter never holds a span twice: count end()


def test_stream_closed_early_ends_its_span_without_error(langchain, exporter, server, span_end_calls):
    server.add_reply(ScriptedReply(text="a long streamed answer in many chunks"))

    stream = make_model(server).stream("hi")
    next(stream)
    next(stream)
    stream.close()  # type: ignore[attr-defined]

    (span,) = exporter.get_finished_spans()
    assert span.name == CHAT
    assert span.status.status_code is StatusCode.UNSET
    assert handler_of(langchain).open_runs() == 0
    assert list(span_end_calls.values()) == [1]


async def test_astream_ends_its_chat_span(langchain, exporter, server, span_end_calls):
    server.add_reply(ScriptedReply(text="streamed answer"))

    chunks = [chunk async for chunk in make_model(server).astream("hi")]

    assert "".join(str(chunk.content) for chunk in chunks) == "streamed answer"
    (span,) = exporter.get_finished_spans()
    assert span.name == CHAT
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.ERROR_TYPE not in (span.attributes or {})
    assert handler_of(langchain).open_runs() == 0
    assert list(span_end_calls.values()) == [1]


def test_stream_error_fails_the_span_and_passes_through(langchain, exporter, server, span_end_calls):
    server.add_reply(ScriptedReply(text="cut short " * 20, abort_after_chunks=2))

    with pytest.raises(mid_stream_error_class()):
        for _chunk in make_model(server).stream("hi"):
            pass

    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert handler_of(langchain).open_runs() == 0
    assert list(span_end_calls.values()) == [1]


# --- one span per model call with the OpenAI instrumentor on ---------------------------------------------------


def test_chat_openai_call_appears_once_with_both_instrumentors(with_openai, exporter, server):
    server.add_reply(ScriptedReply(text="direct"))
    server.add_reply(ScriptedReply(text="through langchain"))
    seen_current: list[int] = []

    def remember_current_span(request: httpx.Request) -> None:
        seen_current.append(trace.get_current_span().get_span_context().span_id)

    with openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as client:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    with httpx.Client(event_hooks={"request": [remember_current_span]}) as http_client:
        make_model(server, http_client=http_client).invoke("hi")

    direct, through_langchain = spans_by_start(exporter)
    # The OpenAI instrumentor is live: the direct call has its span (with server.address, which ours lacks).
    assert semconv.SERVER_ADDRESS in (direct.attributes or {})
    assert through_langchain.name == CHAT
    assert semconv.SERVER_ADDRESS not in (through_langchain.attributes or {})
    assert (through_langchain.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-2"
    # LangChain's chat span is current around the provider call.
    assert seen_current == [span_id(through_langchain)]


async def test_async_graph_with_both_instrumentors_has_no_duplicate_model_spans(
    with_openai, exporter, server
):
    for reply in weather_replies():
        server.add_reply(reply)

    await build_graph(make_model(server), [get_weather], name="weather_agent").ainvoke(USER_INPUT)

    assert_weather_tree(spans_by_start(exporter))


def test_streams_with_both_instrumentors_have_one_span_each(with_openai, exporter, server):
    server.add_reply(ScriptedReply(text="first"))
    server.add_reply(ScriptedReply(text="second"))
    model = make_model(server)

    assert "".join(str(c.content) for c in model.stream("hi")) == "first"
    stream = model.stream("hi")
    next(stream)
    stream.close()  # type: ignore[attr-defined]

    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == [CHAT, CHAT]
    assert all(semconv.SERVER_ADDRESS not in (span.attributes or {}) for span in spans)


async def test_astream_with_both_instrumentors_has_one_span(with_openai, exporter, server):
    server.add_reply(ScriptedReply(text="first"))

    chunks = [chunk async for chunk in make_model(server).astream("hi")]

    assert "".join(str(chunk.content) for chunk in chunks) == "first"
    (span,) = exporter.get_finished_spans()
    assert semconv.SERVER_ADDRESS not in (span.attributes or {})


def test_provider_span_appears_when_langchain_is_not_tracing_the_run(tracer_provider, exporter, server):
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        server.add_reply(ScriptedReply(text="only openai"))
        make_model(server).invoke("hi")
    finally:
        instrumentor.uninstrument()

    (span,) = exporter.get_finished_spans()
    assert semconv.SERVER_ADDRESS in (span.attributes or {})


# --- switches: suppression, uninstrument, content ------------------------------------------------------------


def test_suppress_instrumentation_emits_no_span(with_openai, exporter, server):
    for reply in weather_replies():
        server.add_reply(reply)
    graph = build_graph(make_model(server), [get_weather], name="weather_agent")

    with suppress_instrumentation():
        result = graph.invoke(USER_INPUT)

    assert result["messages"][-1].content == "It is sunny in Tokyo."
    assert exporter.get_finished_spans() == ()


def test_uninstrument_removes_the_handler_and_quiets_old_managers(instrument_langchain, exporter, server):
    instrumentor = instrument_langchain()
    handler = handler_of(instrumentor)
    assert handler in CallbackManager(handlers=[]).inheritable_handlers
    built_while_instrumented = CallbackManager(handlers=[])

    instrumentor.uninstrument()

    assert CallbackManager(handlers=[]).handlers == []
    assert not hasattr(BaseChatModel.stream, "__wrapped__")
    for reply in weather_replies():
        server.add_reply(reply)
    build_graph(make_model(server), [get_weather]).invoke(USER_INPUT)
    server.add_reply(ScriptedReply(text="old manager"))
    make_model(server).invoke("hi", config={"callbacks": built_while_instrumented})
    assert exporter.get_finished_spans() == ()


def test_content_is_not_exported_by_default_but_reaches_the_buffer(langchain, exporter, server):
    for reply in weather_replies():
        server.add_reply(reply)
    buffer = content_buffer()
    buffer.add_consumer()
    try:
        build_graph(make_model(server), [get_weather], name="weather_agent").invoke(USER_INPUT)
        first_chat, tool_span = spans_by_start(exporter)[1:3]
        model_content = buffer.pop(span_id(first_chat))
        tool_content = buffer.pop(span_id(tool_span))
    finally:
        buffer.remove_consumer()

    assert model_content == ModelContent(
        output_text="",
        tool_calls=(ToolCallContent("get_weather", '{"city": "Tokyo"}', "call_1"),),
        prompt="weather in Tokyo?",
    )
    assert tool_content == ToolContent(arguments={"city": "Tokyo"}, result="sunny in Tokyo")
    for span in exporter.get_finished_spans():
        for key in (
            semconv.GEN_AI_INPUT_MESSAGES,
            semconv.GEN_AI_OUTPUT_MESSAGES,
            semconv.GEN_AI_TOOL_CALL_ARGUMENTS,
            semconv.GEN_AI_TOOL_CALL_RESULT,
        ):
            assert key not in (span.attributes or {})
    assert all(
        API_KEY not in json.dumps(dict(span.attributes or {})) for span in exporter.get_finished_spans()
    )


def test_capture_content_exports_messages_and_tool_arguments(instrument_langchain, exporter, server):
    instrument_langchain(capture_content=True)
    for reply in weather_replies():
        server.add_reply(reply)

    build_graph(make_model(server), [get_weather], name="weather_agent").invoke(
        {"messages": [("system", "Be brief."), ("user", "weather in Tokyo?")]}
    )

    _root, first_chat, tool_span, second_chat = spans_by_start(exporter)
    first = first_chat.attributes or {}
    assert json.loads(str(first[semconv.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "user", "parts": [{"type": "text", "content": "weather in Tokyo?"}]}
    ]
    assert json.loads(str(first[semconv.GEN_AI_SYSTEM_INSTRUCTIONS])) == [
        {"type": "text", "content": "Be brief."}
    ]
    assert json.loads(str(first[semconv.GEN_AI_OUTPUT_MESSAGES])) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Tokyo"}}
            ],
            "finish_reason": "tool_call",
        }
    ]
    second_input = json.loads(str((second_chat.attributes or {})[semconv.GEN_AI_INPUT_MESSAGES]))
    assert second_input[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_1", "response": "sunny in Tokyo"}],
    }
    tool_attributes = tool_span.attributes or {}
    assert json.loads(str(tool_attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])) == {"city": "Tokyo"}
    assert tool_attributes[semconv.GEN_AI_TOOL_CALL_RESULT] == "sunny in Tokyo"


def test_stage_is_stamped_on_chat_spans_in_sync_and_async(langchain, exporter, server):
    server.add_reply(ScriptedReply(text="one"))
    server.add_reply(ScriptedReply(text="two"))
    model = make_model(server)

    with tallyspan.stage("weekly_report"):
        model.invoke("hi")
    import asyncio

    async def run() -> None:
        with tallyspan.stage("triage"):
            await model.ainvoke("hi")

    asyncio.run(run())

    stages = [(span.attributes or {}).get(semconv.STAGE) for span in spans_by_start(exporter)]
    assert stages == ["weekly_report", "triage"]


# --- robustness ----------------------------------------------------------------------------------------------


def test_handler_never_raises_on_malformed_payloads_and_still_ends_spans(tracer_provider, exporter):
    import uuid

    handler = TallyspanCallbackHandler(tracer_provider.get_tracer("t"), capture_content=True)
    run_id = uuid.uuid4()
    handler.on_chat_model_start({"id": None}, [[object()]], run_id=run_id, metadata={"ls_provider": 3})
    handler.on_llm_end(object(), run_id=run_id)
    tool_run = uuid.uuid4()
    handler.on_tool_start({}, "raw", run_id=tool_run, inputs=None)
    handler.on_tool_end(object(), run_id=tool_run)
    handler.on_llm_end(None, run_id=uuid.uuid4())  # never started
    handler.on_chain_error(ValueError("x"), run_id=uuid.uuid4())

    names = sorted(span.name for span in exporter.get_finished_spans())
    assert names == ["chat", "execute_tool tool"]
    assert handler.open_runs() == 0


def test_run_map_is_bounded_and_counts_drops(tracer_provider, exporter):
    import uuid

    handler = TallyspanCallbackHandler(tracer_provider.get_tracer("t"), capture_content=False, max_runs=2)
    for _ in range(3):
        handler.on_chain_start(None, {}, run_id=uuid.uuid4(), metadata={})

    assert handler.open_runs() == 2
    assert tallyspan.stats()["dropped.langchain_runs"] == 1


def test_ai_message_from_a_non_openai_model_reads_usage_metadata(langchain, exporter):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    reply = AIMessage(
        content=[{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "answer"}],
        usage_metadata={
            "input_tokens": 10,
            "output_tokens": 4,
            "total_tokens": 14,
            "input_token_details": {"cache_read": 6},
            "output_token_details": {"reasoning": 2},
        },
        response_metadata={"model_name": "fake-1", "stop_reason": "end_turn"},
    )
    buffer = content_buffer()
    buffer.add_consumer()
    try:
        GenericFakeChatModel(messages=iter([reply])).invoke("question?")
        (span,) = exporter.get_finished_spans()
        content = buffer.pop(span_id(span))
    finally:
        buffer.remove_consumer()

    attributes = span.attributes or {}
    assert span.name == "chat"
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "genericfakechatmodel"  # its ls_provider
    assert attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 6
    assert attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 2
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert attributes[semconv.GEN_AI_RESPONSE_MODEL] == "fake-1"
    assert isinstance(content, ModelContent)
    assert (content.output_text, content.reasoning_text, content.prompt) == ("answer", "hmm", "question?")


# --- end to end: the agent's books and its deliverable, through tallyspan.instrument() ---------------------------


@tool
def book_flight(flight: str) -> str:
    """Book a flight."""
    return f"booked {flight}"


@tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return "sent"


@tool
def log_action(call_id: str, tool_name: str, claimed_outcome: str, summary: str) -> str:
    """Log an action you took: every call, once, right after it."""
    return "logged"


def test_agent_with_unlogged_call_and_bad_deliverable_end_to_end(make_instrumented, span_exporter, server):
    """The agent books a flight and logs it, sends an email without logging it, then answers too briefly
    in English where the contract asks for Japanese: the run span carries ``unlogged_call`` and the final
    chat span the contract violations."""
    contracts = {"contracts": {"weekly_report": {"language": "ja", "min_chars": 40}}}
    instrumentation = make_instrumented(contracts).instrumentation
    log_arguments = {
        "call_id": "call_1",
        "tool_name": "book_flight",
        "claimed_outcome": "succeeded",
        "summary": "booked HAT001",
    }
    for reply in (
        ScriptedReply(tool_calls=[ScriptedToolCall("book_flight", {"flight": "HAT001"}, call_id="call_1")]),
        ScriptedReply(tool_calls=[ScriptedToolCall("log_action", log_arguments, call_id="call_log_1")]),
        ScriptedReply(
            tool_calls=[ScriptedToolCall("send_email", {"to": "boss", "body": "booked"}, call_id="call_2")]
        ),
        ScriptedReply(text="Done."),
    ):
        server.add_reply(reply)
    graph = build_graph(make_model(server), [book_flight, send_email, log_action], name="travel_agent")

    with tallyspan.stage("weekly_report"):
        result = graph.invoke({"messages": [("user", "Book HAT001 and tell the boss.")]})
    instrumentation.force_flush()

    assert result["messages"][-1].content == "Done."
    spans = spans_by_start(span_exporter)
    assert [span.name for span in spans] == [
        "invoke_workflow travel_agent",
        CHAT,
        "execute_tool book_flight",
        CHAT,
        "execute_tool log_action",
        CHAT,
        "execute_tool send_email",
        CHAT,
    ]
    run = spans[0]
    assert all(parent_id(span) == span_id(run) for span in spans[1:])
    tool_ids = [
        (span.attributes or {}).get(semconv.GEN_AI_TOOL_CALL_ID)
        for span in spans
        if "execute_tool" in span.name
    ]
    assert tool_ids == ["call_1", "call_log_1", "call_2"]

    run_attributes = run.attributes or {}
    assert run_attributes[semconv.LEDGER_DISCREPANCY_TYPES] == ("unlogged_call",)
    assert run_attributes[semconv.LEDGER_BALANCED] is False
    assert run_attributes[semconv.LEDGER_OBSERVED_COUNT] == 2
    assert run_attributes[semconv.LEDGER_CLAIMED_COUNT] == 1
    assert run.status.status_code is StatusCode.ERROR

    deliverable = spans[-1].attributes or {}
    assert deliverable[semconv.STAGE] == "weekly_report"
    assert tuple(deliverable[semconv.VIOLATION_TYPES]) == ("not_japanese", "too_short")  # type: ignore[arg-type]
    assert deliverable[semconv.FAILURE_CLASS] == "contract_violation"
    assert spans[-1].status.status_code is StatusCode.ERROR


def test_interrupt_and_resume_give_two_clean_runs_and_no_callback_errors(langchain, exporter, caplog):
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    def ask(state: MessagesState) -> dict[str, list[Any]]:
        answer = interrupt("approve?")
        return {"messages": [AIMessage(content=f"approved: {answer}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    graph = builder.compile(checkpointer=InMemorySaver(), name="approval")
    config: Any = {"configurable": {"thread_id": "t1"}}

    paused = graph.invoke(USER_INPUT, config)  # type: ignore[call-overload]
    resumed = graph.invoke(Command(resume="yes"), config)

    assert "__interrupt__" in paused
    assert resumed["messages"][-1].content == "approved: yes"
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ["invoke_workflow approval", "invoke_workflow approval"]
    assert all(span.status.status_code is StatusCode.UNSET for span in spans)
    assert not [record for record in caplog.records if "TallyspanCallbackHandler" in record.getMessage()]
    assert handler_of(langchain).open_runs() == 0


def test_parallel_tool_calls_run_on_threads_and_hang_under_the_workflow(langchain, exporter, server):
    server.add_reply(
        ScriptedReply(
            tool_calls=[
                ScriptedToolCall("get_weather", {"city": "Tokyo"}, call_id="call_a"),
                ScriptedToolCall("get_weather", {"city": "Osaka"}, call_id="call_b"),
            ]
        )
    )
    server.add_reply(ScriptedReply(text="Sunny in both."))

    build_graph(make_model(server), [get_weather], name="weather_agent").invoke(USER_INPUT)

    spans = spans_by_start(exporter)
    root = spans[0]
    tools = [span for span in spans if span.name == "execute_tool get_weather"]
    assert sorted(str((span.attributes or {})[semconv.GEN_AI_TOOL_CALL_ID]) for span in tools) == [
        "call_a",
        "call_b",
    ]
    assert all(parent_id(span) == span_id(root) for span in tools)
    assert [span.name for span in spans].count(CHAT) == 2
    assert handler_of(langchain).open_runs() == 0


def test_chat_anthropic_call_appears_once_with_the_anthropic_instrumentor(
    langchain, tracer_provider, exporter
):
    import anthropic
    from langchain_anthropic import ChatAnthropic

    from tallyspan.testing import AnthropicReply, AnthropicServer
    from tallyspan_instrumentors.anthropic import AnthropicInstrumentor

    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    replies = [
        AnthropicReply(text="direct"),
        AnthropicReply(text="via langchain", prompt_tokens=9, completion_tokens=3, cached_tokens=4),
        AnthropicReply(text="streamed"),
    ]
    try:
        with AnthropicServer(replies=replies) as server:
            with anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0) as client:
                client.messages.create(
                    model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                )
            model = ChatAnthropic(
                model_name="claude-x",
                base_url=server.base_url,
                api_key=API_KEY,  # type: ignore[arg-type]
                max_retries=0,
            )  # type: ignore[call-arg]
            assert model.invoke("hi").content == "via langchain"
            assert "".join(str(chunk.content) for chunk in model.stream("hi")) == "streamed"
    finally:
        instrumentor.uninstrument()

    direct, invoked, streamed = spans_by_start(exporter)
    assert semconv.SERVER_ADDRESS in (direct.attributes or {})  # the Anthropic instrumentor is live
    for span in (invoked, streamed):
        assert span.name == "chat claude-x"
        assert (span.attributes or {})[semconv.GEN_AI_PROVIDER_NAME] == "anthropic"
        assert semconv.SERVER_ADDRESS not in (span.attributes or {})
    assert (invoked.attributes or {})[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 4
    assert (invoked.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
