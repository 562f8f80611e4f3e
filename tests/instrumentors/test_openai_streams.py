"""The stream lifecycle matrix: every way a stream ends ends its span exactly once, sync and async."""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.conftest import mid_stream_error_class

from tallyspan import semconv
from tallyspan._content import ContentBuffer, ModelContent, ToolCallContent
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

USER: Any = [{"role": "user", "content": "Summarise the week."}]
LONG_TEXT = "The week went well and every report was filed on time. " * 4
TOOL = ScriptedToolCall("log_action", {"call_id": "call_1", "tool_name": "search"}, call_id="call_t")


@pytest.fixture(autouse=True)
def _every_span_ends_exactly_once(span_end_calls: Counter[int]) -> Iterator[None]:
    """Every test here also proves "once": each span that ended had ``end()`` called on it one time."""
    yield
    assert span_end_calls, "no span ended"
    assert set(span_end_calls.values()) == {1}, span_end_calls


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [span.name for span in spans]
    return spans[0]


def _create_stream(client: openai.OpenAI, **extra: Any) -> Any:
    return client.chat.completions.create(model="m", messages=USER, stream=True, **extra)


# --- sync ------------------------------------------------------------------------------------------------


def test_exhausted_stream_ends_span_with_usage_and_content(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
    consumed_buffer: ContentBuffer,
) -> None:
    openai_server.add_reply(
        ScriptedReply(
            text=LONG_TEXT,
            reasoning="thinking it over",
            tool_calls=[TOOL],
            prompt_tokens=9,
            completion_tokens=50,
            cached_tokens=2,
            reasoning_tokens=4,
        )
    )
    stream = _create_stream(client, stream_options={"include_usage": True})
    assert openai_spans.get_finished_spans() == ()
    chunks = list(stream)
    assert all(type(chunk) is ChatCompletionChunk for chunk in chunks)
    span = only_span(openai_spans)
    attributes = span.attributes or {}
    assert span.status.status_code is StatusCode.UNSET
    assert attributes[semconv.GEN_AI_REQUEST_STREAM] is True
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-1"
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 9
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 50
    assert attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 2
    assert attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 4
    assert isinstance(attributes[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK], float)
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text=LONG_TEXT,
        tool_calls=(ToolCallContent("log_action", '{"call_id": "call_1", "tool_name": "search"}', "call_t"),),
        prompt="Summarise the week.",
        reasoning_text="thinking it over",
    )


