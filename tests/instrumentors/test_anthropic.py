"""The Anthropic instrumentor against the real ``anthropic`` client and a local Messages API server."""

from __future__ import annotations

import functools
import gc
import importlib
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anthropic
import pytest
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tallyspan
from tallyspan import semconv
from tallyspan._content import ContentBuffer, ModelContent, ToolCallContent, content_buffer
from tallyspan.testing import AnthropicReply, AnthropicServer, ScriptedToolCall
from tallyspan_instrumentors.anthropic import AnthropicInstrumentor

API_KEY = "sk-ant-test-tallyspan-SECRET-0123456789"

#: Optional features of newer SDKs, which the instrumentor patches where present: ``messages.parse``
#: (structured outputs, from 0.7x) and the SDK's own OpenTelemetry span (``start_api_call_span``, from 2.0).
HAS_PARSE = hasattr(anthropic.resources.messages.Messages, "parse")
HAS_NATIVE_SPAN = hasattr(importlib.import_module("anthropic._base_client"), "start_api_call_span")
needs_parse = pytest.mark.skipif(
    not HAS_PARSE, reason="this anthropic has no messages.parse (an SDK feature of 0.7x on)"
)
needs_native_span = pytest.mark.skipif(
    not HAS_NATIVE_SPAN,
    reason="this anthropic makes no OpenTelemetry span of its own (an SDK feature of 2.0 on)",
)

MODEL = "claude-test-4"
USER = [{"role": "user", "content": "東京の天気は?"}]


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as started:
        yield started


@pytest.fixture
def client(server: AnthropicServer) -> Iterator[anthropic.Anthropic]:
    # No retries: tests count requests and spans.
    with anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0) as sync_client:
        yield sync_client


@pytest.fixture
async def async_client(server: AnthropicServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0) as aclient:
        yield aclient


@pytest.fixture
def instrument_anthropic(
    instrument_libraries: Callable[..., InMemorySpanExporter],
) -> Callable[..., InMemorySpanExporter]:
    """Call it to instrument Anthropic on the private provider (content off unless ``capture_content=True``)."""
    return functools.partial(instrument_libraries, AnthropicInstrumentor, capture_content=False)


@pytest.fixture
def spans(instrument_anthropic: Callable[..., InMemorySpanExporter]) -> InMemorySpanExporter:
    return instrument_anthropic()


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    finished = exporter.get_finished_spans()
    assert len(finished) == 1, [span.name for span in finished]
    return finished[0]


def create(client: anthropic.Anthropic, **kwargs: Any) -> Any:
    """``messages.create`` with the test's model and prompt: a Message, or a Stream with ``stream=True``."""
    return client.messages.create(model=MODEL, max_tokens=256, messages=USER, **kwargs)  # type: ignore[arg-type]


# --- non-streaming -------------------------------------------------------------------------------------


def test_message_span_has_exact_gen_ai_attributes(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(
        AnthropicReply(
            text="晴れです。",
            prompt_tokens=10,
            completion_tokens=20,
            cached_tokens=5,
            cache_creation_tokens=7,
            reasoning_tokens=4,
        )
    )
    message = create(client)
    assert isinstance(message, anthropic.types.Message)
    span = only_span(spans)
    assert span.name == f"chat {MODEL}"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == semconv.INSTRUMENTATION_SCOPE
    assert dict(span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "anthropic",
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_REQUEST_MAX_TOKENS: 256,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: server.port,
        semconv.GEN_AI_RESPONSE_ID: message.id,
        semconv.GEN_AI_RESPONSE_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("end_turn",),
        # Cache-inclusive, per the GenAI conventions for Anthropic: 10 + 5 read + 7 written.
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 22,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
        semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 5,
        semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 7,
        semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 4,
    }


def test_request_parameters_become_request_attributes(
    spans: InMemorySpanExporter, client: anthropic.Anthropic
) -> None:
    # This SDK takes sampling parameters only through extra_body.
    create(client, extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 40}, stop_sequences=["END", "STOP"])
    attributes = only_span(spans).attributes or {}
    assert attributes[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attributes[semconv.GEN_AI_REQUEST_TOP_P] == 0.9
    assert attributes[semconv.GEN_AI_REQUEST_TOP_K] == 40
    assert attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] == ("END", "STOP")
    assert semconv.GEN_AI_REQUEST_STREAM not in attributes


