"""Every normal end of a stream is a normal end, for each provider, sync and async.

The expectations here are written from the scenario, never computed by the code under test: a stream
read to its end is a call that succeeded (status UNSET, no ``error.type``, its span ended once); a stream
read to its end whose server sent no finish reason was not abandoned (the consumer did not cut it short);
two tool calls in one streamed reply are two tool calls, in order, each with its own id and arguments.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.instrumentors.conftest import API_KEY, InstrumentLibraries

from tallyspan import semconv
from tallyspan._content import ContentBuffer, ModelContent, ToolCallContent
from tallyspan.testing import (
    AnthropicReply,
    AnthropicServer,
    OllamaReply,
    OllamaServer,
    OpenAICompatibleServer,
    ScriptedReply,
    ScriptedToolCall,
)
from tallyspan_instrumentors.anthropic import AnthropicInstrumentor
from tallyspan_instrumentors.ollama import OllamaInstrumentor
from tallyspan_instrumentors.openai import OpenAIInstrumentor

PROMPT = "東京と大阪の天気は?"
USER: Any = [{"role": "user", "content": PROMPT}]
ANSWER = "両方の天気を調べます。少々お待ちください。"
TOKYO = ScriptedToolCall("get_weather", {"city": "東京"}, call_id="call_tokyo")
OSAKA = ScriptedToolCall("get_weather", {"city": "大阪"}, call_id="call_osaka")
#: The two calls as the content buffer must hold them: written out by hand, in the order they came.
TWO_CALLS = (
    ToolCallContent("get_weather", '{"city": "東京"}', "call_tokyo"),
    ToolCallContent("get_weather", '{"city": "大阪"}', "call_osaka"),
)


@pytest.fixture(autouse=True)
def _every_span_ends_exactly_once(span_end_calls: Counter[int]) -> Iterator[None]:
    """Each span that ended had ``end()`` called on it one time (the exporter alone cannot tell)."""
    yield
    assert span_end_calls, "no span ended"
    assert set(span_end_calls.values()) == {1}, span_end_calls


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    finished = exporter.get_finished_spans()
    assert len(finished) == 1, [span.name for span in finished]
    return finished[0]


def assert_succeeded(span: ReadableSpan) -> dict[str, Any]:
    """The span of a call that ended normally: no error status, no error type, not abandoned."""
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.UNSET, span.status
    assert span.status.description is None
    assert semconv.ERROR_TYPE not in attributes
    assert semconv.STREAM_ABANDONED not in attributes
    return attributes


# --- OpenAI --------------------------------------------------------------------------------------------


@pytest.fixture
def openai_spans(instrument_libraries: InstrumentLibraries) -> InMemorySpanExporter:
    return instrument_libraries(OpenAIInstrumentor, capture_content=False)


@pytest.fixture
def openai_server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture
def openai_client(openai_server: OpenAICompatibleServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=openai_server.base_url, api_key=API_KEY, max_retries=0) as client:
        yield client


@pytest.fixture
async def openai_async_client(openai_server: OpenAICompatibleServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=openai_server.base_url, api_key=API_KEY, max_retries=0) as client:
        yield client


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
    payload = {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


#: A stream a server ends properly ([DONE]) without ever sending a finish reason (some OpenAI-compatible
#: servers do): three chunks of text, then the end of the stream.
NO_FINISH_REASON = ScriptedReply(
    raw_body=_chunk({"role": "assistant", "content": "晴れ"})
    + _chunk({"content": "のち"})
    + _chunk({"content": "曇り"})
    + "data: [DONE]\n\n"
)


async def test_openai_async_stream_read_to_its_end_succeeded(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    openai_async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text=ANSWER))
    stream = await openai_async_client.chat.completions.create(model="m", messages=USER, stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == ANSWER
    attributes = assert_succeeded(only_span(openai_spans))
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


def test_openai_stream_without_a_finish_reason_read_to_its_end_is_not_abandoned(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, openai_client: openai.OpenAI
) -> None:
    openai_server.add_reply(NO_FINISH_REASON)
    chunks = list(openai_client.chat.completions.create(model="m", messages=USER, stream=True))
    assert [chunk.choices[0].delta.content for chunk in chunks] == ["晴れ", "のち", "曇り"]
    attributes = assert_succeeded(only_span(openai_spans))
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in attributes


async def test_openai_async_stream_without_a_finish_reason_read_to_its_end_is_not_abandoned(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    openai_async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(NO_FINISH_REASON)
    stream = await openai_async_client.chat.completions.create(model="m", messages=USER, stream=True)
    assert [chunk.choices[0].delta.content async for chunk in stream] == ["晴れ", "のち", "曇り"]
    attributes = assert_succeeded(only_span(openai_spans))
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in attributes


def test_openai_stream_closed_before_its_end_is_abandoned(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, openai_client: openai.OpenAI
) -> None:
    """The other side of the rule above: the consumer cut it short, with no finish reason yet."""
    openai_server.add_reply(NO_FINISH_REASON)
    stream = openai_client.chat.completions.create(model="m", messages=USER, stream=True)
    next(iter(stream))
    stream.close()
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.UNSET
    assert (span.attributes or {})[semconv.STREAM_ABANDONED] is True


def test_openai_stream_left_by_an_error_before_its_end_failed_and_was_not_abandoned(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, openai_client: openai.OpenAI
) -> None:
    """An exception that leaves the ``with`` block ends the call as failed by it: the stream was cut short
    by an error, not abandoned by a consumer that had read enough."""
    openai_server.add_reply(NO_FINISH_REASON)

    def read_one_chunk_and_give_up() -> None:
        with openai_client.chat.completions.create(model="m", messages=USER, stream=True) as stream:
            next(iter(stream))
            raise RuntimeError("the app gave up")

    with pytest.raises(RuntimeError, match="the app gave up"):
        read_one_chunk_and_give_up()
    span = only_span(openai_spans)
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert attributes[semconv.ERROR_TYPE] == "RuntimeError"
    assert semconv.STREAM_ABANDONED not in attributes


def test_openai_parallel_tool_calls_in_one_streamed_reply_stay_two_calls(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    openai_client: openai.OpenAI,
    consumed_buffer: ContentBuffer,
) -> None:
    openai_server.add_reply(ScriptedReply(text=ANSWER, tool_calls=[TOKYO, OSAKA]))
    list(openai_client.chat.completions.create(model="m", messages=USER, stream=True))
    span = only_span(openai_spans)
    assert assert_succeeded(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text=ANSWER, tool_calls=TWO_CALLS, prompt=PROMPT
    )


async def test_openai_async_parallel_tool_calls_in_one_streamed_reply_stay_two_calls(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    openai_async_client: openai.AsyncOpenAI,
    consumed_buffer: ContentBuffer,
) -> None:
    openai_server.add_reply(ScriptedReply(tool_calls=[TOKYO, OSAKA]))
    stream = await openai_async_client.chat.completions.create(model="m", messages=USER, stream=True)
    [chunk async for chunk in stream]
    span = only_span(openai_spans)
    assert assert_succeeded(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text="", tool_calls=TWO_CALLS, prompt=PROMPT
    )


# --- Anthropic -----------------------------------------------------------------------------------------


@pytest.fixture
def anthropic_spans(instrument_libraries: InstrumentLibraries) -> InMemorySpanExporter:
    return instrument_libraries(AnthropicInstrumentor, capture_content=False)


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


@pytest.fixture
def anthropic_client(anthropic_server: AnthropicServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=anthropic_server.base_url, api_key=API_KEY, max_retries=0) as client:
        yield client


@pytest.fixture
async def anthropic_async_client(
    anthropic_server: AnthropicServer,
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=anthropic_server.base_url, api_key=API_KEY, max_retries=0
    ) as client:
        yield client


async def test_anthropic_async_stream_read_to_its_end_succeeded(
    anthropic_spans: InMemorySpanExporter,
    anthropic_server: AnthropicServer,
    anthropic_async_client: anthropic.AsyncAnthropic,
) -> None:
    anthropic_server.add_reply(AnthropicReply(text=ANSWER))
    stream: Any = await anthropic_async_client.messages.create(
        model="claude-test-4",
        max_tokens=64,
        messages=USER,
        stream=True,
    )
    kinds = [event.type async for event in stream]
    assert kinds[-1] == "message_stop"
    attributes = assert_succeeded(only_span(anthropic_spans))
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)


async def test_anthropic_async_stream_manager_read_to_its_end_succeeded(
    anthropic_spans: InMemorySpanExporter,
    anthropic_server: AnthropicServer,
    anthropic_async_client: anthropic.AsyncAnthropic,
) -> None:
    anthropic_server.add_reply(AnthropicReply(text=ANSWER))
    async with anthropic_async_client.messages.stream(
        model="claude-test-4", max_tokens=64, messages=USER
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
    assert text == ANSWER
    attributes = assert_succeeded(only_span(anthropic_spans))
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)


def test_anthropic_parallel_tool_calls_in_one_streamed_reply_stay_two_calls(
    anthropic_spans: InMemorySpanExporter,
    anthropic_server: AnthropicServer,
    anthropic_client: anthropic.Anthropic,
    consumed_buffer: ContentBuffer,
) -> None:
    anthropic_server.add_reply(AnthropicReply(text=ANSWER, tool_calls=[TOKYO, OSAKA]))
    stream: Any = anthropic_client.messages.create(
        model="claude-test-4",
        max_tokens=64,
        messages=USER,
        stream=True,
    )
    list(stream)
    span = only_span(anthropic_spans)
    assert assert_succeeded(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text=ANSWER, tool_calls=TWO_CALLS, prompt=PROMPT
    )


# --- Ollama --------------------------------------------------------------------------------------------


@pytest.fixture
def ollama_spans(instrument_libraries: InstrumentLibraries) -> InMemorySpanExporter:
    return instrument_libraries(OllamaInstrumentor, capture_content=False)


@pytest.fixture
def ollama_server() -> Iterator[OllamaServer]:
    with OllamaServer() as server:
        yield server


@pytest.fixture
async def ollama_async_client(ollama_server: OllamaServer) -> AsyncIterator[ollama.AsyncClient]:
    client = ollama.AsyncClient(host=ollama_server.base_url)
    yield client
    await client.close()  # type: ignore[no-untyped-call]


async def test_ollama_async_chat_stream_read_to_its_end_succeeded(
    ollama_spans: InMemorySpanExporter, ollama_server: OllamaServer, ollama_async_client: ollama.AsyncClient
) -> None:
    ollama_server.add_reply(OllamaReply(text=ANSWER))
    parts = [part async for part in await ollama_async_client.chat("llama3.2", USER, stream=True)]
    assert "".join(part.message.content or "" for part in parts) == ANSWER
    attributes = assert_succeeded(only_span(ollama_spans))
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


async def test_ollama_async_generate_stream_read_to_its_end_succeeded(
    ollama_spans: InMemorySpanExporter, ollama_server: OllamaServer, ollama_async_client: ollama.AsyncClient
) -> None:
    ollama_server.add_reply(OllamaReply(text=ANSWER))
    parts = [part async for part in await ollama_async_client.generate("llama3.2", PROMPT, stream=True)]
    assert "".join(part.response or "" for part in parts) == ANSWER
    span = only_span(ollama_spans)
    assert span.name == "text_completion llama3.2"
    assert assert_succeeded(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


def test_ollama_parallel_tool_calls_in_one_streamed_reply_stay_two_calls(
    ollama_spans: InMemorySpanExporter, ollama_server: OllamaServer, consumed_buffer: ContentBuffer
) -> None:
    ollama_server.add_reply(OllamaReply(text=ANSWER, tool_calls=[TOKYO, OSAKA]))
    with ollama.Client(host=ollama_server.base_url) as client:
        list(client.chat("llama3.2", USER, stream=True))
    span = only_span(ollama_spans)
    assert_succeeded(span)
    assert span.context is not None
    # Ollama's wire has no call ids: the calls are told apart by their order and arguments.
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text=ANSWER,
        tool_calls=(
            ToolCallContent("get_weather", '{"city": "東京"}', None),
            ToolCallContent("get_weather", '{"city": "大阪"}', None),
        ),
        prompt=PROMPT,
    )