def test_time_to_first_chunk_is_measured_at_the_first_chunk(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    """The server waits DELAY before answering; the app then reads each chunk PAUSE apart. The first
    chunk arrives after DELAY, the last after DELAY + PAUSE per further chunk."""
    delay, pause = 0.3, 0.2
    openai_server.add_reply(ScriptedReply(text="One. Two. Three. Four.", delay_s=delay))
    chunks = 0
    for _chunk in _create_stream(client):
        chunks += 1
        time.sleep(pause)
    assert chunks >= 3
    span = only_span(openai_spans)
    ttfc = (span.attributes or {})[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    assert isinstance(ttfc, float)
    assert delay <= ttfc < delay + pause  # before the app's first pause: not a later chunk
    assert span.end_time is not None
    assert span.start_time is not None
    assert (span.end_time - span.start_time) / 1e9 >= delay + pause * (chunks - 1)


def test_break_inside_with_ends_span_at_exit(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    with _create_stream(client) as stream:
        for _chunk in stream:
            break
        assert openai_spans.get_finished_spans() == ()
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in (span.attributes or {})
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-1"


def test_close_ends_span_once_even_when_closed_twice(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    stream = _create_stream(client)
    next(iter(stream))
    assert stream.response.status_code == 200  # the SDK stream's own attributes stay reachable
    stream.close()
    stream.close()
    with stream:
        pass
    only_span(openai_spans)


def test_error_mid_stream_passes_through_and_marks_span_failed(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT, abort_after_chunks=3))
    stream = _create_stream(client)
    received = []

    def drain() -> None:
        for chunk in stream:
            received.append(chunk)

    with pytest.raises(mid_stream_error_class()):
        drain()
    assert len(received) == 3
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[semconv.ERROR_TYPE] == mid_stream_error_class().__name__
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_ID] == "chatcmpl-1"


def test_abandoned_stream_ends_span_when_collected(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    stream = _create_stream(client)
    next(iter(stream))
    assert openai_spans.get_finished_spans() == ()
    del stream
    gc.collect()
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.UNSET


def test_chat_stream_helper_keeps_working_and_ends_span_once(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT, tool_calls=[TOOL]))
    with client.chat.completions.stream(model="m", messages=USER) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_completion()
    assert {"content.delta", "content.done", "tool_calls.function.arguments.done"} <= kinds
    assert final.choices[0].message.content == LONG_TEXT
    span = only_span(openai_spans)
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)


def test_chat_stream_helper_break_ends_span_at_with_exit(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    with client.chat.completions.stream(model="m", messages=USER) as stream:
        for _event in stream:
            break
        assert openai_spans.get_finished_spans() == ()
    only_span(openai_spans)


def test_responses_stream_helper_until_done_and_response_attribute(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT, prompt_tokens=3, completion_tokens=30))
    with client.responses.stream(model="r", input="hi") as stream:
        stream.until_done()
        final = stream.get_final_response()
    assert final.output_text == LONG_TEXT
    span = only_span(openai_spans)
    assert span.name == "chat r"
    assert (span.attributes or {})[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


def test_raw_response_stream_is_returned_untouched(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    raw = client.chat.completions.with_raw_response.create(model="m", messages=USER, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    assert text == LONG_TEXT
    assert only_span(openai_spans).name == "chat m"


# --- async -----------------------------------------------------------------------------------------------


async def _create_async_stream(client: openai.AsyncOpenAI) -> openai.AsyncStream[ChatCompletionChunk]:
    return await client.chat.completions.create(model="m", messages=USER, stream=True)


async def test_async_exhausted_stream_ends_span(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT, tool_calls=[TOOL]))
    stream = await _create_async_stream(async_client)
    chunks = [chunk async for chunk in stream]
    assert len(chunks) > 5
    span = only_span(openai_spans)
    assert (span.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)


async def test_async_break_inside_async_with_ends_span_at_exit(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    async with await _create_async_stream(async_client) as stream:
        async for _chunk in stream:
            break
        assert openai_spans.get_finished_spans() == ()
    only_span(openai_spans)


async def test_async_close_ends_span_once(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    stream = await _create_async_stream(async_client)
    await stream.__anext__()
    await stream.close()
    await stream.close()
    only_span(openai_spans)


async def test_async_error_mid_stream_marks_span_failed(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT, abort_after_chunks=2))
    stream = await _create_async_stream(async_client)

    async def drain() -> int:
        return len([chunk async for chunk in stream])

    with pytest.raises(mid_stream_error_class()):
        await drain()
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[semconv.ERROR_TYPE] == mid_stream_error_class().__name__


async def test_async_abandoned_stream_ends_span_when_collected(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    stream = await _create_async_stream(async_client)
    await stream.__anext__()
    await stream.response.aclose()  # release the connection; the stream object itself is dropped unread
    del stream
    gc.collect()
    only_span(openai_spans)


async def test_async_stream_helpers_for_chat_and_responses(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT))
    openai_server.add_reply(ScriptedReply(text=LONG_TEXT, tool_calls=[TOOL]))
    async with async_client.chat.completions.stream(model="m", messages=USER) as chat_stream:
        completion = await chat_stream.get_final_completion()
    async with async_client.responses.stream(model="r", input="hi") as response_stream:
        async for _event in response_stream:
            break
    assert completion.choices[0].message.content == LONG_TEXT
    chat_span, response_span = openai_spans.get_finished_spans()
    assert chat_span.name == "chat m"
    assert response_span.name == "chat r"
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in (response_span.attributes or {})