def test_result_is_the_sdks_own_object(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(text="そのまま"))
    message = create(client)
    assert type(message) is anthropic.types.Message
    assert message.content[0].type == "text"
    assert message.content[0].text == "そのまま"


def test_content_stays_out_of_spans_by_default_and_the_key_never_appears(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(text="秘密の答え", reasoning="秘密の思考"))
    create(client, system="秘密の指示")
    attributes = only_span(spans).attributes or {}
    for name in (
        semconv.GEN_AI_INPUT_MESSAGES,
        semconv.GEN_AI_OUTPUT_MESSAGES,
        semconv.GEN_AI_SYSTEM_INSTRUCTIONS,
    ):
        assert name not in attributes
    rendered = json.dumps({key: str(value) for key, value in attributes.items()}, ensure_ascii=False)
    for secret in ("秘密", API_KEY, "東京"):
        assert secret not in rendered


def test_captured_content_follows_the_genai_message_format(
    instrument_anthropic: Callable[..., InMemorySpanExporter],
    server: AnthropicServer,
    client: anthropic.Anthropic,
) -> None:
    exporter = instrument_anthropic(capture_content=True)
    server.add_reply(
        AnthropicReply(
            text="確認します。",
            reasoning="天気を調べる",
            tool_calls=[ScriptedToolCall("get_weather", {"city": "東京"}, call_id="toolu_2")],
        )
    )
    history = [
        {"role": "user", "content": "東京の天気は?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "09:00"},
                {"type": "text", "text": "続けて"},
            ],
        },
    ]
    client.messages.create(
        model=MODEL,
        max_tokens=64,
        system=[{"type": "text", "text": "日本語で答える"}],
        messages=history,  # type: ignore[arg-type]
    )
    attributes = only_span(exporter).attributes or {}
    assert json.loads(str(attributes[semconv.GEN_AI_SYSTEM_INSTRUCTIONS])) == [
        {"type": "text", "content": "日本語で答える"}
    ]
    assert json.loads(str(attributes[semconv.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "user", "parts": [{"type": "text", "content": "東京の天気は?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "toolu_1", "name": "get_time", "arguments": {}}],
        },
        {
            "role": "user",
            "parts": [
                {"type": "tool_call_response", "id": "toolu_1", "response": "09:00"},
                {"type": "text", "content": "続けて"},
            ],
        },
    ]
    assert json.loads(str(attributes[semconv.GEN_AI_OUTPUT_MESSAGES])) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "天気を調べる"},
                {"type": "text", "content": "確認します。"},
                {"type": "tool_call", "id": "toolu_2", "name": "get_weather", "arguments": {"city": "東京"}},
            ],
            "finish_reason": "tool_call",
        }
    ]
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)


def test_content_buffer_gets_text_tool_calls_and_thinking_without_capture(
    spans: InMemorySpanExporter,
    consumed_buffer: ContentBuffer,
    server: AnthropicServer,
    client: anthropic.Anthropic,
) -> None:
    server.add_reply(
        AnthropicReply(
            text="調べます",
            reasoning="まず天気",
            tool_calls=[ScriptedToolCall("get_weather", {"city": "東京"}, call_id="toolu_9")],
        )
    )
    create(client)
    span = only_span(spans)
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text="調べます",
        tool_calls=(ToolCallContent("get_weather", '{"city": "東京"}', "toolu_9"),),
        prompt="東京の天気は?",
        reasoning_text="まず天気",
    )


def test_nothing_is_buffered_while_no_processor_consumes(
    spans: InMemorySpanExporter, client: anthropic.Anthropic
) -> None:
    create(client)
    assert len(content_buffer()) == 0


