"""A stream the app stops reading is not a short answer: the span says the consumer stopped, and the
text checks do not judge the partial answer. Real OpenAI and Anthropic clients, local servers, the chain.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan.testing import AnthropicServer, OpenAICompatibleServer, ScriptedReply

#: Long enough to stream in several chunks; English, so every text check would fire on it.
ANSWER = (
    "The weekly report is finished and every customer ticket was answered on time. "
    "Two releases shipped on Tuesday, and the database migration ran without downtime. "
    "Support volume fell by a tenth after the new help pages went live on Thursday. "
    "Next week the team will focus on the billing export that finance asked for."
)
CONTRACTS = {"contracts": {"report": {"language": "ja", "min_chars": 1000}}}
USER: Any = [{"role": "user", "content": "今週の報告を書いてください。"}]


@pytest.fixture
def exporter(make_instrumented: MakeInstrumented) -> InMemorySpanExporter:
    return make_instrumented(
        CONTRACTS, store=None, instrumentors=["tallyspan_openai", "tallyspan_anthropic"]
    ).spans


@pytest.fixture
def client() -> Iterator[openai.OpenAI]:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=ANSWER)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        yield client


def _model_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    instrumentation = tallyspan.instrumentation()
    assert instrumentation is not None
    assert instrumentation.force_flush()
    [span] = [span for span in exporter.get_finished_spans() if span.name.startswith("chat ")]
    return span


def _assert_abandoned(span: ReadableSpan) -> None:
    attributes = dict(span.attributes or {})
    assert attributes[semconv.STREAM_ABANDONED] is True
    assert semconv.GEN_AI_RESPONSE_FINISH_REASONS not in attributes
    assert semconv.VIOLATION_TYPES not in attributes  # neither too_short nor not_japanese on a partial answer
    assert attributes[semconv.CONTRACT] == "report"  # it was checked, by the checks that do not read text
    assert span.status.status_code is StatusCode.UNSET


def test_a_stream_closed_after_one_chunk_is_abandoned_not_short(
    exporter: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    with tallyspan.stage("report"):
        stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        next(iter(stream))
        stream.close()
    _assert_abandoned(_model_span(exporter))


def test_a_stream_dropped_unread_is_abandoned_when_collected(
    exporter: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    with tallyspan.stage("report"):
        stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        next(iter(stream))
        del stream
        gc.collect()
    _assert_abandoned(_model_span(exporter))


def test_leaving_with_early_abandons_the_stream(
    exporter: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    with (
        tallyspan.stage("report"),
        client.chat.completions.create(model="gpt-4o", messages=USER, stream=True) as stream,
    ):
        for _chunk in stream:
            break
    _assert_abandoned(_model_span(exporter))


def test_a_stream_read_to_its_end_is_judged_whole(
    exporter: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    with tallyspan.stage("report"):
        stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == ANSWER
    attributes = dict(_model_span(exporter).attributes or {})
    assert semconv.STREAM_ABANDONED not in attributes
    assert tuple(attributes[semconv.VIOLATION_TYPES]) == ("not_japanese", "too_short")  # type: ignore[arg-type]


def test_stopping_after_the_finish_reason_is_a_whole_answer(
    exporter: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    with tallyspan.stage("report"):
        stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason is not None:
                break  # the model is done; the app does not wait for the end of the stream
        stream.close()
    attributes = dict(_model_span(exporter).attributes or {})
    assert semconv.STREAM_ABANDONED not in attributes
    assert tuple(attributes[semconv.VIOLATION_TYPES]) == ("not_japanese", "too_short")  # type: ignore[arg-type]


def test_an_anthropic_stream_left_early_is_abandoned(exporter: InMemorySpanExporter) -> None:
    with (
        AnthropicServer(replies=[ScriptedReply(text=ANSWER)]) as server,
        anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("report"),
        client.messages.stream(model="claude-x", max_tokens=100, messages=USER) as stream,
    ):
        for _text in stream.text_stream:
            break
    _assert_abandoned(_model_span(exporter))
