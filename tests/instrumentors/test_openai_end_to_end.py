"""End to end through ``tallyspan.instrument()``: the entry point finds the OpenAI instrumentor."""

from __future__ import annotations

import openai
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan
from tallyspan import semconv
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply


def test_instrument_finds_openai_and_spans_reach_the_chain(
    instrumented: tallyspan.Instrumentation,
    span_exporter: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(text="週報です。", completion_tokens=4))
    with tallyspan.stage("weekly_report"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "週報"}])
        list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )
    instrumented.force_flush()
    spans = [span for span in span_exporter.get_finished_spans() if span.name == "chat m"]
    assert len(spans) == 2
    for span in spans:
        attributes = span.attributes or {}
        assert attributes[semconv.STAGE] == "weekly_report"
        assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "openai"
        assert semconv.GEN_AI_OUTPUT_MESSAGES not in attributes
    assert (spans[0].attributes or {})[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 4


def test_uninstrument_stops_the_spans(
    instrumented: tallyspan.Instrumentation,
    span_exporter: InMemorySpanExporter,
    client: openai.OpenAI,
) -> None:
    tallyspan.uninstrument()
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert span_exporter.get_finished_spans() == ()
