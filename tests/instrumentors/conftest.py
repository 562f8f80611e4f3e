"""Fixtures for instrumentor tests: the shipped OpenAI-compatible server and real clients.

``openai_spans`` instruments OpenAI directly on the private provider (content off); use
``instrument_openai(capture_content=True)`` for the capturing variant. Spans are read from
``span_exporter`` through a SimpleSpanProcessor, so they are there as soon as the span ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tallyspan.testing import OpenAICompatibleServer
from tallyspan_instrumentors.openai import OpenAIInstrumentor

#: The key the tests' clients send; it must never show up in a span.
API_KEY = "sk-test-tallyspan-SECRET-0123456789"


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
def instrument_openai(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> Iterator[Callable[..., InMemorySpanExporter]]:
    """Call it to instrument OpenAI on the private provider; uninstrumented after the test."""
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    instrumentor = OpenAIInstrumentor()

    def instrument(*, capture_content: bool = False) -> InMemorySpanExporter:
        instrumentor.instrument(tracer_provider=tracer_provider, capture_content=capture_content)
        return span_exporter

    yield instrument
    instrumentor.uninstrument()


@pytest.fixture
def openai_spans(instrument_openai: Callable[..., InMemorySpanExporter]) -> InMemorySpanExporter:
    """OpenAI instrumented with content capture off; the exporter receiving its spans."""
    return instrument_openai()
