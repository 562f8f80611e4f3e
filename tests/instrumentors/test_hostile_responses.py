"""Hostile providers and careless apps: what the OpenAI, Anthropic and Ollama instrumentors do to the host.

Every test drives the real client library against the local protocol servers of ``tallyspan.testing``.
The rule under test: the app sees exactly what the bare library gives it (the same result, or the same
exception object), each model call ends exactly one span, and whatever goes wrong on our side is
swallowed, counted in ``tallyspan.stats()`` and logged at most once.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import sys
import traceback
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import ollama
import openai
import pytest
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode
from tests.stats import losses

import tallyspan
from tallyspan import semconv
from tallyspan._content import content_buffer
from tallyspan.testing import (
    AnthropicReply,
    AnthropicServer,
    OllamaReply,
    OllamaServer,
    OpenAICompatibleServer,
    ScriptedReply,
)
from tallyspan_instrumentors.anthropic import AnthropicInstrumentor
from tallyspan_instrumentors.ollama import OllamaInstrumentor
from tallyspan_instrumentors.openai import OpenAIInstrumentor

MODEL = "m"
USER: Any = [{"role": "user", "content": "hi"}]
PROVIDERS = ("openai", "anthropic", "ollama")


class AppError(Exception):
    """The app's own failure, raised inside a ``with`` around a stream."""


def fail_inside(manager: Any, *, read_all: bool = False) -> None:
    """Enter ``manager``, read one item (or all of them), then fail with the app's own AppError."""
    with manager as stream:
        if read_all:
            list(stream)
        else:
            next(iter(stream))
        raise AppError


async def fail_inside_async(manager: Any) -> None:
    """The async twin of :func:`fail_inside` (one item)."""
    async with manager as stream:
        await stream.__anext__()
        raise AppError


@dataclass
class Clients:
    """Started servers of the three providers and real sync and async clients on them."""

    openai_server: OpenAICompatibleServer
    anthropic_server: AnthropicServer
    ollama_server: OllamaServer
    openai: openai.OpenAI
    anthropic: anthropic.Anthropic
    ollama: ollama.Client

    def queue(
        self, provider: str, reply: ScriptedReply | None = None, *, raw_body: str | None = None
    ) -> None:
        """Queue one reply (or a raw body) on ``provider``'s server."""
        server: Any = getattr(self, f"{provider}_server")
        if reply is None:
            kind = {"openai": ScriptedReply, "anthropic": AnthropicReply, "ollama": OllamaReply}[provider]
            reply = kind(raw_body=raw_body)
        server.add_reply(reply)

    def call(self, provider: str) -> Any:
        """One non-streamed chat call."""
        if provider == "openai":
            return self.openai.chat.completions.create(model=MODEL, messages=USER)
        if provider == "anthropic":
            return self.anthropic.messages.create(model=MODEL, max_tokens=64, messages=USER)
        return self.ollama.chat(MODEL, USER)

    def stream(self, provider: str) -> Any:
        """One streamed chat call: the stream object the library returns (proxied when instrumented)."""
        if provider == "openai":
            return self.openai.chat.completions.create(model=MODEL, messages=USER, stream=True)
        if provider == "anthropic":
            return self.anthropic.messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True)
        return self.ollama.chat(MODEL, USER, stream=True)


@pytest.fixture
def clients() -> Iterator[Clients]:
    with (
        OpenAICompatibleServer() as openai_server,
        AnthropicServer() as anthropic_server,
        OllamaServer() as ollama_server,
        openai.OpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0) as openai_client,
        anthropic.Anthropic(
            base_url=anthropic_server.base_url, api_key="k", max_retries=0
        ) as anthropic_client,
        ollama.Client(host=ollama_server.base_url) as ollama_client,
    ):
        yield Clients(
            openai_server, anthropic_server, ollama_server, openai_client, anthropic_client, ollama_client
        )


