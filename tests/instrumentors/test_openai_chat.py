"""Chat completions (non-streaming), embeddings and raw responses: spans, attributes, content."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletion
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tallyspan
from tallyspan import semconv
from tallyspan._content import ContentBuffer, ModelContent, ToolCallContent, content_buffer
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

USER: Any = [{"role": "user", "content": "What is the weather in Tokyo?"}]


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [span.name for span in spans]
    return spans[0]


def test_chat_completion_span_has_exact_gen_ai_attributes(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(
        ScriptedReply(
            text="Sunny.", prompt_tokens=12, completion_tokens=3, cached_tokens=4, reasoning_tokens=1
        )
    )
    client.chat.completions.create(model="gpt-4o-mini", messages=USER)
    span = only_span(openai_spans)
    assert span.name == "chat gpt-4o-mini"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == semconv.INSTRUMENTATION_SCOPE
    assert dict(span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: openai_server.port,
        semconv.GEN_AI_RESPONSE_ID: "chatcmpl-1",
        semconv.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini",
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 12,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
        semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 4,
        semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 1,
        semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT: "fp_tallyspan",
        semconv.OPENAI_RESPONSE_SERVICE_TIER: "default",
    }


def test_each_client_s_spans_name_its_own_server_when_calls_alternate(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    """The server attributes of the last URL read are kept: a second client must not get the first's."""
    with (
        OpenAICompatibleServer() as other_server,
        openai.OpenAI(
            base_url=other_server.base_url.replace("127.0.0.1", "localhost"), api_key="sk-test", max_retries=0
        ) as other,
    ):
        other_port = other_server.port
        for _ in range(2):
            client.chat.completions.create(model="gpt-4o-mini", messages=USER)
            other.chat.completions.create(model="gpt-4o-mini", messages=USER)
    servers = [
        (span.attributes or {}).get(semconv.SERVER_ADDRESS) for span in openai_spans.get_finished_spans()
    ]
    ports = [(span.attributes or {}).get(semconv.SERVER_PORT) for span in openai_spans.get_finished_spans()]
    assert servers == ["127.0.0.1", "localhost"] * 2
    assert ports == [openai_server.port, other_port] * 2


