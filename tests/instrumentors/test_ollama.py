"""The Ollama instrumentor against the real ``ollama`` client and a local Ollama API server."""

from __future__ import annotations

import functools
import gc
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import ollama
import pytest
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tallyspan
from tallyspan import semconv
from tallyspan._content import ContentBuffer, ModelContent, ToolCallContent
from tallyspan.testing import OllamaReply, OllamaServer, ScriptedToolCall
from tallyspan_instrumentors.ollama import OllamaInstrumentor

MODEL = "llama3.2"
USER = [{"role": "user", "content": "東京の天気は?"}]


@pytest.fixture
def server() -> Iterator[OllamaServer]:
    with OllamaServer() as started:
        yield started


@pytest.fixture
def client(server: OllamaServer) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.base_url) as sync_client:
        yield sync_client


@pytest.fixture
async def async_client(server: OllamaServer) -> AsyncIterator[ollama.AsyncClient]:
    aclient = ollama.AsyncClient(host=server.base_url)
    yield aclient
    await aclient.close()  # type: ignore[no-untyped-call]  # its connections would otherwise be reported unclosed by a later test


@pytest.fixture
def instrument_ollama(
    instrument_libraries: Callable[..., InMemorySpanExporter],
) -> Callable[..., InMemorySpanExporter]:
    """Call it to instrument Ollama on the private provider (content off unless ``capture_content=True``)."""
    return functools.partial(instrument_libraries, OllamaInstrumentor, capture_content=False)


@pytest.fixture
def spans(instrument_ollama: Callable[..., InMemorySpanExporter]) -> InMemorySpanExporter:
    return instrument_ollama()


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    finished = exporter.get_finished_spans()
    assert len(finished) == 1, [span.name for span in finished]
    return finished[0]


# --- chat and generate ---------------------------------------------------------------------------------


def test_chat_span_has_exact_gen_ai_attributes(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client
) -> None:
    server.add_reply(OllamaReply(text="晴れです。", prompt_tokens=26, completion_tokens=12))
    response = client.chat(
        MODEL, USER, options={"temperature": 0.2, "top_p": 0.9, "num_predict": 64, "seed": 7}
    )
    assert type(response) is ollama.ChatResponse
    assert response.message.content == "晴れです。"
    span = only_span(spans)
    assert span.name == f"chat {MODEL}"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: semconv.PROVIDER_OLLAMA,
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_REQUEST_TEMPERATURE: 0.2,
        semconv.GEN_AI_REQUEST_TOP_P: 0.9,
        semconv.GEN_AI_REQUEST_MAX_TOKENS: 64,
        semconv.GEN_AI_REQUEST_SEED: 7,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: server.port,
        semconv.GEN_AI_RESPONSE_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 26,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 12,
    }


def test_generate_is_a_text_completion_span(
    spans: InMemorySpanExporter,
    consumed_buffer: ContentBuffer,
    server: OllamaServer,
    client: ollama.Client,
) -> None:
    server.add_reply(
        OllamaReply(
            text="生成文", reasoning="考える", prompt_tokens=5, completion_tokens=3, finish_reason="length"
        )
    )
    response = client.generate(MODEL, "一文で書いて", system="日本語で", format="json")
    assert response.response == "生成文"
    span = only_span(spans)
    assert span.name == f"text_completion {MODEL}"
    attributes = dict(span.attributes or {})
    assert attributes[semconv.GEN_AI_OPERATION_NAME] == "text_completion"
    assert attributes[semconv.GEN_AI_OUTPUT_TYPE] == "json"
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("length",)
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 5
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text="生成文", prompt="一文で書いて", reasoning_text="考える"
    )