@dataclass
class AsyncClients:
    """Real async clients on the same servers."""

    openai: openai.AsyncOpenAI
    anthropic: anthropic.AsyncAnthropic
    ollama: ollama.AsyncClient

    async def stream(self, provider: str) -> Any:
        """One streamed chat call."""
        if provider == "openai":
            return await self.openai.chat.completions.create(model=MODEL, messages=USER, stream=True)
        if provider == "anthropic":
            return await self.anthropic.messages.create(
                model=MODEL, max_tokens=64, messages=USER, stream=True
            )
        return await self.ollama.chat(MODEL, USER, stream=True)


@pytest.fixture
async def async_clients(clients: Clients) -> AsyncIterator[AsyncClients]:
    aclients = AsyncClients(
        openai.AsyncOpenAI(base_url=clients.openai_server.base_url, api_key="k", max_retries=0),
        anthropic.AsyncAnthropic(base_url=clients.anthropic_server.base_url, api_key="k", max_retries=0),
        ollama.AsyncClient(host=clients.ollama_server.base_url),
    )
    yield aclients
    await aclients.openai.close()
    await aclients.anthropic.close()
    await aclients.ollama._client.aclose()


_INSTRUMENTORS = (OpenAIInstrumentor, AnthropicInstrumentor, OllamaInstrumentor)


@pytest.fixture
def instrument(
    instrument_libraries: Callable[..., InMemorySpanExporter],
) -> Callable[..., InMemorySpanExporter]:
    """Call it to instrument the three libraries on the private provider."""
    return functools.partial(instrument_libraries, *_INSTRUMENTORS)


@pytest.fixture
def spans(instrument: Callable[..., InMemorySpanExporter]) -> InMemorySpanExporter:
    return instrument()


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    gc.collect()  # streams dropped by the test end their spans when collected
    finished = exporter.get_finished_spans()
    assert len(finished) == 1, [span.name for span in finished]
    return finished[0]


def attributes_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# --- our own failures never reach the app ----------------------------------------------------------------


class _RaisingProcessor(SpanProcessor):
    """Someone's span processor with a bug in on_end."""

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("processor bug")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_span_processor_raising_in_on_end_never_reaches_the_app(
    spans: InMemorySpanExporter, tracer_provider: TracerProvider, clients: Clients, provider: str
) -> None:
    tracer_provider.add_span_processor(_RaisingProcessor())
    assert clients.call(provider) is not None
    assert len(list(clients.stream(provider))) > 1
    clients.queue(
        provider,
        {"openai": ScriptedReply, "anthropic": AnthropicReply, "ollama": OllamaReply}[provider](status=500),
    )
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the library's own error class, checked below
        clients.call(provider)
    assert "processor bug" not in str(caught.value)
    assert getattr(caught.value, "status_code", None) == 500
    assert len(spans.get_finished_spans()) == 3
    assert losses() == {"errors.span.end": 3}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_content_of_spans_the_sampler_dropped_is_not_buffered(clients: Clients, provider: str) -> None:
    dropping = TracerProvider(sampler=ALWAYS_OFF)
    buffer = content_buffer()
    buffer.add_consumer()  # a checks processor is installed, on another provider
    instrumentors = [kind() for kind in _INSTRUMENTORS]
    try:
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=dropping)
        for _ in range(5):
            clients.call(provider)
            list(clients.stream(provider))
        # No processor ever sees these spans, so nothing would ever pop their content.
        assert len(buffer) == 0
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        buffer.remove_consumer()
        dropping.shutdown()


# --- streams: every way an app leaves one ends exactly one span ------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_with_block_left_by_an_exception_fails_the_span_with_it(
    spans: InMemorySpanExporter, clients: Clients, provider: str
) -> None:
    with pytest.raises(AppError):
        fail_inside(clients.stream(provider))
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert attributes_of(span)[semconv.ERROR_TYPE] == "AppError"
    assert attributes_of(span)[semconv.GEN_AI_REQUEST_MODEL] == MODEL


