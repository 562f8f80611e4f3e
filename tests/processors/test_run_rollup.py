"""The roll-up: a run span carries the violations of the model calls below it, so trace lists show it.

Trace lists (Phoenix's root spans, Jaeger's and Tempo's trace search) start from the run or the root:
a run whose model answered in the wrong language must be red there, not only on a child span.
Real OpenAI client, local OpenAI-compatible server, the whole ``instrument()`` chain.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

CONTRACTS: dict[str, Any] = {
    "contracts": {
        "answer": {"language": "ja", "min_chars": 10, "forbidden": [r"<\|im_end\|>"]},
    },
}
GOOD = "今週の問い合わせ対応は予定通り完了しました。"
ENGLISH = "The weekly report is finished and everything went to plan."
ENGLISH_WITH_TOKEN = "The weekly report is finished.<|im_end|>"
USER: Any = [{"role": "user", "content": "今週の報告を書いてください。"}]


@pytest.fixture
def exporter(make_instrumented: MakeInstrumented) -> InMemorySpanExporter:
    return make_instrumented(CONTRACTS, store=None, instrumentors=["tallyspan_openai"]).spans


def _ask(replies: list[str], *, stage: str = "answer") -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=text) for text in replies]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
        tallyspan.stage(stage),
    ):
        for _ in replies:
            client.chat.completions.create(model="gpt-4o", messages=USER)


def _finished(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    instrumentation = tallyspan.instrumentation()
    assert instrumentation is not None
    assert instrumentation.force_flush()
    return {span.name: span for span in exporter.get_finished_spans()}


def test_a_run_with_violating_model_calls_is_error_with_the_types_and_count(
    exporter: InMemorySpanExporter,
) -> None:
    with tallyspan.run("writer"):
        _ask([ENGLISH, ENGLISH_WITH_TOKEN, GOOD])
    spans = _finished(exporter)
    run = spans["invoke_agent writer"]
    attributes = dict(run.attributes or {})
    # ENGLISH: not_japanese; ENGLISH_WITH_TOKEN: not_japanese and forbidden_present; GOOD: clean.
    assert attributes[semconv.RUN_VIOLATION_COUNT] == 3
    assert tuple(attributes[semconv.RUN_VIOLATION_TYPES]) == ("forbidden_present", "not_japanese")  # type: ignore[arg-type]
    assert attributes[semconv.VIOLATED] is True
    assert semconv.VIOLATION_TYPES not in attributes  # the run's own output was not checked
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "forbidden_present, not_japanese in 2 of 3 calls"
    assert attributes[semconv.LEDGER_BALANCED] is True  # the ledger is still reconciled beside it


def test_a_clean_run_gets_no_rollup_and_stays_unset(exporter: InMemorySpanExporter) -> None:
    with tallyspan.run("writer"):
        _ask([GOOD])
    run = _finished(exporter)["invoke_agent writer"]
    attributes = dict(run.attributes or {})
    assert semconv.RUN_VIOLATION_COUNT not in attributes
    assert semconv.RUN_VIOLATION_TYPES not in attributes
    assert semconv.VIOLATED not in attributes
    assert run.status.status_code is StatusCode.UNSET


def test_the_local_root_carries_the_rollup_when_there_is_no_agent_span(
    exporter: InMemorySpanExporter, tracer_provider: TracerProvider
) -> None:
    with tracer_provider.get_tracer("app").start_as_current_span("handle request"):
        _ask([ENGLISH])
    root = _finished(exporter)["handle request"]
    attributes = dict(root.attributes or {})
    assert attributes[semconv.RUN_VIOLATION_COUNT] == 1
    assert tuple(attributes[semconv.RUN_VIOLATION_TYPES]) == ("not_japanese",)  # type: ignore[arg-type]
    assert root.status.status_code is StatusCode.ERROR
    assert semconv.LEDGER_BALANCED not in attributes  # nothing on its books: no reconciliation


def test_nested_runs_roll_up_to_each_enclosing_run_and_the_root(
    exporter: InMemorySpanExporter, tracer_provider: TracerProvider
) -> None:
    with tracer_provider.get_tracer("app").start_as_current_span("handle request"):
        with tallyspan.run("planner"):
            _ask([GOOD])
            with tallyspan.run("writer"):
                _ask([ENGLISH_WITH_TOKEN])
        with tallyspan.run("reviewer"):
            _ask([ENGLISH])
    spans = _finished(exporter)
    counts = {
        name: dict(spans[name].attributes or {}).get(semconv.RUN_VIOLATION_COUNT)
        for name in ("invoke_agent writer", "invoke_agent planner", "invoke_agent reviewer", "handle request")
    }
    assert counts == {
        "invoke_agent writer": 2,
        "invoke_agent planner": 2,
        "invoke_agent reviewer": 1,
        "handle request": 3,
    }
    root_types = dict(spans["handle request"].attributes or {})[semconv.RUN_VIOLATION_TYPES]
    assert tuple(root_types) == ("forbidden_present", "not_japanese")  # type: ignore[arg-type]


def test_mark_error_status_off_leaves_the_run_status_alone(make_instrumented: MakeInstrumented) -> None:
    spans = make_instrumented(
        CONTRACTS, store=None, instrumentors=["tallyspan_openai"], mark_error_status=False
    )
    with tallyspan.run("writer"):
        _ask([ENGLISH])
    run = _finished(spans.spans)["invoke_agent writer"]
    assert dict(run.attributes or {})[semconv.RUN_VIOLATION_COUNT] == 1
    assert run.status.status_code is StatusCode.UNSET


def test_a_verdict_that_ends_after_its_run_is_counted_not_rolled_up(
    exporter: InMemorySpanExporter, tracer_provider: TracerProvider
) -> None:
    tracer = tracer_provider.get_tracer("app")
    with tallyspan.run("writer") as run_span:
        late = tracer.start_span("chat late", attributes={semconv.GEN_AI_OPERATION_NAME: "chat"})
    del run_span
    late.set_attribute(semconv.VIOLATION_TYPES, ["refusal"])  # as another checker would have put it
    late.set_attribute(semconv.VIOLATION_COUNT, 1)
    late.end()
    run = _finished(exporter)["invoke_agent writer"]
    assert semconv.RUN_VIOLATION_COUNT not in dict(run.attributes or {})
    assert tallyspan.stats()["dropped.run_late_verdicts"] == 1
