"""Fixtures for instrumentor tests: our instrumentors alone, the shipped OpenAI-compatible server and
real clients.

``instrument_libraries(SomeInstrumentor, capture_content=...)`` instruments on the private provider with
no chain behind it; ``openai_spans`` is OpenAI so instrumented (content off), and
``instrument_openai(capture_content=True)`` the capturing variant. Spans are read from ``span_exporter``
through a SimpleSpanProcessor, so they are there as soon as the span ends.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import openai
import pytest
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tallyspan._content import ContentBuffer, content_buffer
from tallyspan.testing import OpenAICompatibleServer
from tallyspan_instrumentors.openai import OpenAIInstrumentor

InstrumentLibraries = Callable[..., InMemorySpanExporter]

#: The key the tests' clients send; it must never show up in a span.
API_KEY = "sk-test-tallyspan-SECRET-0123456789"


@pytest.fixture
def span_end_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times ``end()`` was called on each SDK span, by span id.

    The SDK ignores a second ``end()`` (a warning, no second ``on_end``), so exported spans alone
    prove "ended at least once"; this counts the calls to prove "exactly once".
    """
    calls: Counter[int] = Counter()
    original = sdk_trace.Span.end

    def counted_end(span: sdk_trace.Span, end_time: int | None = None) -> None:
        calls[span.get_span_context().span_id] += 1
        original(span, end_time)

    monkeypatch.setattr(sdk_trace.Span, "end", counted_end)
    return calls


@pytest.fixture
def api_key() -> str:
    """The key the clients send (checked never to reach a span)."""
    return API_KEY


@pytest.fixture
def openai_server() -> Iterator[OpenAICompatibleServer]:
    """A started server replying "ok" until a test queues other replies."""
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture
def client(openai_server: OpenAICompatibleServer) -> Iterator[openai.OpenAI]:
    """A real sync client on the local server, without retries (tests count requests)."""
    with openai.OpenAI(base_url=openai_server.base_url, api_key=API_KEY, max_retries=0) as sync_client:
        yield sync_client


@pytest.fixture
async def async_client(openai_server: OpenAICompatibleServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """A real async client on the local server, without retries."""
    async with openai.AsyncOpenAI(base_url=openai_server.base_url, api_key=API_KEY, max_retries=0) as aclient:
        yield aclient


@pytest.fixture
def instrument_libraries(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> Iterator[InstrumentLibraries]:
    """Call it with instrumentor classes and their ``instrument()`` keywords (``tracer_provider`` defaults
    to the private one) to run them alone, before any chain; returns ``span_exporter``, which gets their
    spans as they end. Uninstrumented after the test, last first."""
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    used: list[BaseInstrumentor] = []

    def instrument(*kinds: type[BaseInstrumentor], **options: Any) -> InMemorySpanExporter:
        options.setdefault("tracer_provider", tracer_provider)
        for kind in kinds:
            instrumentor = kind()
            instrumentor.instrument(**options)
            if instrumentor not in used:  # instrumentors are singletons: instrumenting again is a no-op
                used.append(instrumentor)
        return span_exporter

    yield instrument
    for instrumentor in reversed(used):
        instrumentor.uninstrument()


@pytest.fixture
def instrument_openai(instrument_libraries: InstrumentLibraries) -> InstrumentLibraries:
    """Call it to instrument OpenAI on the private provider (content off unless ``capture_content=True``)."""
    return functools.partial(instrument_libraries, OpenAIInstrumentor, capture_content=False)


@pytest.fixture
def openai_spans(instrument_openai: InstrumentLibraries) -> InMemorySpanExporter:
    """OpenAI instrumented with content capture off; the exporter receiving its spans."""
    return instrument_openai()


@pytest.fixture
def consumed_buffer() -> Iterator[ContentBuffer]:
    """The ContentBuffer with a consumer registered, as when the checks processor runs."""
    buffer = content_buffer()
    buffer.add_consumer()
    yield buffer
    buffer.remove_consumer()