def test_a_stream_helper_left_by_an_exception_fails_the_span_with_it(
    spans: InMemorySpanExporter, clients: Clients
) -> None:
    with pytest.raises(AppError):
        fail_inside(clients.openai.chat.completions.stream(model=MODEL, messages=USER))
    with pytest.raises(AppError):
        fail_inside(clients.openai.responses.stream(model=MODEL, input="hi"))
    with pytest.raises(AppError):
        fail_inside(clients.anthropic.messages.stream(model=MODEL, max_tokens=64, messages=USER))
    gc.collect()
    finished = spans.get_finished_spans()
    assert [attributes_of(span).get(semconv.ERROR_TYPE) for span in finished] == ["AppError"] * 3
    assert losses() == {}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_exception_after_the_stream_ended_leaves_the_span_alone(
    spans: InMemorySpanExporter, clients: Clients, provider: str
) -> None:
    with pytest.raises(AppError):  # the call had succeeded: the app's later failure is not the model call's
        fail_inside(clients.stream(provider), read_all=True)
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.ERROR_TYPE not in attributes_of(span)


async def test_async_with_blocks_left_by_an_exception_fail_the_span(
    spans: InMemorySpanExporter, async_clients: AsyncClients
) -> None:
    for provider in ("openai", "anthropic"):
        with pytest.raises(AppError):
            await fail_inside_async(await async_clients.stream(provider))
    with pytest.raises(AppError):
        await fail_inside_async(async_clients.openai.chat.completions.stream(model=MODEL, messages=USER))
    manager = async_clients.anthropic.messages.stream(model=MODEL, max_tokens=64, messages=USER)
    with pytest.raises(AppError):
        await fail_inside_async(manager)
    gc.collect()
    finished = spans.get_finished_spans()
    assert [attributes_of(span).get(semconv.ERROR_TYPE) for span in finished] == ["AppError"] * 4


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_iterated_twice_gives_what_the_library_gives_and_one_span(
    instrument: Callable[..., InMemorySpanExporter], clients: Clients, provider: str
) -> None:
    bare = clients.stream(provider)
    expected = (len(list(bare)), len(list(bare)))
    exporter = instrument()
    stream = clients.stream(provider)
    assert (len(list(stream)), len(list(stream))) == expected
    assert expected[0] > 1
    assert expected[1] == 0
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS in attributes_of(span)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_abandoned_and_closed_streams_end_one_span_each(
    spans: InMemorySpanExporter, clients: Clients, provider: str
) -> None:
    abandoned = clients.stream(provider)
    next(iter(abandoned))
    del abandoned
    closed = clients.stream(provider)
    next(iter(closed))
    closed.close()
    closed.close()
    gc.collect()
    finished = spans.get_finished_spans()
    assert len(finished) == 2
    assert all(span.end_time is not None and span.status.status_code is StatusCode.UNSET for span in finished)
    assert losses() == {}


def test_an_ollama_stream_is_no_context_manager_with_or_without_us(
    instrument: Callable[..., InMemorySpanExporter], clients: Clients
) -> None:
    def enter() -> str:
        try:
            stream: Any = clients.ollama.chat(MODEL, USER, stream=True)
            with stream:
                pass
        except Exception as exc:
            return type(exc).__name__
        return "entered"

    bare = enter()
    exporter = instrument()
    assert enter() == bare == ("TypeError" if sys.version_info >= (3, 11) else "AttributeError")
    gc.collect()  # the generator never ran: its span ends when the proxy is collected
    assert len(exporter.get_finished_spans()) == 1


async def test_an_async_ollama_stream_has_aclose_and_no_close_as_without_us(
    spans: InMemorySpanExporter, async_clients: AsyncClients
) -> None:
    stream = await async_clients.stream("ollama")
    await stream.__anext__()
    assert not hasattr(stream, "close")
    await stream.aclose()
    span = only_span(spans)
    assert span.end_time is not None


# --- huge outputs ---------------------------------------------------------------------------------------