def test_module_level_functions_use_the_default_client(
    spans: InMemorySpanExporter, server: OllamaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The module functions are bound to ollama's default client: point that client at the local server.
    with ollama.Client(host=server.base_url) as local:
        monkeypatch.setattr(ollama._client, "_client", local._client)
        ollama.chat(model=MODEL, messages=USER)
        ollama.generate(model=MODEL, prompt="hi")
    assert [span.name for span in spans.get_finished_spans()] == [f"chat {MODEL}", f"text_completion {MODEL}"]


def test_tool_calls_and_thinking_reach_the_buffer_without_capture(
    spans: InMemorySpanExporter,
    consumed_buffer: ContentBuffer,
    server: OllamaServer,
    client: ollama.Client,
) -> None:
    server.add_reply(
        OllamaReply(
            reasoning="天気を調べる",
            tool_calls=[ScriptedToolCall("get_weather", {"city": "東京"}), ScriptedToolCall("get_time", {})],
        )
    )
    response = client.chat(MODEL, USER, tools=[{"type": "function", "function": {"name": "get_weather"}}])
    assert response.message.tool_calls is not None
    span = only_span(spans)
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text="",
        tool_calls=(
            ToolCallContent("get_weather", '{"city": "東京"}', None),
            ToolCallContent("get_time", "{}", None),
        ),
        prompt="東京の天気は?",
        reasoning_text="天気を調べる",
    )
    attributes = span.attributes or {}
    assert semconv.GEN_AI_OUTPUT_MESSAGES not in attributes
    assert semconv.GEN_AI_INPUT_MESSAGES not in attributes


def test_captured_content_follows_the_genai_message_format(
    instrument_ollama: Callable[..., InMemorySpanExporter], server: OllamaServer, client: ollama.Client
) -> None:
    exporter = instrument_ollama(capture_content=True)
    server.add_reply(
        OllamaReply(
            text="晴れ", reasoning="確認", tool_calls=[ScriptedToolCall("log_action", {"call_id": "c1"})]
        )
    )
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "日本語で"},
        {"role": "user", "content": "東京の天気は?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "東京"}}}],
        },
        {"role": "tool", "content": "晴れ", "tool_name": "get_weather"},
    ]
    client.chat(MODEL, history)
    attributes = only_span(exporter).attributes or {}
    assert json.loads(str(attributes[semconv.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "system", "parts": [{"type": "text", "content": "日本語で"}]},
        {"role": "user", "parts": [{"type": "text", "content": "東京の天気は?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": None, "name": "get_weather", "arguments": {"city": "東京"}}
            ],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": None, "response": "晴れ", "name": "get_weather"}],
        },
    ]
    assert json.loads(str(attributes[semconv.GEN_AI_OUTPUT_MESSAGES])) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "確認"},
                {"type": "text", "content": "晴れ"},
                {"type": "tool_call", "id": None, "name": "log_action", "arguments": {"call_id": "c1"}},
            ],
            "finish_reason": "tool_call",
        }
    ]


def test_span_carries_the_stage(spans: InMemorySpanExporter, client: ollama.Client) -> None:
    with tallyspan.stage("triage"):
        client.chat(MODEL, USER)
    assert (only_span(spans).attributes or {})[semconv.STAGE] == "triage"


