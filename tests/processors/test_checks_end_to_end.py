"""The checks end to end: real OpenAI clients, a local OpenAI-compatible server, our chain, real spans.

Two instrumentations make the spans: ours (content handed over in process, never exported unless
asked) and the official OpenTelemetry one from PyPI (``opentelemetry-instrumentation-openai-v2``, with
its content capture on, so the checks read ``gen_ai.output.messages`` from its spans).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan._content import content_buffer
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

CONTRACTS: dict[str, Any] = {
    "contracts": {
        "weekly_report": {
            "language": "ja",
            "min_chars": 10,
            "required": [r"^判定[:：]"],
            "forbidden": [{"name": "template token", "pattern": r"<\|im_end\|>"}],
            "deadline_s": 30,
            "max_wait_s": 60,
        },
        "qwen_answers": {"language": "ja"},
    },
    "match": [{"model": "qwen*", "contract": "qwen_answers"}],
}
GOOD = "判定：合格\n今週の問い合わせ対応は予定通り完了しました。"
USER: Any = [{"role": "user", "content": "今週の報告を書いてください。"}]


@pytest.fixture
def chain(make_instrumented: MakeInstrumented) -> tallyspan.Instrumentation:
    """``instrument()`` with our OpenAI instrumentor and the contracts; content capture off."""
    return make_instrumented(contracts=CONTRACTS, store=None).instrumentation


def _model_span(chain: tallyspan.Instrumentation, exporter: InMemorySpanExporter) -> ReadableSpan:
    assert chain.force_flush()
    spans = [span for span in exporter.get_finished_spans() if span.name.startswith("chat ")]
    assert len(spans) == 1, [span.name for span in exporter.get_finished_spans()]
    return spans[0]


def _types(span: ReadableSpan) -> tuple[str, ...]:
    return tuple((span.attributes or {}).get(semconv.VIOLATION_TYPES, ()))  # type: ignore[arg-type]


def test_our_instrumentor_checks_content_that_is_never_exported(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    chinese = "判定：合格\n本件の調査結果をまとめました。我们认为这个方案是目前最好的选择。<|im_end|>"
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=chinese)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("weekly_report"),
    ):
        response = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert response.choices[0].message.content == chinese  # the app's result is untouched
    span = _model_span(chain, span_exporter)
    attributes = dict(span.attributes or {})
    assert _types(span) == ("chinese_in_japanese", "forbidden_present")
    assert attributes[semconv.VIOLATION_COUNT] == 2
    assert attributes[semconv.FAILURE_CLASS] == "contract_violation"
    assert attributes[semconv.VIOLATED] is True
    assert attributes[semconv.CONTRACT] == "weekly_report"
    assert attributes[semconv.STAGE] == "weekly_report"
    assert semconv.GEN_AI_OUTPUT_MESSAGES not in attributes  # private by default
    details = [dict(event.attributes or {})[semconv.VIOLATION_DETAIL] for event in span.events]
    assert details == [
        "pattern 'template token' found",
        "1 Chinese clause(s), 16 han chars, in Japanese text",
    ]
    assert span.status.status_code is StatusCode.ERROR
    assert len(content_buffer()) == 0


def test_a_streamed_clean_answer_is_forwarded_clean(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=GOOD)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("weekly_report"),
    ):
        stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == GOOD
    span = _model_span(chain, span_exporter)
    assert _types(span) == ()
    assert (span.attributes or {})[semconv.CONTRACT] == "weekly_report"
    assert span.status.status_code is StatusCode.UNSET


def test_reasoning_in_its_own_field_is_fine_but_think_tags_in_the_answer_leak(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    replies = [
        ScriptedReply(text=GOOD, reasoning="報告の要点を整理する。"),
        ScriptedReply(text="<think>整理</think>" + GOOD),
    ]
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("weekly_report"),
    ):
        client.chat.completions.create(model="gpt-4o", messages=USER)
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert chain.force_flush()
    spans = [span for span in span_exporter.get_finished_spans() if span.name.startswith("chat ")]
    assert [_types(span) for span in spans] == [(), ("reasoning_leaked",)]


def test_a_turn_that_asks_for_tools_is_a_step_not_a_deliverable(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    lookup = ScriptedToolCall(name="lookup", arguments={"week": 48})
    replies = [
        ScriptedReply(tool_calls=[lookup]),  # empty text: not too_short, not missing 判定
        ScriptedReply(text="Let me look that up.", tool_calls=[lookup]),  # narration: not not_japanese
        ScriptedReply(text=""),  # an empty answer that stops is still an empty deliverable
    ]
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("weekly_report"),
    ):
        for _ in replies:
            client.chat.completions.create(model="gpt-4o", messages=USER)
    assert chain.force_flush()
    spans = [span for span in span_exporter.get_finished_spans() if span.name.startswith("chat ")]
    assert [(span.attributes or {})[semconv.GEN_AI_RESPONSE_FINISH_REASONS] for span in spans] == [
        ("tool_calls",),
        ("tool_calls",),
        ("stop",),
    ]
    assert [_types(span) for span in spans[:2]] == [(), ()]
    assert [span.status.status_code for span in spans[:2]] == [StatusCode.UNSET, StatusCode.UNSET]
    assert _types(spans[2]) == ("missing_required", "too_short")
    assert len(content_buffer()) == 0


def test_a_5xx_answer_is_a_process_error_and_the_app_sees_its_exception(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(status=503)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("weekly_report"),
        pytest.raises(openai.InternalServerError),
    ):
        client.chat.completions.create(model="gpt-4o", messages=USER)
    span = _model_span(chain, span_exporter)
    assert _types(span) == ("process_error",)
    assert (span.attributes or {})[semconv.FAILURE_CLASS] == "process_error"
    assert span.status.status_code is StatusCode.ERROR


def test_a_refused_connection_is_a_process_error(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0) as client:
        with tallyspan.stage("weekly_report"), pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model="gpt-4o", messages=USER)
        assert _types(_model_span(chain, span_exporter)) == ("process_error",)


def test_a_client_timeout_is_a_timeout(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=GOOD, delay_s=2.0)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.3) as client,
        tallyspan.stage("weekly_report"),
        pytest.raises(openai.APITimeoutError),
    ):
        client.chat.completions.create(model="gpt-4o", messages=USER)
    span = _model_span(chain, span_exporter)
    assert _types(span) == ("timeout",)
    assert (span.attributes or {})[semconv.FAILURE_CLASS] == "timeout"


def test_work_that_waited_too_long_is_scheduler_starvation(
    chain: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=GOOD)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("weekly_report", enqueued_at=time.time() - 600),
    ):
        client.chat.completions.create(model="gpt-4o", messages=USER)
    span = _model_span(chain, span_exporter)
    assert _types(span) == ("scheduler_starvation",)
    detail = dict(span.events[0].attributes or {})[semconv.VIOLATION_DETAIL]
    assert str(detail).startswith("waited 60")
    assert str(detail).endswith("s > max_wait_s 60")


@pytest.fixture
def official_openai(
    monkeypatch: pytest.MonkeyPatch, tracer_provider: TracerProvider, make_instrumented: MakeInstrumented
) -> Iterator[tallyspan.Instrumentation]:
    """The official OpenTelemetry OpenAI instrumentation (content on spans) under our chain, ours off."""
    openai_v2 = pytest.importorskip("opentelemetry.instrumentation.openai_v2")
    from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability as stability

    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    # The opt-in is read once per process; re-read it now, and again after the test without it.
    stability._initialized = False
    stability._initialize()  # type: ignore[no-untyped-call]
    instrumentation = make_instrumented(contracts=CONTRACTS, store=None, instrumentors=[]).instrumentation
    instrumentor = openai_v2.OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    yield instrumentation
    instrumentor.uninstrument()
    tallyspan.uninstrument()  # before the opt-in is reset, not at make_instrumented's teardown
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN")
    stability._initialized = False
    stability._initialize()  # type: ignore[no-untyped-call]


def test_spans_of_the_official_openai_instrumentation_are_checked_from_captured_content(
    official_openai: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    replies = [ScriptedReply(text="Here is the weekly report you asked for."), ScriptedReply(text=GOOD)]
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        client.chat.completions.create(model="qwen2.5-14b", messages=USER)
        client.chat.completions.create(model="qwen2.5-14b", messages=USER)
    assert official_openai.force_flush()
    spans = [span for span in span_exporter.get_finished_spans() if span.name.startswith("chat ")]
    assert len(spans) == 2
    # The official instrumentation makes its spans through opentelemetry-util-genai's handler.
    assert [span.instrumentation_scope.name for span in spans] == ["opentelemetry.util.genai.handler"] * 2  # type: ignore[union-attr]
    assert semconv.GEN_AI_OUTPUT_MESSAGES in (spans[0].attributes or {})
    assert [_types(span) for span in spans] == [("not_japanese",), ()]
    assert [(span.attributes or {})[semconv.CONTRACT] for span in spans] == ["qwen_answers", "qwen_answers"]
    assert spans[0].status.status_code is StatusCode.ERROR
    assert spans[0].status.description == "tallyspan: not_japanese"
