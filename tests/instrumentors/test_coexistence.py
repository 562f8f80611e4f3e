"""Next to OpenTelemetry's own OpenAI instrumentation (opentelemetry-instrumentation-openai-v2, installed
and enabled): one model span per call, whichever instrumented first, in both of its span-making modes
(its own spans on the v1.30 conventions, or util-genai's with the latest ones), and our checks run on it.

Their wrapper ends up outside ours (``_post_import`` puts ours beneath an existing wrapper), so their
span is current when ours runs and ours records into it (``_calls.start_genai_call``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.resources.chat.completions import AsyncCompletions, Completions
from openai.resources.embeddings import Embeddings
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIV2Instrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan._store._store_queries import open_store, report
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

CONTRACTS = {"contracts": {"weekly_report": {"language": "ja", "min_chars": 20}}}
PROMPT = "週報を書いてください: the private question"
ANSWER = "Here is the weekly report, in English, which the contract does not allow."
ORDERS = ("tallyspan first", "openai-v2 first")
#: openai-v2's conventions: v1.30 (its default, its own spans) or the latest (util-genai's handler makes them).
MODES = {"v1.30": "opentelemetry.instrumentation.openai_v2", "latest": "opentelemetry.util.genai.handler"}
SETUPS = [(order, mode) for order in ORDERS for mode in MODES]

_ORIGINALS = {
    (owner, name): vars(owner)[name]
    for owner in (Completions, AsyncCompletions, Embeddings)
    for name in ("create",)
}


@pytest.fixture
def openai_v2(tracer_provider: TracerProvider) -> Iterator[Callable[[], None]]:
    """Call it to instrument the official OpenAI instrumentation on the private provider; undone after."""
    instrumentor = OpenAIV2Instrumentor()  # type: ignore[no-untyped-call]
    yield lambda: instrumentor.instrument(tracer_provider=tracer_provider)
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


@pytest.fixture
def both(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    make_instrumented: MakeInstrumented,
    openai_v2: Callable[[], None],
) -> Iterator[tallyspan.Instrumentation]:
    """tallyspan (contracts, store) and openai-v2 on one provider, in the order and openai-v2 mode the test
    is parametrized with (``(order, mode)``)."""
    from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability as stability

    order, mode = request.param
    if mode == "latest":
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    # openai-v2 reads the opt-in once per process: make it read it now, and again after the test.
    stability._initialized = False
    stability._initialize()  # type: ignore[no-untyped-call]
    if order == "openai-v2 first":
        openai_v2()
        instrumentation = make_instrumented(CONTRACTS).instrumentation
    else:
        instrumentation = make_instrumented(CONTRACTS).instrumentation
        openai_v2()
    yield instrumentation
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    stability._initialized = False
    stability._initialize()  # type: ignore[no-untyped-call]


def foreign_scope(request: pytest.FixtureRequest) -> str:
    """The instrumentation scope of openai-v2's spans in the mode of this test."""
    return MODES[request.node.callspec.params["both"][1]]


def model_spans(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return [
        span
        for span in spans
        if (span.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME)
        in {*semconv.MODEL_OPERATIONS, semconv.OPERATION_EMBEDDINGS}
    ]


def exported_text(span: ReadableSpan) -> str:
    """Every attribute and event of a span as one string, to look for content in."""
    events = [dict(event.attributes or {}) for event in span.events]
    return json.dumps([dict(span.attributes or {}), events], ensure_ascii=False, default=str)


@pytest.mark.parametrize("both", SETUPS, indirect=True)
async def test_each_call_has_one_model_span_and_it_is_checked(both, span_exporter, db_path: Path, request):
    replies = [ScriptedReply(text=ANSWER) for _ in range(3)]
    messages: Any = [{"role": "user", "content": PROMPT}]
    with OpenAICompatibleServer(replies=replies) as server, tallyspan.stage("weekly_report"):
        with openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            client.chat.completions.create(model="m1", messages=messages)
            stream = client.chat.completions.create(model="m1", messages=messages, stream=True)
            assert (
                "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == ANSWER
            )
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as aclient:
            await aclient.chat.completions.create(model="m1", messages=messages)
    assert both.force_flush()
    spans = model_spans(span_exporter.get_finished_spans())
    assert len(spans) == 3  # one per call, not two
    for span in spans:
        attributes = span.attributes or {}
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == foreign_scope(request)  # the outer span, joined
        assert attributes[semconv.STAGE] == "weekly_report"
        assert "not_japanese" in list(attributes[semconv.VIOLATION_TYPES])  # type: ignore[arg-type]
        assert attributes[semconv.VIOLATED] is True
    with open_store(db_path) as db:
        summary = report(db)
    assert summary.model_calls == 3  # the report counts each call once
    tokens = [(span.attributes or {}).get(semconv.GEN_AI_USAGE_INPUT_TOKENS, 0) for span in spans]
    assert sum(model.input_tokens for model in summary.models) == sum(t for t in tokens if isinstance(t, int))


@pytest.mark.parametrize("both", SETUPS, indirect=True)
def test_content_stays_private_by_default(both, span_exporter):
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=ANSWER)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage("weekly_report"),
    ):
        client.chat.completions.create(model="m1", messages=[{"role": "user", "content": PROMPT}])
    assert both.force_flush()
    (span,) = model_spans(span_exporter.get_finished_spans())
    types = (span.attributes or {})[semconv.VIOLATION_TYPES]
    assert "not_japanese" in list(types)  # type: ignore[arg-type]  # checked in process
    text = exported_text(span)
    assert ANSWER not in text
    assert "private question" not in text
    assert semconv.GEN_AI_OUTPUT_MESSAGES not in (span.attributes or {})
    assert (span.attributes or {})[semconv.OPENINFERENCE_OUTPUT_VALUE] == ""


@pytest.mark.parametrize("both", SETUPS, indirect=True)
def test_embeddings_have_one_span(both, span_exporter):
    with (
        OpenAICompatibleServer() as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        client.embeddings.create(model="e1", input="hello")
    assert both.force_flush()
    (span,) = model_spans(span_exporter.get_finished_spans())
    assert span.name == "embeddings e1"


@pytest.mark.parametrize("first", ORDERS)
@pytest.mark.parametrize("undo_first", ["tallyspan", "openai-v2"])
def test_uninstrumenting_in_any_order_restores_the_sdk(
    first: str, undo_first: str, make_instrumented: MakeInstrumented, tracer_provider: TracerProvider
):
    v2 = OpenAIV2Instrumentor()  # type: ignore[no-untyped-call]
    if first == "openai-v2 first":
        v2.instrument(tracer_provider=tracer_provider)
        make_instrumented()
    else:
        make_instrumented()
        v2.instrument(tracer_provider=tracer_provider)
    undo = [tallyspan.uninstrument, v2.uninstrument]
    if undo_first == "openai-v2":
        undo.reverse()
    undo[0]()
    with (
        OpenAICompatibleServer() as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        client.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}])
    undo[1]()
    for (owner, name), original in _ORIGINALS.items():
        assert vars(owner)[name] is original, (owner, name)