async def test_async_chat_and_generate(
    spans: InMemorySpanExporter, server: OllamaServer, async_client: ollama.AsyncClient
) -> None:
    server.add_reply(OllamaReply(text="非同期", prompt_tokens=4, completion_tokens=2))
    response = await async_client.chat(MODEL, USER)
    assert response.message.content == "非同期"
    await async_client.generate(MODEL, "hi")
    chat, generate = spans.get_finished_spans()
    assert chat.name == f"chat {MODEL}"
    assert (chat.attributes or {})[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 4
    assert generate.name == f"text_completion {MODEL}"


# --- errors --------------------------------------------------------------------------------------------


def test_error_status_passes_through_and_marks_the_span(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client
) -> None:
    server.add_reply(OllamaReply(status=404, error_message="model 'nope' not found"))
    with pytest.raises(ollama.ResponseError) as raised:
        client.chat("nope", USER)
    assert raised.value.status_code == 404
    assert raised.value.error == "model 'nope' not found 404"
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[semconv.ERROR_TYPE] == "404"


def test_unreachable_server_is_typed_by_class(spans: InMemorySpanExporter, server: OllamaServer) -> None:
    port = server.port
    server.stop()
    with ollama.Client(host=f"http://127.0.0.1:{port}") as dead, pytest.raises(ConnectionError):
        dead.chat(MODEL, USER)
    assert (only_span(spans).attributes or {})[semconv.ERROR_TYPE] == "ConnectionError"


def test_malformed_response_reaches_the_app_and_the_span_still_ends(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client
) -> None:
    server.add_reply(
        OllamaReply(
            raw_body='{"model": 3, "message": {"role": "assistant", "content": "x"}, "eval_count": 2, "done": true}'
        )
    )
    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own validation error, whatever it is
        client.chat(MODEL, USER)
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    # Valid for the SDK, thin for us: no model, no counts, no content.
    server.add_reply(OllamaReply(raw_body='{"message": {"role": "assistant"}, "done_reason": ""}'))
    response = client.chat(MODEL, USER)
    assert response.message.content is None
    second = spans.get_finished_spans()[1]
    assert second.status.status_code is StatusCode.UNSET
    for name in (
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS,
        semconv.GEN_AI_RESPONSE_MODEL,
        semconv.GEN_AI_RESPONSE_FINISH_REASONS,
    ):
        assert name not in (second.attributes or {})


# --- streams -------------------------------------------------------------------------------------------

STREAM_REPLY = OllamaReply(
    text="ストリームの答えです。とても長い答え。",
    reasoning="考え中",
    tool_calls=[ScriptedToolCall("get_weather", {"city": "東京"})],
    prompt_tokens=9,
    completion_tokens=30,
)


def test_exhausted_stream_ends_the_span_once_with_the_whole_response(
    spans: InMemorySpanExporter,
    consumed_buffer: ContentBuffer,
    server: OllamaServer,
    client: ollama.Client,
    span_end_calls: Counter[int],
) -> None:
    server.add_reply(STREAM_REPLY)
    stream = client.chat(MODEL, USER, stream=True)
    assert spans.get_finished_spans() == ()
    parts = list(stream)
    assert parts[-1].done is True
    assert "".join(part.message.content or "" for part in parts) == "ストリームの答えです。とても長い答え。"
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
        semconv.GEN_AI_PROVIDER_NAME: semconv.PROVIDER_OLLAMA,
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_REQUEST_STREAM: True,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: server.port,
        semconv.GEN_AI_RESPONSE_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 9,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
    }
    assert span.context is not None
    assert consumed_buffer.pop(span.context.span_id) == ModelContent(
        output_text="ストリームの答えです。とても長い答え。",
        tool_calls=(ToolCallContent("get_weather", '{"city": "東京"}', None),),
        prompt="東京の天気は?",
        reasoning_text="考え中",
    )
    stream.close()  # type: ignore[attr-defined]  # closed after its end: still one end()
    assert list(span_end_calls.values()) == [1]  # the exporter never holds a span twice: count end()


def test_break_then_close_ends_the_span_once_with_what_was_read(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client, span_end_calls: Counter[int]
) -> None:
    server.add_reply(STREAM_REPLY)
    stream = client.generate(MODEL, "hi", stream=True)
    for _ in stream:
        break
    assert spans.get_finished_spans() == ()
    stream.close()  # type: ignore[attr-defined]
    stream.close()  # type: ignore[attr-defined]
    span = only_span(spans)
    assert list(span_end_calls.values()) == [1]
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in (span.attributes or {})


def test_error_line_mid_stream_fails_the_span_and_reaches_the_app(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client
) -> None:
    server.add_reply(
        OllamaReply(text="途中で失敗する答え" * 3, stream_error_after=2, error_message="out of memory")
    )
    with pytest.raises(ollama.ResponseError) as raised:
        for _ in client.chat(MODEL, USER, stream=True):
            pass
    assert raised.value.error == "out of memory"
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[semconv.ERROR_TYPE] == "ResponseError"  # status_code -1: not an HTTP error


def test_connection_dropped_mid_stream_fails_the_span(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client
) -> None:
    server.add_reply(OllamaReply(text="切断" * 40, abort_after_chunks=2))
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the transport's own error type, whatever it is
        for _ in client.chat(MODEL, USER, stream=True):
            pass
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[semconv.ERROR_TYPE] == type(raised.value).__qualname__