def test_a_client_whose_base_url_the_app_changes_names_its_new_server(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    client.chat.completions.create(model="gpt-4o-mini", messages=USER)
    with OpenAICompatibleServer() as other_server:
        client.base_url = other_server.base_url.replace("127.0.0.1", "localhost")
        client.chat.completions.create(model="gpt-4o-mini", messages=USER)
        other_port = other_server.port
    found = [
        (
            (span.attributes or {}).get(semconv.SERVER_ADDRESS),
            (span.attributes or {}).get(semconv.SERVER_PORT),
        )
        for span in openai_spans.get_finished_spans()
    ]
    assert found == [("127.0.0.1", openai_server.port), ("localhost", other_port)]


def test_request_parameters_become_request_attributes(
    openai_spans: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    client.chat.completions.create(
        model="m",
        messages=USER,
        max_completion_tokens=64,
        temperature=0.2,
        top_p=0.9,
        stop=["END", "STOP"],
        seed=7,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        n=2,
        service_tier="flex",
        response_format={"type": "json_object"},
    )
    attributes = only_span(openai_spans).attributes or {}
    assert attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert attributes[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attributes[semconv.GEN_AI_REQUEST_TOP_P] == 0.9
    assert attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] == ("END", "STOP")
    assert attributes[semconv.GEN_AI_REQUEST_SEED] == 7
    assert attributes[semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY] == 0.5
    assert attributes[semconv.GEN_AI_REQUEST_PRESENCE_PENALTY] == -0.5
    assert attributes[semconv.GEN_AI_REQUEST_CHOICE_COUNT] == 2
    assert attributes[semconv.OPENAI_REQUEST_SERVICE_TIER] == "flex"
    assert attributes[semconv.GEN_AI_OUTPUT_TYPE] == "json"
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop", "stop")


def test_legacy_max_tokens_and_single_stop_string_are_read(
    openai_spans: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    client.chat.completions.create(model="m", messages=USER, max_tokens=10, stop="END", n=1)
    attributes = only_span(openai_spans).attributes or {}
    assert attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 10
    assert attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] == ("END",)
    assert semconv.GEN_AI_REQUEST_CHOICE_COUNT not in attributes


def test_result_is_the_sdks_own_object(openai_spans: InMemorySpanExporter, client: openai.OpenAI) -> None:
    result = client.chat.completions.create(model="m", messages=USER)
    assert type(result) is ChatCompletion
    assert result.choices[0].message.content == "ok"


def test_span_carries_the_current_stage_and_enqueue_time(
    openai_spans: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    with tallyspan.stage("weekly_report", enqueued_at=1700000000.5):
        client.chat.completions.create(model="m", messages=USER)
    client.chat.completions.create(model="m", messages=USER)
    staged, unstaged = openai_spans.get_finished_spans()
    assert (staged.attributes or {})[semconv.STAGE] == "weekly_report"
    assert (staged.attributes or {})[semconv.ENQUEUED_AT] == 1700000000.5
    assert semconv.STAGE not in (unstaged.attributes or {})


def test_span_is_a_child_of_the_active_span(
    openai_spans: InMemorySpanExporter, client: openai.OpenAI, tracer_provider: TracerProvider
) -> None:
    tracer = tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("agent step") as parent:
        client.chat.completions.create(model="m", messages=USER)
    chat, step = openai_spans.get_finished_spans()
    assert chat.parent is not None
    assert chat.parent.span_id == parent.get_span_context().span_id
    assert chat.context is not None
    assert chat.context.trace_id == step.context.trace_id


class Weather(pydantic.BaseModel):
    city: str
    sunny: bool


def test_parse_makes_one_span_with_json_output_type(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text='{"city": "Tokyo", "sunny": true}'))
    result = client.chat.completions.parse(model="m", messages=USER, response_format=Weather)
    assert result.choices[0].message.parsed == Weather(city="Tokyo", sunny=True)
    span = only_span(openai_spans)
    assert span.name == "chat m"
    assert (span.attributes or {})[semconv.GEN_AI_OUTPUT_TYPE] == "json"
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


async def test_async_create_and_parse_make_spans(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text="async answer", prompt_tokens=5, completion_tokens=2))
    result = await async_client.chat.completions.create(model="m-async", messages=USER)
    openai_server.add_reply(ScriptedReply(text='{"city": "Osaka", "sunny": false}'))
    parsed = await async_client.chat.completions.parse(
        model="m-async", messages=USER, response_format=Weather
    )
    assert result.choices[0].message.content == "async answer"
    assert parsed.choices[0].message.parsed == Weather(city="Osaka", sunny=False)
    first, second = openai_spans.get_finished_spans()
    assert first.name == second.name == "chat m-async"
    assert (first.attributes or {})[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 5
    assert (first.attributes or {})[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert (second.attributes or {})[semconv.GEN_AI_OUTPUT_TYPE] == "json"


def test_with_raw_response_returns_the_raw_object_and_still_makes_a_span(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text="raw answer", completion_tokens=2))
    raw = client.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert type(raw).__name__ == "LegacyAPIResponse"
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.parse().choices[0].message.content == "raw answer"
    attributes = only_span(openai_spans).attributes or {}
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-1"
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 2


def test_with_streaming_response_leaves_the_body_to_the_app(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text="streamed raw"))
    with client.chat.completions.with_streaming_response.create(model="m", messages=USER) as response:
        assert response.parse().choices[0].message.content == "streamed raw"
    span = only_span(openai_spans)
    assert span.name == "chat m"
    assert semconv.GEN_AI_RESPONSE_ID not in (span.attributes or {})


def test_embeddings_span(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(prompt_tokens=6))
    result = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"], dimensions=4)
    assert len(result.data) == 2
    span = only_span(openai_spans)
    assert span.name == "embeddings text-embedding-3-small"
    assert span.kind is SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "embeddings",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: "text-embedding-3-small",
        semconv.GEN_AI_EMBEDDINGS_DIMENSION_COUNT: 4,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: openai_server.port,
        semconv.GEN_AI_RESPONSE_MODEL: "text-embedding-3-small",
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 6,
    }


async def test_async_embeddings_span_records_encoding_format(
    openai_spans: InMemorySpanExporter, async_client: openai.AsyncOpenAI
) -> None:
    await async_client.embeddings.create(model="e", input="x", encoding_format="float")
    attributes = only_span(openai_spans).attributes or {}
    assert attributes[semconv.GEN_AI_REQUEST_ENCODING_FORMATS] == ("float",)
    assert attributes[semconv.GEN_AI_EMBEDDINGS_DIMENSION_COUNT] == 8


# --- content ---------------------------------------------------------------------------------------------

TOOL_CONVERSATION: Any = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Tokyo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Tokyo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
    {"role": "user", "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "Osaka?"}]},
]


def test_content_is_not_exported_by_default(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text="secret answer", tool_calls=[ScriptedToolCall("f", {"x": 1})]))
    client.chat.completions.create(model="m", messages=TOOL_CONVERSATION)
    attributes = only_span(openai_spans).attributes or {}
    assert semconv.GEN_AI_INPUT_MESSAGES not in attributes
    assert semconv.GEN_AI_OUTPUT_MESSAGES not in attributes
    assert not any("secret answer" in str(value) or "Tokyo" in str(value) for value in attributes.values())


