"""Fixtures shared by every test: an isolated store, an in-memory exporter and an instrumented provider.

Chain: ``span_exporter`` > ``tracer_provider`` > ``instrumented`` (instrument, yield, uninstrument).
``span_exporter`` receives the spans our chain forwards, i.e. with violations and ledger balance on them;
call ``instrumented.force_flush()`` before reading it, since the chain runs on a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan

#: ../shared/data beside the clone: real public traces and model outputs (see its README.md).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

_OTEL_ENV = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets its own store, no OTLP export from the environment, zeroed counters."""
    monkeypatch.setenv("TALLYSPAN_DB", str(tmp_path / "tallyspan.db"))
    for name in _OTEL_ENV:
        monkeypatch.delenv(name, raising=False)
    tallyspan.reset_stats()
    yield
    tallyspan.uninstrument()


@pytest.fixture
def shared_data() -> Path:
    """The shared real-data folder; skips the test where it is absent (a user's own clone)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data folder beside the clone ({SHARED_DATA}), absent here")
    return SHARED_DATA


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """The path of this test's embedded store."""
    return tmp_path / "tallyspan.db"


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    """Collects finished spans in memory."""
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider() -> Iterator[TracerProvider]:
    """A private SDK provider (never the global one), shut down after the test."""
    provider = TracerProvider()
    yield provider
    provider.shutdown()


@pytest.fixture
def instrumented(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, db_path: Path
) -> Iterator[tallyspan.Instrumentation]:
    """``tallyspan.instrument()`` on the private provider; ``span_exporter`` gets the enriched spans."""
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider,
        store=db_path,
        span_processors=[SimpleSpanProcessor(span_exporter)],
    )
    yield instrumentation
    tallyspan.uninstrument()