def test_abandoned_stream_ends_its_span_when_collected(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client
) -> None:
    server.add_reply(STREAM_REPLY)
    stream = client.chat(MODEL, USER, stream=True)
    next(iter(stream))
    del stream
    gc.collect()
    assert only_span(spans).status.status_code is StatusCode.UNSET


async def test_async_stream_exhausted_and_closed_early(
    spans: InMemorySpanExporter,
    server: OllamaServer,
    async_client: ollama.AsyncClient,
    span_end_calls: Counter[int],
) -> None:
    server.add_reply(STREAM_REPLY)
    server.add_reply(STREAM_REPLY)
    parts = [part async for part in await async_client.chat(MODEL, USER, stream=True)]
    assert parts[-1].done is True
    assert len(spans.get_finished_spans()) == 1
    early = await async_client.generate(MODEL, "hi", stream=True)
    async for _ in early:
        break
    await early.aclose()  # type: ignore[attr-defined]
    await early.aclose()  # type: ignore[attr-defined]
    first, second = spans.get_finished_spans()
    assert list(span_end_calls.values()) == [1, 1]
    assert (first.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert second.name == f"text_completion {MODEL}"
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in (second.attributes or {})


# --- suppression and uninstrument -------------------------------------------------------------------------


def test_suppressed_calls_make_no_span(
    spans: InMemorySpanExporter, server: OllamaServer, client: ollama.Client
) -> None:
    with suppress_instrumentation():
        client.chat(MODEL, USER)
        for _ in client.generate(MODEL, "hi", stream=True):
            pass
    assert len(server.requests) == 2
    assert spans.get_finished_spans() == ()


def test_uninstrument_restores_the_client_methods_and_module_functions(
    instrument_ollama: Callable[..., InMemorySpanExporter], client: ollama.Client
) -> None:
    names = ("chat", "generate")
    originals = {name: getattr(ollama.Client, name) for name in names}
    async_originals = {name: getattr(ollama.AsyncClient, name) for name in names}
    module_originals = {name: getattr(ollama, name) for name in names}
    exporter = instrument_ollama()
    assert ollama.Client.chat is not originals["chat"]
    assert ollama.chat is not module_originals["chat"]
    OllamaInstrumentor().uninstrument()
    assert {name: getattr(ollama.Client, name) for name in names} == originals
    assert {name: getattr(ollama.AsyncClient, name) for name in names} == async_originals
    assert {name: getattr(ollama, name) for name in names} == module_originals
    client.chat(MODEL, USER)
    assert exporter.get_finished_spans() == ()


def test_instrument_finds_the_instrumentor_through_its_entry_point(
    instrumented: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter, client: ollama.Client
) -> None:
    client.chat(MODEL, USER)
    instrumented.force_flush()
    assert [span.name for span in span_exporter.get_finished_spans()] == [f"chat {MODEL}"]


def test_instrument_does_not_import_ollama_and_patches_when_the_app_does() -> None:
    code = (
        "import sys\n"
        "from wrapt import BoundFunctionWrapper, FunctionWrapper\n"
        "P = (FunctionWrapper, BoundFunctionWrapper)\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "from tallyspan.testing import OllamaServer\n"
        "from tallyspan_instrumentors.ollama import OllamaInstrumentor\n"
        "exporter = InMemorySpanExporter()\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "instrumentor = OllamaInstrumentor()\n"
        "instrumentor.instrument(tracer_provider=provider)\n"
        "assert 'ollama' not in sys.modules\n"
        "import ollama\n"
        "assert isinstance(ollama.Client.chat, P) and isinstance(ollama.AsyncClient.generate, P)\n"
        "assert isinstance(ollama.chat, P) and isinstance(ollama.generate, P)\n"
        "with OllamaServer() as server, ollama.Client(host=server.base_url) as local:\n"
        "    ollama._client._client = local._client\n"
        "    ollama.chat(model='m', messages=[{'role': 'user', 'content': 'hi'}])\n"
        "assert [span.name for span in exporter.get_finished_spans()] == ['chat m']  # once, not twice\n"
        "instrumentor.uninstrument()\n"
        "assert not isinstance(ollama.Client.chat, P) and not isinstance(ollama.chat, P)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
