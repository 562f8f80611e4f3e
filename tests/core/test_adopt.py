"""An app that already exports its spans gets the checked ones: ``instrument()`` adopts its processors.

Real parts: the OpenAI client against the local server, the SDK's own processors and in-memory
exporter, our whole chain.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import openai
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan
from tallyspan import semconv
from tallyspan._store._store_schema import connect
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

CONTRACTS: dict[str, Any] = {"contracts": {"answer": {"language": "ja", "min_chars": 5}}}


class _CountingProcessor(SpanProcessor):
    """The app's own processor: counts what it is given and how often it is shut down."""

    def __init__(self) -> None:
        self.started = 0
        self.ended: list[ReadableSpan] = []
        self.shutdowns = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)

    def shutdown(self) -> None:
        self.shutdowns += 1


def _ask(text: str) -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=text)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("answer"),
    ):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "質問"}])


def test_the_apps_own_exporter_receives_the_checked_span_once(tracer_provider: TracerProvider) -> None:
    app_exporter = InMemorySpanExporter()
    app_processor = BatchSpanProcessor(app_exporter)
    tracer_provider.add_span_processor(app_processor)  # the app's export, set up before tallyspan

    instrumentation = tallyspan.instrument(
        contracts=CONTRACTS, tracer_provider=tracer_provider, store=None, instrumentors=["tallyspan_openai"]
    )
    assert instrumentation.adopted_processors == (app_processor,)
    _ask("This answer is in English.")
    assert instrumentation.force_flush()

    (span,) = app_exporter.get_finished_spans()
    assert span.name == "chat gpt-4o"
    assert list((span.attributes or {})[semconv.VIOLATION_TYPES]) == ["not_japanese"]  # type: ignore[arg-type]
    assert (span.attributes or {})[semconv.CONTRACT] == "answer"


def test_uninstrument_gives_the_processors_back_unshut(tracer_provider: TracerProvider) -> None:
    app_processor = _CountingProcessor()
    tracer_provider.add_span_processor(app_processor)
    tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=[])
    tracer = tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("while instrumented"):
        pass
    tallyspan.uninstrument()

    assert [span.name for span in app_processor.ended] == ["while instrumented"]
    assert app_processor.shutdowns == 0  # still the app's: only its owner shuts it down
    with tracer.start_as_current_span("after"):
        pass
    # Straight from the provider again, at once, and only once.
    assert [span.name for span in app_processor.ended] == ["while instrumented", "after"]
    assert app_processor.started == 2
    tracer_provider.shutdown()
    assert app_processor.shutdowns == 1


def test_shutting_the_provider_down_shuts_the_adopted_processor_once(tracer_provider: TracerProvider) -> None:
    app_processor = _CountingProcessor()
    tracer_provider.add_span_processor(app_processor)
    tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=[])
    with tracer_provider.get_tracer("app").start_as_current_span("last"):
        pass
    tracer_provider.shutdown()
    assert [span.name for span in app_processor.ended] == ["last"]
    assert app_processor.shutdowns == 1


def test_instrument_twice_after_uninstrument_does_not_adopt_its_own_old_head(
    tracer_provider: TracerProvider,
) -> None:
    app_processor = _CountingProcessor()
    tracer_provider.add_span_processor(app_processor)
    tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=[])
    tallyspan.uninstrument()
    second = tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=[])
    assert second.adopted_processors == (app_processor,)
    with tracer_provider.get_tracer("app").start_as_current_span("again"):
        pass
    assert second.force_flush()
    assert [span.name for span in app_processor.ended] == ["again"]


def test_adopt_processors_false_leaves_the_app_exporting_raw_spans(tracer_provider: TracerProvider) -> None:
    app_exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(app_exporter))
    instrumentation = tallyspan.instrument(
        contracts=CONTRACTS,
        tracer_provider=tracer_provider,
        store=None,
        instrumentors=["tallyspan_openai"],
        adopt_processors=False,
    )
    assert instrumentation.adopted_processors == ()
    _ask("This answer is in English.")
    (span,) = app_exporter.get_finished_spans()  # exported as it ended, before any check
    assert semconv.VIOLATION_TYPES not in (span.attributes or {})


class _StuckProcessor(_CountingProcessor):
    """An app processor that blocks in on_end until released (a synchronous exporter on a dead network)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        self.release.wait(60)
        super().on_end(span)


def test_a_stuck_app_processor_does_not_hold_up_the_store(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    stuck = _StuckProcessor()
    tracer_provider.add_span_processor(stuck)
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    with tallyspan.run("agent"):
        pass

    stored: list[str] = []
    for _ in range(400):  # the store gets the run while the app's processor is still stuck
        if db_path.exists():
            db = connect(db_path)
            stored = [row[0] for row in db.execute("SELECT name FROM runs")]
            db.close()
        if stored:
            break
        instrumentation.processor.force_flush(50)
    assert stored == ["invoke_agent agent"]
    assert stuck.ended == []

    stuck.release.set()
    assert instrumentation.force_flush()
    assert [span.name for span in stuck.ended] == ["invoke_agent agent"]
