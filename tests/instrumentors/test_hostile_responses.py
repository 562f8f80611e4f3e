"""Hostile providers and careless apps: what the OpenAI, Anthropic and Ollama instrumentors do to the host.

Every test drives the real client library against the local protocol servers of ``tallyspan.testing``.
The rule under test: the app sees exactly what the bare library gives it (the same result, or the same
exception object), each model call ends exactly one span, and whatever goes wrong on our side is
swallowed, counted in ``tallyspan.stats()`` and logged at most once.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import ollama
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

import tallyspan
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
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> Iterator[Callable[..., InMemorySpanExporter]]:
    """Call it to instrument the three libraries on ``provider`` (default: the private one)."""
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    used: list[Any] = []

    def instrument(provider: TracerProvider | None = None) -> InMemorySpanExporter:
        for kind in _INSTRUMENTORS:
            instrumentor = kind()
            instrumentor.instrument(tracer_provider=provider or tracer_provider)
            used.append(instrumentor)
        return span_exporter

    yield instrument
    for instrumentor in used:
        instrumentor.uninstrument()


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
    assert tallyspan.stats() == {"errors.span.end": 3}


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
