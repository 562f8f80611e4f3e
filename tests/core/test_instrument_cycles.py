"""``uninstrument()`` removes what ``instrument()`` added: a thousand cycles leave no processor on the
provider, no thread, and no lasting cost on each span (before: 1,001 processors stayed, each span 10x
slower)."""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan

CYCLES = 1000
SPANS = 2000


def _on_provider(provider: TracerProvider) -> tuple[SpanProcessor, ...]:
    return tuple(provider._active_span_processor._span_processors)


def _seconds_per_span(provider: TracerProvider) -> float:
    """The best of five rounds of ``SPANS`` spans, through an instrumentation made for the measure: CPU
    time of this thread (what the app pays), which other processes on the machine do not inflate."""
    instrumentation = tallyspan.instrument(tracer_provider=provider, store=None, instrumentors=[])
    tracer = provider.get_tracer("cycles")
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        for _ in range(SPANS):
            with tracer.start_as_current_span("step"):
                pass
        best = min(best, (time.thread_time() - start) / SPANS)
        assert instrumentation.force_flush(10_000)
    tallyspan.uninstrument()
    return best


@pytest.mark.slow  # a thousand instrument/uninstrument cycles: a run at scale, for CI (-m slow)
def test_a_thousand_cycles_leave_nothing_on_the_provider_and_spans_cost_what_they_did() -> None:
    provider = TracerProvider()
    app_processor = SimpleSpanProcessor(InMemorySpanExporter())
    provider.add_span_processor(app_processor)
    threads_before = threading.active_count()
    before = _seconds_per_span(provider)
    assert _on_provider(provider) == (app_processor,)

    for _ in range(CYCLES):
        tallyspan.instrument(tracer_provider=provider, store=None, instrumentors=[])
        assert len(_on_provider(provider)) == 1  # our head; the app's processor is behind it
        tallyspan.uninstrument()

    assert _on_provider(provider) == (app_processor,)  # given back, first in line as before
    after = _seconds_per_span(provider)
    assert after < 2 * before, (
        f"{after * 1e6:.1f} µs per span after {CYCLES} cycles, {before * 1e6:.1f} before"
    )
    deadline = time.monotonic() + 5
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads_before
    provider.shutdown()
