"""The Responses API: create (JSON and stream), parse, content in the GenAI message format."""

from __future__ import annotations

import json
from collections.abc import Callable

import openai
import pydantic
from openai.types.responses import Response
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tallyspan import semconv
from tallyspan._content import ModelContent, ToolCallContent, content_buffer
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [span.name for span in spans]
    return spans[0]


def test_responses_create_span_has_exact_attributes(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(
        ScriptedReply(
            text="Done.", prompt_tokens=20, completion_tokens=8, cached_tokens=5, reasoning_tokens=3
        )
    )
    result = client.responses.create(
        model="gpt-5",
        input="Write it.",
        max_output_tokens=100,
        temperature=0.3,
        top_p=0.8,
        conversation="conv_1",
    )
    assert type(result) is Response
    span = only_span(openai_spans)
    assert span.name == "chat gpt-5"
    assert span.kind is SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: "gpt-5",
        semconv.GEN_AI_REQUEST_MAX_TOKENS: 100,
        semconv.GEN_AI_REQUEST_TEMPERATURE: 0.3,
        semconv.GEN_AI_REQUEST_TOP_P: 0.8,
        semconv.GEN_AI_CONVERSATION_ID: "conv_1",
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: openai_server.port,
        semconv.GEN_AI_RESPONSE_ID: "resp_1",
        semconv.GEN_AI_RESPONSE_MODEL: "gpt-5",
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 20,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 8,
        semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 5,
        semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 3,
        semconv.OPENAI_RESPONSE_SERVICE_TIER: "default",
    }


def test_incomplete_response_reports_length_finish_reason(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text="Cut", finish_reason="length"))
    client.responses.create(model="m", input="hi")
    assert (only_span(openai_spans).attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("length",)


def test_responses_content_in_genai_format_when_captured(
    instrument_openai: Callable[..., InMemorySpanExporter],
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
) -> None:
    exporter = instrument_openai(capture_content=True)
    openai_server.add_reply(
        ScriptedReply(
            text="Logged.", reasoning="Log it.", tool_calls=[ScriptedToolCall("log_action", {"id": 1})]
        )
    )
    client.responses.create(
        model="m",
        instructions="Always log.",
        input=[
            {"role": "user", "content": "Search please"},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "x"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "3 hits"},
        ],
    )
    attributes = only_span(exporter).attributes or {}
    assert json.loads(str(attributes[semconv.GEN_AI_SYSTEM_INSTRUCTIONS])) == [
        {"type": "text", "content": "Always log."}
    ]
    assert json.loads(str(attributes[semconv.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "user", "parts": [{"type": "text", "content": "Search please"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "3 hits"}]},
    ]
    assert json.loads(str(attributes[semconv.GEN_AI_OUTPUT_MESSAGES])) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "Log it."},
                {"type": "text", "content": "Logged."},
                {"type": "tool_call", "id": "call_1", "name": "log_action", "arguments": {"id": 1}},
            ],
            "finish_reason": "tool_call",
        }
    ]


def test_responses_stream_puts_final_content_in_the_buffer(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    buffer = content_buffer()
    buffer.add_consumer()
    try:
        openai_server.add_reply(
            ScriptedReply(
                text="streamed answer", reasoning="r", tool_calls=[ScriptedToolCall("f", "{}", "call_f")]
            )
        )
        events = list(client.responses.create(model="m", input="question?", stream=True))
        span = only_span(openai_spans)
        assert span.context is not None
        content = buffer.pop(span.context.span_id)
    finally:
        buffer.remove_consumer()
    assert events[-1].type == "response.completed"
    assert content == ModelContent(
        output_text="streamed answer",
        tool_calls=(ToolCallContent("f", "{}", "call_f"),),
        prompt="question?",
        reasoning_text="r",
    )
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == "resp_1"


def test_responses_stream_cut_short_keeps_the_deltas_seen(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    buffer = content_buffer()
    buffer.add_consumer()
    try:
        openai_server.add_reply(ScriptedReply(text="abcdefghijklmnopqrstuvwxyz" * 3))
        stream = client.responses.create(model="m", input="q", stream=True)
        deltas = []
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
                if len(deltas) == 3:  # cut after several deltas: every one of them is kept, in order
                    break
        stream.close()
        span = only_span(openai_spans)
        assert span.context is not None
        content = buffer.pop(span.context.span_id)
    finally:
        buffer.remove_consumer()
    assert isinstance(content, ModelContent)
    assert len(set(deltas)) == 3  # three different pieces: the order and each piece count
    assert (
        content.output_text
        == "".join(deltas)
        == ("abcdefghijklmnopqrstuvwxyz" * 3)[: len(content.output_text)]
    )
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == "resp_1"


class Verdict(pydantic.BaseModel):
    passed: bool


def test_responses_parse_makes_one_span(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text='{"passed": true}'))
    result = client.responses.parse(model="m", input="judge", text_format=Verdict)
    assert result.output_parsed == Verdict(passed=True)
    span = only_span(openai_spans)
    assert (span.attributes or {})[semconv.GEN_AI_OUTPUT_TYPE] == "json"


async def test_async_responses_create_and_stream(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text="one", completion_tokens=1))
    openai_server.add_reply(ScriptedReply(text="two", completion_tokens=2))
    first = await async_client.responses.create(model="m", input="hi")
    stream = await async_client.responses.create(model="m", input="hi", stream=True)
    kinds = [event.type async for event in stream]
    assert first.output_text == "one"
    assert kinds[-1] == "response.completed"
    spans = openai_spans.get_finished_spans()
    assert [(span.attributes or {})[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] for span in spans] == [1, 2]
    assert [(span.attributes or {}).get(semconv.GEN_AI_REQUEST_STREAM) for span in spans] == [None, True]