def test_span_carries_the_stage_and_is_a_child_of_the_active_span(
    spans: InMemorySpanExporter, tracer_provider: TracerProvider, client: anthropic.Anthropic
) -> None:
    tracer = tracer_provider.get_tracer("test")
    with (
        tracer.start_as_current_span("parent") as parent,
        tallyspan.stage("weekly_report", enqueued_at=1.7e9),
    ):
        create(client)
    chat = next(span for span in spans.get_finished_spans() if span.name.startswith("chat"))
    assert chat.attributes is not None
    assert chat.attributes[semconv.STAGE] == "weekly_report"
    assert chat.attributes[semconv.ENQUEUED_AT] == 1.7e9
    assert chat.parent is not None
    assert chat.parent.span_id == parent.get_span_context().span_id


@needs_parse
def test_parse_makes_one_span(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(text="parsed"))
    parsed = client.messages.parse(model=MODEL, max_tokens=32, messages=USER)  # type: ignore[arg-type]
    assert parsed.content[0].type == "text"
    span = only_span(spans)
    assert span.attributes is not None
    assert span.attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)


def test_with_raw_response_returns_the_raw_object_and_still_makes_a_span(
    spans: InMemorySpanExporter, client: anthropic.Anthropic
) -> None:
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=32, messages=USER)  # type: ignore[arg-type]
    assert type(raw).__name__ in ("APIResponse", "LegacyAPIResponse")  # the SDK's own (renamed in 1.x)
    message = raw.parse()
    assert message.content[0].type == "text"
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes is not None
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == message.id
    assert span.attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)


def test_with_streaming_response_leaves_the_body_to_the_app(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(text="本文はアプリのもの"))
    with client.messages.with_streaming_response.create(model=MODEL, max_tokens=32, messages=USER) as raw:  # type: ignore[arg-type]
        body = b"".join(raw.iter_bytes())
    assert json.loads(body)["content"][0]["text"] == "本文はアプリのもの"
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.GEN_AI_RESPONSE_ID not in (span.attributes or {})


async def test_async_create_makes_the_same_span(
    spans: InMemorySpanExporter, server: AnthropicServer, async_client: anthropic.AsyncAnthropic
) -> None:
    server.add_reply(AnthropicReply(text="非同期", prompt_tokens=3, completion_tokens=2))
    message = await async_client.messages.create(model=MODEL, max_tokens=16, messages=USER)  # type: ignore[arg-type]
    assert message.content[0].type == "text"
    attributes = only_span(spans).attributes or {}
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 3
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == message.id


def test_beta_messages_are_traced_the_same_way(
    spans: InMemorySpanExporter,
    consumed_buffer: ContentBuffer,
    server: AnthropicServer,
    client: anthropic.Anthropic,
) -> None:
    server.add_reply(STREAM_REPLY)
    server.add_reply(STREAM_REPLY)
    message = client.beta.messages.create(model=MODEL, max_tokens=64, messages=USER)  # type: ignore[arg-type]
    with client.beta.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    created, streamed = spans.get_finished_spans()
    assert (created.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == message.id
    assert (streamed.attributes or {})[semconv.GEN_AI_REQUEST_STREAM] is True
    for span in (created, streamed):
        assert span.context is not None
        content = consumed_buffer.pop(span.context.span_id)
        assert isinstance(content, ModelContent)
        assert content.tool_calls == (ToolCallContent("get_weather", '{"city": "東京"}', "toolu_s"),)


# --- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, anthropic.BadRequestError),
        (429, anthropic.RateLimitError),
        (529, anthropic._exceptions.OverloadedError),
    ],
)
def test_http_error_passes_through_and_marks_the_span(
    spans: InMemorySpanExporter,
    server: AnthropicServer,
    client: anthropic.Anthropic,
    status: int,
    error_class: type[Exception],
) -> None:
    server.add_reply(AnthropicReply(status=status))
    with pytest.raises(error_class) as raised:
        create(client)
    assert f"scripted error {status}" in str(raised.value)
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == str(status)
    assert span.attributes is not None
    assert span.attributes[semconv.ERROR_TYPE] == str(status)
    assert semconv.GEN_AI_RESPONSE_ID not in span.attributes


def test_connection_error_is_typed_by_class(spans: InMemorySpanExporter, server: AnthropicServer) -> None:
    port = server.port
    server.stop()
    dead = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=API_KEY, max_retries=0)
    with dead, pytest.raises(anthropic.APIConnectionError):
        create(dead)
    span = only_span(spans)
    assert span.attributes is not None
    assert span.attributes[semconv.ERROR_TYPE] == "APIConnectionError"