HUGE_CHARS = 5 * 1024 * 1024
"""A 5 MB answer."""
PIECE_CHARS = 4096
"""Streamed in 1,280 small events."""


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    return (f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n"


def _huge_stream_body(provider: str, chars: int = HUGE_CHARS) -> str:
    """A 5 MB answer (or ``chars``) in the provider's stream format, in 4 KB pieces, ending with an output
    count of 9."""
    pieces = ["x" * PIECE_CHARS for _ in range(chars // PIECE_CHARS)]
    if provider == "openai":
        chunk: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "model": MODEL}
        events = [_sse({**chunk, "choices": [{"index": 0, "delta": {"content": piece}}]}) for piece in pieces]
        final = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        usage = {**chunk, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 9}}
        return "".join(events) + _sse(final) + _sse(usage) + "data: [DONE]\n\n"
    if provider == "anthropic":
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": []}
        head = _sse(
            {"type": "message_start", "message": {**message, "usage": {"input_tokens": 1}}}, "message_start"
        )
        head += _sse(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            "content_block_start",
        )
        deltas = [
            _sse(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
                "content_block_delta",
            )
            for piece in pieces
        ]
        tail = _sse(
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
            "message_delta",
        ) + _sse({"type": "message_stop"}, "message_stop")
        return head + "".join(deltas) + tail
    part: dict[str, Any] = {"model": MODEL, "done": False}
    lines = [
        json.dumps({**part, "message": {"role": "assistant", "content": piece}}) + "\n" for piece in pieces
    ]
    final_part = {
        "model": MODEL,
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "eval_count": 9,
    }
    return "".join(lines) + json.dumps({**final_part, "done_reason": "stop"}) + "\n"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_huge_streamed_answer_works_and_is_not_kept_by_us_once_the_span_ended(
    spans: InMemorySpanExporter, clients: Clients, provider: str
) -> None:
    # A short stream first: what the SDK builds once, on its first stream (anthropic's event models: 0.9 MB
    # of pydantic schemas), is not the answer held, and a test that came first in its process saw it.
    clients.queue(provider, raw_body=_huge_stream_body(provider, 2 * PIECE_CHARS))
    for _chunk in clients.stream(provider):
        pass
    spans.clear()
    clients.queue(provider, raw_body=_huge_stream_body(provider))
    stream = clients.stream(provider)
    tracemalloc.start()
    try:
        received = 0
        for _chunk in stream:
            received += 1
        gc.collect()
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert received >= HUGE_CHARS // PIECE_CHARS
    # The app still holds its stream object; the answer's text must not be held through it by us.
    assert held < HUGE_CHARS // 10, f"{held} bytes still held"
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    assert attributes_of(span)[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 9
    del stream


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_huge_answer_in_one_body_works_and_ends_one_span(
    spans: InMemorySpanExporter, clients: Clients, provider: str
) -> None:
    text = "y" * HUGE_CHARS
    if provider == "ollama":  # the scripted server joins its pieces one by one: minutes for 5 MB
        message = {"role": "assistant", "content": text}
        clients.queue(provider, raw_body=json.dumps({"model": MODEL, "message": message, "done": True}))
    else:
        kind = {"openai": ScriptedReply, "anthropic": AnthropicReply}[provider]
        clients.queue(provider, kind(text=text))
    result = clients.call(provider)
    if provider == "openai":
        assert result.choices[0].message.content == text
    elif provider == "anthropic":
        assert result.content[0].text == text
    else:
        assert result.message.content == text
    span = only_span(spans)
    assert span.status.status_code is StatusCode.UNSET
    assert losses() == {}


def test_abandoned_streams_leave_nothing_in_the_content_buffer(
    instrumented: tallyspan.Instrumentation, clients: Clients, span_exporter: InMemorySpanExporter
) -> None:
    for _ in range(10):
        for provider in PROVIDERS:
            stream = clients.stream(provider)
            next(iter(stream))
            del stream
    gc.collect()
    instrumented.force_flush()
    assert len(span_exporter.get_finished_spans()) == 30
    assert len(content_buffer()) == 0


# --- malformed responses: the app sees what the bare library gives it -------------------------------------

_SSE_TEXT = 'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
_ANTHROPIC_START = (
    'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg", "type": "message",'
    ' "role": "assistant", "model": "m", "content": [], "usage": {"input_tokens": 1}}}\n\n'
)
MALFORMED: list[tuple[str, str, bool]] = [
    # (provider, raw body, streamed)
    ("openai", '{"id": 5, "model": 7, "choices": {"a": 1}, "usage": "lots"}', False),
    (
        "openai",
        '{"id": "x", "choices": [{"index": 0, "message": {"content": [1, 2]}, "finish_reason": null}]}',
        False,
    ),
    ("openai", '{"id": "x", "choices": [{"message": {"tool_calls": [{"id": 1}, {"function": {}}]}}]}', False),
    (
        "openai",
        '{"choices": [{"message": {"content": "a"}, "finish_reason": {"x": 1}}], "usage": {"prompt_tokens": "9"}}',
        False,
    ),
    ("openai", "", False),
    ("openai", "{not json", False),
    ("openai", "data: garbage\n\n", True),
    ("openai", _SSE_TEXT + "data: {bad json\n\n", True),
    ("openai", _SSE_TEXT, True),  # no [DONE]
    ("openai", 'data: {"id": 1, "model": 2, "choices": {"x": 1}, "usage": "u"}\n\ndata: [DONE]\n\n', True),
    (
        "openai",
        'data: {"choices": [{"delta": {"tool_calls": [{"index": "a"}]}, "finish_reason": [1]}]}\n\n',
        True,
    ),
    (
        "anthropic",
        '{"type": "message", "id": 7, "model": 8, "content": {"a": 1}, "stop_reason": ["x"], "usage": "u"}',
        False,
    ),
    (
        "anthropic",
        '{"type": "message", "content": [1, null, {"type": "tool_use"}, {"type": "text", "text": 5}]}',
        False,
    ),
    ("anthropic", "", False),
    ("anthropic", "garbage\n\n", True),
    ("anthropic", "event: message_start\ndata: {bad json\n\n", True),
    ("anthropic", _ANTHROPIC_START, True),  # no message_stop
    (
        "anthropic",
        'event: message_delta\ndata: {"type": "message_delta", "delta": null, "usage": "u"}\n\n',
        True,
    ),
    ("anthropic", "event: error\ndata: {bad\n\n", True),
    ("ollama", '{"model": 3, "message": {"role": "assistant", "content": [1, 2]}, "done": true}', False),
    (
        "ollama",
        '{"model": "m", "message": {"role": "assistant", "tool_calls": [{"function": null}]}, "done": true}',
        False,
    ),
    ("ollama", "", False),
    ("ollama", "null", False),
    ("ollama", "garbage\n", True),
    (
        "ollama",
        '{"model": "m", "message": {"role": "assistant", "content": "a"}, "done": false}\n{bad\n',
        True,
    ),
    ("ollama", '{"model": "m", "message": {"role": "assistant", "content": "a"}, "done": false}\n', True),
    ("ollama", "null\n", True),
]


def _outcome(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        result = call()
    except Exception as exc:
        return ("raised", type(exc).__name__)
    return ("returned", repr(result))


@pytest.mark.parametrize(("provider", "body", "streamed"), MALFORMED)
def test_a_malformed_response_gives_the_app_the_bare_librarys_outcome(
    instrument: Callable[..., InMemorySpanExporter],
    clients: Clients,
    caplog: pytest.LogCaptureFixture,
    provider: str,
    body: str,
    streamed: bool,
) -> None:
    def call() -> Any:
        return [repr(item) for item in clients.stream(provider)] if streamed else clients.call(provider)

    clients.queue(provider, raw_body=body)
    clients.queue(provider, raw_body=body)
    bare = _outcome(call)
    exporter = instrument()
    with caplog.at_level(logging.DEBUG, logger="tallyspan_instrumentors"):
        traced = _outcome(call)
    assert traced == bare
    span = only_span(exporter)
    error = attributes_of(span).get(semconv.ERROR_TYPE)
    assert error == (bare[1] if bare[0] == "raised" else None)
    assert (span.status.status_code is StatusCode.ERROR) == (bare[0] == "raised")
    # Whatever we could not read was counted, and logged no more than once at warning level.
    swallowed = sum(value for key, value in tallyspan.stats().items() if key.startswith("errors."))
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == min(
        swallowed, len({key for key in tallyspan.stats() if key.startswith("errors.")})
    )


# --- exceptions and suppression ---------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_app_gets_the_librarys_own_exception_object_with_a_short_traceback(
    instrument: Callable[..., InMemorySpanExporter], clients: Clients, provider: str
) -> None:
    kind = {"openai": ScriptedReply, "anthropic": AnthropicReply, "ollama": OllamaReply}[provider]

    def failure() -> BaseException:
        clients.queue(provider, kind(status=529))
        with pytest.raises(Exception) as caught:  # noqa: PT011 - compared with the bare library's below
            clients.call(provider)
        return caught.value

    bare = failure()
    exporter = instrument()
    traced = failure()
    assert type(traced) is type(bare)  # APIStatusError subclasses (OverloadedError...) keep their type
    assert type(traced.__context__) is type(bare.__context__)  # nothing of ours chained to it
    frames = traceback.extract_tb(traced.__traceback__)
    assert "tallyspan_instrumentors" not in frames[-1].filename  # raised by the SDK, re-raised as is
    ours = [frame.name for frame in frames if "tallyspan_instrumentors" in frame.filename]
    assert ours == ["wrapper", "run_sync"]
    assert len(frames) == len(traceback.extract_tb(bare.__traceback__)) + len(ours)
    assert attributes_of(only_span(exporter))[semconv.ERROR_TYPE] == "529"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_error_reaches_the_app_as_the_same_object(
    spans: InMemorySpanExporter, clients: Clients, provider: str
) -> None:
    bodies = {
        "openai": _SSE_TEXT + 'data: {"error": {"message": "boom"}}\n\n',
        "anthropic": _ANTHROPIC_START + 'event: error\ndata: {"type": "error", "error": {"type": "x"}}\n\n',
        "ollama": '{"error": "boom"}\n',
    }
    clients.queue(provider, raw_body=bodies[provider])
    stream = clients.stream(provider)
    seen: list[BaseException] = []
    try:
        for _item in stream:
            pass
    except Exception as exc:
        seen.append(exc)
    assert len(seen) == 1
    assert seen[0].__context__ is None or not isinstance(seen[0].__context__, RuntimeError)
    span = only_span(spans)
    assert attributes_of(span)[semconv.ERROR_TYPE] == type(seen[0]).__qualname__


async def test_suppress_instrumentation_makes_no_span_for_any_call_kind(
    spans: InMemorySpanExporter, clients: Clients, async_clients: AsyncClients
) -> None:
    async def every_call() -> None:
        for provider in PROVIDERS:
            clients.call(provider)
            list(clients.stream(provider))
            async for _item in await async_clients.stream(provider):
                pass
        with clients.openai.chat.completions.stream(model=MODEL, messages=USER) as chat:
            list(chat)
        clients.openai.responses.create(model=MODEL, input="hi")
        clients.openai.embeddings.create(model="e", input="x")
        with clients.anthropic.messages.stream(model=MODEL, max_tokens=64, messages=USER) as events:
            list(events)
        clients.ollama.generate(MODEL, "hi")
        await async_clients.ollama.generate(MODEL, "hi")

    with suppress_instrumentation():
        await every_call()
    gc.collect()
    assert spans.get_finished_spans() == ()
    await every_call()
    gc.collect()
    assert len(spans.get_finished_spans()) == 15
    assert losses() == {}