def test_content_is_exported_in_genai_message_format_when_captured(
    instrument_openai: Callable[..., InMemorySpanExporter],
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
) -> None:
    exporter = instrument_openai(capture_content=True)
    openai_server.add_reply(
        ScriptedReply(
            text="Checking.",
            reasoning="Need the tool.",
            tool_calls=[ScriptedToolCall("weather", {"city": "Osaka"}, call_id="call_b")],
        )
    )
    client.chat.completions.create(model="m", messages=TOOL_CONVERSATION)
    attributes = only_span(exporter).attributes or {}
    assert json.loads(str(attributes[semconv.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "system", "parts": [{"type": "text", "content": "You are terse."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Tokyo?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call_a", "name": "weather", "arguments": {"city": "Tokyo"}}
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_a", "response": "sunny"}]},
        {
            "role": "user",
            "parts": [{"type": "text", "content": "And "}, {"type": "text", "content": "Osaka?"}],
        },
    ]
    assert json.loads(str(attributes[semconv.GEN_AI_OUTPUT_MESSAGES])) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "Need the tool."},
                {"type": "text", "content": "Checking."},
                {"type": "tool_call", "id": "call_b", "name": "weather", "arguments": {"city": "Osaka"}},
            ],
            "finish_reason": "tool_call",
        }
    ]


def test_content_capture_follows_the_environment_when_not_given(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    client: openai.OpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from tallyspan_instrumentors.openai import OpenAIInstrumentor

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    OpenAIInstrumentor().instrument(tracer_provider=tracer_provider)
    try:
        client.chat.completions.create(model="m", messages=USER)
    finally:
        OpenAIInstrumentor().uninstrument()
    assert semconv.GEN_AI_OUTPUT_MESSAGES in (only_span(span_exporter).attributes or {})


def test_api_key_never_reaches_a_span(
    instrument_openai: Callable[..., InMemorySpanExporter], client: openai.OpenAI, api_key: str
) -> None:
    exporter = instrument_openai(capture_content=True)
    client.chat.completions.create(model="m", messages=USER)
    client.responses.create(model="m", input="hi")
    client.embeddings.create(model="e", input="hi")
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    for span in spans:
        for value in (span.attributes or {}).values():
            assert api_key not in str(value)
            assert "Bearer" not in str(value)


def test_content_buffer_receives_output_tool_calls_prompt_and_reasoning(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
    consumed_buffer: ContentBuffer,
) -> None:
    openai_server.add_reply(
        ScriptedReply(
            text="今日は晴れです。",
            reasoning="考え中",
            tool_calls=[ScriptedToolCall("log_action", '{"call_id": "c1"}', call_id="call_z")],
        )
    )
    client.chat.completions.create(model="m", messages=TOOL_CONVERSATION)
    span = only_span(openai_spans)
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text="今日は晴れです。",
        tool_calls=(ToolCallContent(name="log_action", arguments='{"call_id": "c1"}', call_id="call_z"),),
        prompt="And Osaka?",
        reasoning_text="考え中",
    )


def test_content_buffer_gets_nothing_without_a_consumer(
    openai_spans: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    client.chat.completions.create(model="m", messages=USER)
    span = only_span(openai_spans)
    assert span.context is not None
    assert content_buffer().pop(span.context.span_id) is None


def test_huge_output_reaches_the_buffer_whole(
    instrument_openai: Callable[..., InMemorySpanExporter],
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
    consumed_buffer: ContentBuffer,
) -> None:
    exporter = instrument_openai(capture_content=True)
    huge = "長い" * 500_000  # one million characters
    openai_server.add_reply(ScriptedReply(text=huge))
    result = client.chat.completions.create(model="m", messages=USER)
    assert result.choices[0].message.content == huge
    span = only_span(exporter)
    assert span.context is not None
    content = consumed_buffer.pop(span.context.span_id)
    assert isinstance(content, ModelContent)
    assert len(content.output_text) == 1_000_000
    output = json.loads(str((span.attributes or {})[semconv.GEN_AI_OUTPUT_MESSAGES]))
    assert len(output[0]["parts"][0]["content"]) == 1_000_000


def test_messages_given_as_a_generator_reach_the_server_untouched(
    instrument_openai: Callable[..., InMemorySpanExporter],
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
) -> None:
    exporter = instrument_openai(capture_content=True)
    messages: Any = ({"role": "user", "content": text} for text in ("first", "second"))
    client.chat.completions.create(model="m", messages=messages)
    assert openai_server.requests[0].body["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ]
    attributes = only_span(exporter).attributes or {}
    assert semconv.GEN_AI_INPUT_MESSAGES not in attributes  # an iterator is the SDK's to consume, not ours


async def test_async_with_raw_response_returns_the_raw_object(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text="raw async", completion_tokens=3))
    raw = await async_client.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert type(raw).__name__ == "LegacyAPIResponse"
    assert raw.parse().choices[0].message.content == "raw async"
    assert (only_span(openai_spans).attributes or {})[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