def test_malformed_response_reaches_the_app_and_the_span_still_ends(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(
        AnthropicReply(
            raw_body='{"type": "message", "id": 7, "content": "not blocks", "usage": {"input_tokens": "x"}}'
        )
    )
    message = create(client)
    assert message.type == "message"
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes is not None
    assert semconv.GEN_AI_RESPONSE_ID not in span.attributes  # 7 is not a string id
    assert semconv.GEN_AI_USAGE_INPUT_TOKENS not in span.attributes


# --- create(stream=True) -------------------------------------------------------------------------------


STREAM_REPLY = AnthropicReply(
    text="ストリームの答えです。",
    reasoning="考え中",
    tool_calls=[ScriptedToolCall("get_weather", {"city": "東京"}, call_id="toolu_s")],
    prompt_tokens=9,
    completion_tokens=30,
    cached_tokens=2,
)


def test_exhausted_stream_ends_the_span_once_with_the_whole_response(
    spans: InMemorySpanExporter,
    consumed_buffer: ContentBuffer,
    server: AnthropicServer,
    client: anthropic.Anthropic,
    span_end_calls: Counter[int],
) -> None:
    server.add_reply(STREAM_REPLY)
    stream = create(client, stream=True)
    assert spans.get_finished_spans() == ()
    kinds = [event.type for event in stream]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    span = only_span(spans)
    attributes = dict(span.attributes or {})
    ttfc = attributes.pop(semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
    assert isinstance(ttfc, float)
    assert span.end_time is not None
    assert span.start_time is not None
    assert 0 < ttfc <= (span.end_time - span.start_time) / 1e9  # within the call (exact: test_openai_streams)
    assert attributes == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "anthropic",
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_REQUEST_MAX_TOKENS: 256,
        semconv.GEN_AI_REQUEST_STREAM: True,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: server.port,
        semconv.GEN_AI_RESPONSE_ID: "msg_000000000000000000000001",
        semconv.GEN_AI_RESPONSE_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_use",),
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 11,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
        semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 2,
        semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 0,
    }
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text="ストリームの答えです。",
        tool_calls=(ToolCallContent("get_weather", '{"city": "東京"}', "toolu_s"),),
        prompt="東京の天気は?",
        reasoning_text="考え中",
    )
    stream.close()
    assert len(spans.get_finished_spans()) == 1
    assert list(span_end_calls.values()) == [1]  # the exporter never holds a span twice: count end()


def test_break_then_close_ends_the_span_once_with_what_was_read(
    spans: InMemorySpanExporter,
    server: AnthropicServer,
    client: anthropic.Anthropic,
    span_end_calls: Counter[int],
) -> None:
    server.add_reply(STREAM_REPLY)
    stream = create(client, stream=True)
    for event in stream:
        if event.type == "content_block_start":
            break
    assert spans.get_finished_spans() == ()
    stream.close()
    stream.close()
    span = only_span(spans)
    assert list(span_end_calls.values()) == [1]
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes is not None
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == "msg_000000000000000000000001"
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in span.attributes


def test_with_exit_ends_the_span(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(STREAM_REPLY)
    with create(client, stream=True) as stream:
        next(iter(stream))
    assert len(spans.get_finished_spans()) == 1


def test_error_event_mid_stream_fails_the_span_and_reaches_the_app(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(text="途中で切れる長い答えです。", stream_error_after=3))
    stream = create(client, stream=True)
    with pytest.raises(anthropic.APIStatusError) as raised:
        for _ in stream:
            pass
    assert "overloaded_error" in str(raised.value)
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    # The stream's HTTP status is 200: the error is typed by its class, not by a success code.
    assert span.attributes[semconv.ERROR_TYPE] == "APIStatusError"
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == "msg_000000000000000000000001"


def test_connection_dropped_mid_stream_fails_the_span(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(text="切断されるストリーム" * 5, abort_after_chunks=3))
    stream = create(client, stream=True)
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the transport's own error type, whatever it is
        for _ in stream:
            pass
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes[semconv.ERROR_TYPE] == type(raised.value).__qualname__


def test_abandoned_stream_ends_its_span_when_collected(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(STREAM_REPLY)
    stream = create(client, stream=True)
    next(iter(stream))
    del stream
    gc.collect()
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET


async def test_async_stream_exhausted_and_closed_early(
    spans: InMemorySpanExporter,
    server: AnthropicServer,
    async_client: anthropic.AsyncAnthropic,
    span_end_calls: Counter[int],
) -> None:
    server.add_reply(STREAM_REPLY)
    server.add_reply(STREAM_REPLY)
    stream: Any = await async_client.messages.create(model=MODEL, max_tokens=8, messages=USER, stream=True)  # type: ignore[arg-type]
    kinds = [event.type async for event in stream]
    assert kinds[-1] == "message_stop"
    assert len(spans.get_finished_spans()) == 1
    early: Any = await async_client.messages.create(model=MODEL, max_tokens=8, messages=USER, stream=True)  # type: ignore[arg-type]
    async for _ in early:
        break
    await early.close()
    finished = spans.get_finished_spans()
    assert len(finished) == 2
    assert finished[0].attributes is not None
    assert finished[0].attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)
    assert finished[1].attributes is not None
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in finished[1].attributes
    await early.close()  # closed twice: still one end() per span
    assert list(span_end_calls.values()) == [1, 1]


# --- messages.stream(...) --------------------------------------------------------------------------------


def test_stream_manager_opens_the_span_on_enter_and_helpers_keep_working(
    spans: InMemorySpanExporter,
    consumed_buffer: ContentBuffer,
    server: AnthropicServer,
    client: anthropic.Anthropic,
) -> None:
    server.add_reply(STREAM_REPLY)
    manager = client.messages.stream(model=MODEL, max_tokens=64, messages=USER)  # type: ignore[arg-type]
    assert server.requests == []
    with manager as stream:
        assert len(server.requests) == 1
        assert spans.get_finished_spans() == ()
        assert "".join(stream.text_stream) == "ストリームの答えです。"
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    attributes = span.attributes or {}
    assert attributes[semconv.GEN_AI_REQUEST_STREAM] is True
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 11
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert span.context is not None
    content = consumed_buffer.pop(span.context.span_id)
    assert isinstance(content, ModelContent)
    assert content.output_text == "ストリームの答えです。"
    assert content.tool_calls == (ToolCallContent("get_weather", '{"city": "東京"}', "toolu_s"),)


def test_stream_manager_until_done_and_get_final_text(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(text="完了まで待つ"))
    with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:  # type: ignore[arg-type]
        stream.until_done()
        assert len(spans.get_finished_spans()) == 1
        assert stream.get_final_text() == "完了まで待つ"
    assert len(spans.get_finished_spans()) == 1


def test_stream_manager_exit_before_the_end_ends_the_span(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(STREAM_REPLY)
    with client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:  # type: ignore[arg-type]
        for event in stream:
            if event.type == "content_block_start":
                break
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes is not None
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in span.attributes


def test_stream_manager_error_on_enter_fails_the_span(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    server.add_reply(AnthropicReply(status=500))
    manager = client.messages.stream(model=MODEL, max_tokens=64, messages=USER)  # type: ignore[arg-type]
    with pytest.raises(anthropic.InternalServerError), manager:
        pass
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes[semconv.ERROR_TYPE] == "500"


async def test_async_stream_manager(
    spans: InMemorySpanExporter, server: AnthropicServer, async_client: anthropic.AsyncAnthropic
) -> None:
    server.add_reply(STREAM_REPLY)
    async with async_client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:  # type: ignore[arg-type]
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(texts) == "ストリームの答えです。"
    assert final.stop_reason == "tool_use"
    span = only_span(spans)
    assert span.attributes is not None
    assert span.attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)


# --- the SDK's own tracing -----------------------------------------------------------------------------


@needs_native_span
def test_the_sdks_own_call_span_is_not_made_inside_ours(
    spans: InMemorySpanExporter, server: AnthropicServer, tracer_provider: TracerProvider
) -> None:
    native = anthropic.Anthropic(
        base_url=server.base_url,
        api_key=API_KEY,
        max_retries=0,
        open_telemetry={"tracer_provider": tracer_provider},
    )
    with native:
        create(native)
        with native.messages.stream(model=MODEL, max_tokens=8, messages=USER) as stream:  # type: ignore[arg-type]
            stream.until_done()
    assert [span.name for span in spans.get_finished_spans()] == [f"chat {MODEL}", f"chat {MODEL}"]


@needs_native_span
def test_the_sdks_own_span_is_left_alone_where_we_make_none(
    instrument_anthropic: Callable[..., InMemorySpanExporter],
    server: AnthropicServer,
    tracer_provider: TracerProvider,
) -> None:
    exporter = instrument_anthropic()
    native = anthropic.Anthropic(
        base_url=server.base_url,
        api_key=API_KEY,
        max_retries=0,
        open_telemetry={"tracer_provider": tracer_provider},
    )
    with native:
        with suppress_instrumentation():
            create(native)
        AnthropicInstrumentor().uninstrument()
        create(native)
    assert [span.name for span in exporter.get_finished_spans()] == [
        "anthropic.messages.create",
        "anthropic.messages.create",
    ]


# --- suppression and uninstrument -------------------------------------------------------------------------


def test_suppressed_calls_make_no_span(
    spans: InMemorySpanExporter, server: AnthropicServer, client: anthropic.Anthropic
) -> None:
    with suppress_instrumentation():
        create(client)
        for _ in create(client, stream=True):
            pass
        with client.messages.stream(model=MODEL, max_tokens=8, messages=USER) as stream:  # type: ignore[arg-type]
            stream.until_done()
    assert len(server.requests) == 3
    assert spans.get_finished_spans() == ()


def test_uninstrument_restores_the_sdk_methods(
    instrument_anthropic: Callable[..., InMemorySpanExporter], client: anthropic.Anthropic
) -> None:
    from anthropic.resources.messages.messages import AsyncMessages, Messages

    names = ("create", "parse", "stream") if HAS_PARSE else ("create", "stream")
    originals = {name: getattr(Messages, name) for name in names}
    async_originals = {name: getattr(AsyncMessages, name) for name in names}
    from anthropic import _base_client as base_client

    native_start = getattr(base_client, "start_api_call_span", None)
    instrumentor = AnthropicInstrumentor()
    exporter = instrument_anthropic()
    assert Messages.create is not originals["create"]
    assert native_start is None or base_client.start_api_call_span is not native_start  # type: ignore[attr-defined]
    instrumentor.uninstrument()
    assert getattr(base_client, "start_api_call_span", None) is native_start
    assert {name: getattr(Messages, name) for name in originals} == originals
    assert {name: getattr(AsyncMessages, name) for name in async_originals} == async_originals
    create(client)
    assert exporter.get_finished_spans() == ()


def test_instrument_finds_the_instrumentor_through_its_entry_point(
    instrumented: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter, client: anthropic.Anthropic
) -> None:
    create(client)
    instrumented.force_flush()
    names = [span.name for span in span_exporter.get_finished_spans()]
    assert names == [f"chat {MODEL}"]


def test_instrument_does_not_import_anthropic_and_patches_when_the_app_does() -> None:
    code = (
        "import sys\n"
        "from wrapt import BoundFunctionWrapper, FunctionWrapper\n"
        "P = (FunctionWrapper, BoundFunctionWrapper)\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from tallyspan_instrumentors.anthropic import AnthropicInstrumentor\n"
        "instrumentor = AnthropicInstrumentor()\n"
        "instrumentor.instrument(tracer_provider=TracerProvider())\n"
        "assert 'anthropic' not in sys.modules\n"
        "from anthropic.resources.messages.messages import AsyncMessages, Messages\n"
        "import anthropic._base_client as base\n"
        "assert isinstance(Messages.create, P) and isinstance(AsyncMessages.stream, P)\n"
        "native = getattr(base, 'start_api_call_span', None)  # the SDK's own span, from 2.0\n"
        "assert native is None or isinstance(native, P)\n"
        "instrumentor.uninstrument()\n"
        "assert not isinstance(Messages.create, P)\n"
        "assert not isinstance(getattr(base, 'start_api_call_span', None), P)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
