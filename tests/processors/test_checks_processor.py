"""The checks processor on real spans: a real TracerProvider, our processor, an in-memory exporter."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from tests.conftest import MakeInstrumented
from tests.stats import losses

import tallyspan
from tallyspan import semconv
from tallyspan._content import ModelContent, ToolCallContent, content_buffer
from tallyspan._state import Settings
from tallyspan_processors import ChecksProcessor, WrappingProcessor, checks_component

CONTRACTS = {
    "contracts": {
        "report": {
            "language": "ja",
            "min_chars": 10,
            "required": [r"^判定[:：]"],
            "deadline_s": 5,
            "max_wait_s": 60,
        },
        "free": {},
    },
}
GOOD = "判定：合格\n今週の問い合わせ対応は予定通り完了しました。"


@dataclass
class Pipeline:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    processor: ChecksProcessor

    def span(
        self,
        attributes: Mapping[str, Any],
        *,
        content: ModelContent | None = None,
        start_ns: int | None = None,
        duration_s: float = 0.01,
        status: Status | None = None,
        exception: BaseException | None = None,
    ) -> ReadableSpan:
        tracer = self.provider.get_tracer("test")
        start = start_ns if start_ns is not None else time.time_ns()
        span = tracer.start_span("chat m", attributes=dict(attributes), start_time=start)
        if exception is not None:
            span.record_exception(exception)
        if status is not None:
            span.set_status(status)
        if content is not None:
            content_buffer().put(span.get_span_context().span_id, content)
        span.end(end_time=start + int(duration_s * 1e9))
        return self.exporter.get_finished_spans()[-1]


def _chat(stage: str | None = "report", **extra: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT, **extra}
    if stage is not None:
        attributes[semconv.STAGE] = stage
    return attributes


def _output_messages(text: str) -> str:
    return json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}]
    )


@contextmanager
def _build(**options: Any) -> Iterator[Pipeline]:
    exporter = InMemorySpanExporter()
    contracts = options.pop("contracts", CONTRACTS)
    processor = ChecksProcessor(
        [SimpleSpanProcessor(exporter)], tallyspan.load_contracts(contracts) if contracts else None, **options
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        yield Pipeline(provider, exporter, processor)
    finally:
        provider.shutdown()


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    with _build() as built:
        yield built


def test_a_violating_span_is_forwarded_enriched(pipeline: Pipeline) -> None:
    span = pipeline.span(_chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages("Here is the report.")}))
    attributes = dict(span.attributes or {})
    assert tuple(attributes[semconv.VIOLATION_TYPES]) == ("missing_required", "not_japanese")  # type: ignore[arg-type]
    assert attributes[semconv.VIOLATION_COUNT] == 2
    assert attributes[semconv.FAILURE_CLASS] == "contract_violation"
    assert attributes[semconv.VIOLATED] is True
    assert attributes[semconv.CONTRACT] == "report"
    events = [event for event in span.events if event.name == semconv.EVENT_VIOLATION]
    assert [dict(event.attributes or {}) for event in events] == [
        {
            semconv.VIOLATION_TYPE: "missing_required",
            semconv.VIOLATION_FAILURE_CLASS: "contract_violation",
            semconv.VIOLATION_DETAIL: "pattern '^判定[:：]' not found",
        },
        {
            semconv.VIOLATION_TYPE: "not_japanese",
            semconv.VIOLATION_FAILURE_CLASS: "language_corruption",
            semconv.VIOLATION_DETAIL: "primary language en, not ja (0 kana, 0 han, 4 latin words)",
        },
    ]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "tallyspan: missing_required, not_japanese"


def test_the_count_counts_violations_not_their_distinct_types() -> None:
    """Two forbidden tokens found: one type, two violations, two events."""
    contracts = {"contracts": {"report": {"forbidden": [
        {"name": "end token", "pattern": r"<\|im_end\|>"},
        {"name": "start token", "pattern": r"<\|im_start\|>"},
    ]}}}  # fmt: skip
    with _build(contracts=contracts) as pipeline:
        span = pipeline.span(_chat(), content=ModelContent("答え<|im_end|><|im_start|>"))
    attributes = dict(span.attributes or {})
    assert tuple(attributes[semconv.VIOLATION_TYPES]) == ("forbidden_present",)  # type: ignore[arg-type]
    assert attributes[semconv.VIOLATION_COUNT] == 2
    assert [event.name for event in span.events] == [semconv.EVENT_VIOLATION, semconv.EVENT_VIOLATION]


def test_a_clean_span_gets_only_its_contract_name(pipeline: Pipeline) -> None:
    span = pipeline.span(_chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages(GOOD)}))
    attributes = dict(span.attributes or {})
    assert attributes[semconv.CONTRACT] == "report"
    for name in (semconv.VIOLATION_TYPES, semconv.VIOLATION_COUNT, semconv.FAILURE_CLASS, semconv.VIOLATED):
        assert name not in attributes
    assert span.events == ()
    assert span.status.status_code is StatusCode.UNSET


def test_content_comes_from_the_buffer_first_and_is_removed(pipeline: Pipeline) -> None:
    assert content_buffer().active
    span = pipeline.span(
        _chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages(GOOD)}),
        content=ModelContent(output_text="I'm sorry, but I can't help with that."),
    )
    assert span.attributes is not None
    assert tuple(span.attributes[semconv.VIOLATION_TYPES]) == ("missing_required", "not_japanese", "refusal")  # type: ignore[arg-type]
    assert len(content_buffer()) == 0


def test_spans_without_a_contract_are_left_alone_but_their_content_is_popped(pipeline: Pipeline) -> None:
    attributes = _chat(stage="elsewhere", **{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages("no")})
    span = pipeline.span(attributes, content=ModelContent(output_text="no"))
    assert dict(span.attributes or {}) == attributes
    assert span.status.status_code is StatusCode.UNSET
    assert len(content_buffer()) == 0
    unstaged = pipeline.span(_chat(stage=None), content=ModelContent(output_text="no"))
    assert semconv.CONTRACT not in (unstaged.attributes or {})
    assert len(content_buffer()) == 0


def test_non_model_spans_are_not_checked(pipeline: Pipeline) -> None:
    attributes = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL, semconv.STAGE: "report"}
    span = pipeline.span(attributes)
    assert dict(span.attributes or {}) == attributes


def test_the_default_contract_applies_to_spans_without_a_stage() -> None:
    with _build(contracts={"contracts": {}, "default": {"language": "ja"}}) as pipeline:
        span = pipeline.span(
            _chat(stage=None, **{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages("Hello there")})
        )
        assert span.attributes is not None
        assert span.attributes[semconv.CONTRACT] == "default"
        assert tuple(span.attributes[semconv.VIOLATION_TYPES]) == ("not_japanese",)  # type: ignore[arg-type]


def test_match_rules_bind_by_agent_name_and_model() -> None:
    contracts = {
        "contracts": {"strict": {"min_chars": 100}},
        "match": [{"agent": "writer", "model": "qwen*", "contract": "strict"}],
    }
    with _build(contracts=contracts) as pipeline:
        attributes = _chat(
            stage=None,
            **{
                semconv.GEN_AI_AGENT_NAME: "writer",
                semconv.GEN_AI_REQUEST_MODEL: "qwen2.5",
                semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages("短い"),
            },
        )
        span = pipeline.span(attributes)
        assert span.attributes is not None
        assert span.attributes[semconv.CONTRACT] == "strict"
        assert tuple(span.attributes[semconv.VIOLATION_TYPES]) == ("too_short",)  # type: ignore[arg-type]
        other = pipeline.span({**attributes, semconv.GEN_AI_AGENT_NAME: "reader"})
        assert semconv.CONTRACT not in (other.attributes or {})


def test_status_is_left_alone_when_mark_error_status_is_off() -> None:
    with _build(mark_error_status=False) as pipeline:
        span = pipeline.span(_chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages("Hello")}))
        assert span.attributes is not None
        assert span.attributes[semconv.VIOLATED] is True
        assert span.status.status_code is StatusCode.UNSET


def test_evaluation_events_mirror_each_check() -> None:
    with _build(evaluation_events=True) as pipeline:
        span = pipeline.span(
            _chat(
                **{
                    semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages(
                        "判定：合格\nThe report is written in English and not in Japanese."
                    )
                }
            )
        )
        evaluations = [
            dict(e.attributes or {}) for e in span.events if e.name == semconv.EVENT_GEN_AI_EVALUATION_RESULT
        ]
        assert [e[semconv.GEN_AI_EVALUATION_NAME] for e in evaluations] == [
            "tallyspan.not_japanese",
            "tallyspan.contract.report",
        ]
        assert evaluations[0][semconv.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
        assert evaluations[0][semconv.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0
        assert evaluations[1][semconv.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
        assert evaluations[1][semconv.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0
        stamps = [e.timestamp for e in span.events if e.name == semconv.EVENT_GEN_AI_EVALUATION_RESULT]
        assert stamps == [span.end_time, span.end_time]
        clean = pipeline.span(_chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages(GOOD)}))
        assert [dict(e.attributes or {}) for e in clean.events] == [
            {
                semconv.GEN_AI_EVALUATION_NAME: "tallyspan.contract.report",
                semconv.GEN_AI_EVALUATION_SCORE_LABEL: "pass",
                semconv.GEN_AI_EVALUATION_SCORE_VALUE: 1.0,
            }
        ]


def test_openllmetry_and_openinference_content_is_read(pipeline: Pipeline) -> None:
    openllmetry = pipeline.span(
        _chat(
            **{
                f"{semconv.OPENLLMETRY_PROMPT_PREFIX}0.role": "user",
                f"{semconv.OPENLLMETRY_PROMPT_PREFIX}0.content": "報告して",
                f"{semconv.OPENLLMETRY_COMPLETION_PREFIX}0.role": "assistant",
                f"{semconv.OPENLLMETRY_COMPLETION_PREFIX}0.content": "Sure, here you go.",
            }
        )
    )
    assert tuple((openllmetry.attributes or {})[semconv.VIOLATION_TYPES]) == (  # type: ignore[arg-type]
        "missing_required",
        "not_japanese",
    )
    openinference = pipeline.span(
        _chat(
            **{
                f"{semconv.OPENINFERENCE_OUTPUT_MESSAGES_PREFIX}0.message.content": "我们认为这个方案是最好的。"
            }
        )
    )
    assert tuple((openinference.attributes or {})[semconv.VIOLATION_TYPES]) == (  # type: ignore[arg-type]
        "missing_required",
        "not_japanese",
    )
    raw_response = json.dumps({"choices": [{"message": {"role": "assistant", "content": GOOD}}]})
    output_value = pipeline.span(_chat(**{semconv.OPENINFERENCE_OUTPUT_VALUE: raw_response}))
    assert semconv.VIOLATION_TYPES not in (output_value.attributes or {})
    assert (output_value.attributes or {})[semconv.CONTRACT] == "report"


def test_an_empty_output_value_is_no_content(pipeline: Pipeline) -> None:
    # Our model spans carry output.value "" while content capture is off (for Phoenix): nothing to judge.
    span = pipeline.span(_chat(**{semconv.OPENINFERENCE_OUTPUT_VALUE: ""}))
    assert semconv.VIOLATION_TYPES not in (span.attributes or {})
    assert (span.attributes or {})[semconv.CONTRACT] == "report"


def test_malformed_captured_content_runs_only_the_non_text_checks(pipeline: Pipeline) -> None:
    span = pipeline.span(_chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: "{not json"}), duration_s=6.0)
    assert tuple((span.attributes or {})[semconv.VIOLATION_TYPES]) == ("timeout",)  # type: ignore[arg-type]
    assert losses() == {}


def test_timeout_and_process_error_come_from_the_span_itself(pipeline: Pipeline) -> None:
    slow = pipeline.span(_chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages(GOOD)}), duration_s=7.5)
    assert tuple((slow.attributes or {})[semconv.VIOLATION_TYPES]) == ("timeout",)  # type: ignore[arg-type]
    assert next(e for e in slow.events).attributes[semconv.VIOLATION_DETAIL] == "took 7.5 s > deadline_s 5"  # type: ignore[index]
    refused = pipeline.span(
        _chat(**{semconv.ERROR_TYPE: "APIConnectionError"}),
        status=Status(StatusCode.ERROR, "Connection error."),
        exception=ConnectionRefusedError(111, "Connection refused"),
    )
    assert tuple((refused.attributes or {})[semconv.VIOLATION_TYPES]) == ("process_error",)  # type: ignore[arg-type]
    assert (refused.attributes or {})[semconv.FAILURE_CLASS] == "process_error"
    assert refused.status.description == "Connection error."  # the instrumentor's own status is kept
    timed_out = pipeline.span(
        _chat(**{semconv.ERROR_TYPE: "APITimeoutError"}), status=Status(StatusCode.ERROR)
    )
    assert tuple((timed_out.attributes or {})[semconv.VIOLATION_TYPES]) == ("timeout",)  # type: ignore[arg-type]
    bad_request = pipeline.span(_chat(**{semconv.ERROR_TYPE: "400"}), status=Status(StatusCode.ERROR))
    assert semconv.VIOLATION_TYPES not in (bad_request.attributes or {})


def test_scheduler_starvation_compares_enqueued_at_with_the_span_start(pipeline: Pipeline) -> None:
    start = time.time_ns()
    attributes = _chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages(GOOD)})
    starved = pipeline.span({**attributes, semconv.ENQUEUED_AT: start / 1e9 - 300}, start_ns=start)
    assert tuple((starved.attributes or {})[semconv.VIOLATION_TYPES]) == ("scheduler_starvation",)  # type: ignore[arg-type]
    assert (starved.attributes or {})[semconv.FAILURE_CLASS] == "scheduler_starvation"
    prompt = pipeline.span({**attributes, semconv.ENQUEUED_AT: start / 1e9 - 30}, start_ns=start)
    assert semconv.VIOLATION_TYPES not in (prompt.attributes or {})


def test_an_answer_to_a_concurrent_calls_prompt_is_caught(pipeline: Pipeline) -> None:
    start = time.time_ns()
    free = _chat(stage="free")
    pipeline.span(
        free,
        content=ModelContent(
            output_text="東京の人口は増え続けており、経済の中心として若い世代が集まっています。",
            prompt="東京の人口動態と経済への影響を説明してください。",
        ),
        start_ns=start,
        duration_s=2.0,
    )
    swapped = pipeline.span(
        free,
        content=ModelContent(
            output_text="東京の人口動態は一極集中が進み、経済への影響として地方の人口減少が加速しています。",
            prompt="光合成の二つの段階と葉緑体の役割を説明してください。",
        ),
        start_ns=start + 500_000_000,
    )
    assert tuple((swapped.attributes or {})[semconv.VIOLATION_TYPES]) == ("answer_to_other_question",)  # type: ignore[arg-type]


def test_the_buffer_consumer_is_released_at_shutdown() -> None:
    before = content_buffer()._consumers
    with _build() as pipeline:
        assert content_buffer()._consumers == before + 1
        pipeline.processor.shutdown()
        pipeline.processor.shutdown()
        assert content_buffer()._consumers == before


class _Recorder(WrappingProcessor):
    """A link below the checks: what it is handed is what every later link gets."""

    def __init__(self) -> None:
        super().__init__(())
        self.received: list[tuple[ReadableSpan, object]] = []

    def process(self, span: ReadableSpan, content: object) -> ReadableSpan:
        self.received.append((span, content))
        return span


def test_the_content_is_taken_once_and_handed_down_the_chain_with_the_checked_span() -> None:
    recorder = _Recorder()
    checks = checks_component([recorder], Settings(contracts=tallyspan.load_contracts(CONTRACTS)))
    provider = TracerProvider()
    provider.add_span_processor(checks)
    content = ModelContent(output_text="Here is the report.", prompt="the weekly report?")
    try:
        span = provider.get_tracer("test").start_span("chat m", attributes=_chat(stage="report"))
        content_buffer().put(span.get_span_context().span_id, content)
        span.end()
        [(forwarded, handed)] = recorder.received
        assert handed is content  # the very object the instrumentor put, not a re-read
        assert len(content_buffer()) == 0
        assert tuple((forwarded.attributes or {})[semconv.VIOLATION_TYPES]) == (  # type: ignore[arg-type]
            "missing_required",
            "not_japanese",
        )
    finally:
        provider.shutdown()
    assert checks._consuming is False  # type: ignore[attr-defined]
    assert recorder._consuming is False


def test_checks_component_without_contracts_forwards_untouched() -> None:
    without_contracts = checks_component([], Settings())
    try:
        assert isinstance(without_contracts, ChecksProcessor)
        assert without_contracts._contracts is None
    finally:
        without_contracts.shutdown()  # each one consumes the process-wide buffer until it is shut down
    assert not content_buffer().active


def test_instrument_wires_the_checks_into_the_chain_and_empties_the_buffer(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, make_instrumented: MakeInstrumented
) -> None:
    instrumentation = make_instrumented(contracts=CONTRACTS, store=None, instrumentors=[]).instrumentation
    assert "checks" in instrumentation.components
    tracer = tracer_provider.get_tracer("test")
    with tallyspan.stage("report"):
        span = tracer.start_span("chat m", attributes=_chat(stage="report"))
        content_buffer().put(span.get_span_context().span_id, ModelContent(output_text="Here is the report."))
        span.end()
    assert instrumentation.force_flush()
    [finished] = span_exporter.get_finished_spans()
    assert tuple((finished.attributes or {})[semconv.VIOLATION_TYPES]) == ("missing_required", "not_japanese")  # type: ignore[arg-type]
    assert len(content_buffer()) == 0


def test_the_same_output_counts_as_another_answer_only_within_one_stage() -> None:
    """Two stages may legitimately give the same text (a summary, then its review); one stage may not."""
    contracts: dict[str, Any] = {"contracts": {"summary": {}, "review": {}}}
    answer = "判定：合格。提出された週次報告は必要な項目をすべて含み、数値にも誤りはありませんでした。"
    with _build(contracts=contracts) as pipeline:
        pipeline.span(
            _chat(stage="summary"), content=ModelContent(answer, prompt="A社の週次報告を要約してください。")
        )
        other_stage = pipeline.span(
            _chat(stage="review"), content=ModelContent(answer, prompt="B社の週次報告を審査してください。")
        )
        same_stage = pipeline.span(
            _chat(stage="summary"), content=ModelContent(answer, prompt="C社の週次報告を要約してください。")
        )
    assert semconv.VIOLATION_TYPES not in (other_stage.attributes or {})
    assert tuple((same_stage.attributes or {})[semconv.VIOLATION_TYPES]) == ("answer_to_other_question",)  # type: ignore[arg-type]


# --- what is judged, and against which other calls ------------------------------------------------

_TOWER = "東京の人口動態と経済への影響を説明してください。"
_TOWER_ANSWER = "東京の人口動態は一極集中が進み、経済への影響として地方の人口減少が加速しています。"
_LEAF = "光合成の二つの段階と葉緑体の役割を説明してください。"


def test_a_call_that_ended_before_another_started_was_not_in_flight_with_it(pipeline: Pipeline) -> None:
    start = time.time_ns()
    free = _chat(stage="free")
    pipeline.span(
        free, content=ModelContent("人口は増えています。", prompt=_TOWER), start_ns=start, duration_s=1.0
    )
    later = pipeline.span(
        free,
        content=ModelContent(_TOWER_ANSWER, prompt=_LEAF),
        start_ns=start + 2_000_000_000,
        duration_s=1.0,
    )
    assert semconv.VIOLATION_TYPES not in (later.attributes or {})
    earlier = pipeline.span(
        free,
        content=ModelContent(_TOWER_ANSWER, prompt=_LEAF),
        start_ns=start - 3_000_000_000,
        duration_s=1.0,
    )
    assert semconv.VIOLATION_TYPES not in (earlier.attributes or {})  # ended before the first began


def test_a_call_without_a_prompt_is_no_other_question(pipeline: Pipeline) -> None:
    start = time.time_ns()
    free = _chat(stage="free")
    pipeline.span(free, content=ModelContent(_TOWER_ANSWER), start_ns=start, duration_s=2.0)
    pipeline.span(free, content=ModelContent(_TOWER_ANSWER), start_ns=start, duration_s=2.0)
    answered = pipeline.span(
        free, content=ModelContent(_TOWER_ANSWER, prompt=_TOWER), start_ns=start + 500_000_000
    )
    attributes = answered.attributes or {}
    assert semconv.CHECK_ERRORS not in attributes
    assert semconv.VIOLATION_TYPES not in attributes


@pytest.mark.parametrize(
    "step",
    [
        {"content": ModelContent("Here you go", (ToolCallContent("search", "{}", "c1"),))},
        {"content": ModelContent("Here you go"), "finish": "tool_calls"},
        {"content": ModelContent("Here you go"), "finish": ["tool_use"]},
        {"content": ModelContent("Here you go"), "abandoned": True},
    ],
)
def test_a_step_of_the_agent_loop_is_not_judged_on_its_text(pipeline: Pipeline, step: dict[str, Any]) -> None:
    extra: dict[str, Any] = {}
    if "finish" in step:
        extra[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = step["finish"]
    if "abandoned" in step:
        extra[semconv.STREAM_ABANDONED] = True
    span = pipeline.span(_chat(**extra), content=step["content"])
    attributes = span.attributes or {}
    assert semconv.VIOLATION_TYPES not in attributes
    assert semconv.CHECK_ERRORS not in attributes
    assert attributes[semconv.CONTRACT] == "report"


@pytest.mark.parametrize("finish", ["stop", ["stop", "length"], 3])
def test_a_turn_that_finished_otherwise_is_judged_on_its_text(pipeline: Pipeline, finish: Any) -> None:
    span = pipeline.span(
        _chat(**{semconv.GEN_AI_RESPONSE_FINISH_REASONS: finish}), content=ModelContent("Go ahead")
    )
    assert tuple((span.attributes or {})[semconv.VIOLATION_TYPES]) == (  # type: ignore[arg-type]
        "missing_required",
        "not_japanese",
        "too_short",
    )


def test_a_stage_no_contract_binds_to_is_named_once_with_the_contracts_there_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    typo = f"reprot-{uuid.uuid4().hex[:8]}"  # the warning is once per process: a stage no test used
    with _build() as pipeline, caplog.at_level(logging.WARNING, logger="tallyspan"):
        pipeline.span(_chat(stage=typo), content=ModelContent(GOOD))
        pipeline.span(_chat(stage=typo), content=ModelContent(GOOD))
    warnings = [record.getMessage() for record in caplog.records if typo in record.getMessage()]
    assert warnings == [
        f"tallyspan: model calls of stage '{typo}' are not checked: no contract binds to it "
        "(contracts: free, report). Check the spelling, or add a 'default:' contract."
    ]


def test_a_stage_unbound_in_an_empty_contract_set_says_there_are_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lonely = f"lonely-{uuid.uuid4().hex[:8]}"
    with (
        _build(contracts={"contracts": {}}) as pipeline,
        caplog.at_level(logging.WARNING, logger="tallyspan"),
    ):
        span = pipeline.span(_chat(stage=lonely), content=ModelContent(GOOD))
    assert dict(span.attributes or {}) == _chat(stage=lonely)
    assert [record.getMessage() for record in caplog.records if lonely in record.getMessage()] == [
        f"tallyspan: model calls of stage '{lonely}' are not checked: no contract binds to it "
        "(contracts: none). Check the spelling, or add a 'default:' contract."
    ]


def test_calls_that_only_touch_in_time_were_not_in_flight_together(pipeline: Pipeline) -> None:
    start = time.time_ns()
    free = _chat(stage="free")
    pipeline.span(
        free, content=ModelContent("人口は増えています。", prompt=_TOWER), start_ns=start, duration_s=1.0
    )
    right_after = pipeline.span(
        free,
        content=ModelContent(_TOWER_ANSWER, prompt=_LEAF),
        start_ns=start + 1_000_000_000,
        duration_s=1.0,
    )
    right_before = pipeline.span(
        free,
        content=ModelContent(_TOWER_ANSWER, prompt=_LEAF),
        start_ns=start - 1_000_000_000,
        duration_s=1.0,
    )
    assert semconv.VIOLATION_TYPES not in (right_after.attributes or {})
    assert semconv.VIOLATION_TYPES not in (right_before.attributes or {})


def test_reasoning_from_its_own_field_repeated_in_the_answer_is_a_leak(pipeline: Pipeline) -> None:
    reasoning = "The totals match the ledger and the weekly report is complete"
    span = pipeline.span(
        _chat(stage="free"),
        content=ModelContent(f"Answer: {reasoning}, so it can be sent.", reasoning_text=reasoning),
    )
    assert [dict(event.attributes or {}) for event in span.events] == [
        {
            semconv.VIOLATION_TYPE: "reasoning_leaked",
            semconv.VIOLATION_FAILURE_CLASS: "contract_violation",
            semconv.VIOLATION_DETAIL: "the provider's reasoning is repeated in the output",
        }
    ]
    assert [event.timestamp for event in span.events] == [span.end_time]


def test_the_deadline_is_exceeded_by_one_nanosecond_not_reached_exactly(pipeline: Pipeline) -> None:
    start = time.time_ns()
    attributes = _chat(**{semconv.GEN_AI_OUTPUT_MESSAGES: _output_messages(GOOD)})
    on_time = pipeline.span(attributes, start_ns=start, duration_s=5.0)
    assert semconv.VIOLATION_TYPES not in (on_time.attributes or {})
    tracer = pipeline.provider.get_tracer("test")
    late = tracer.start_span("chat m", attributes=attributes, start_time=start)
    late.end(end_time=start + 5_000_000_001)
    finished = pipeline.exporter.get_finished_spans()[-1]
    assert tuple((finished.attributes or {})[semconv.VIOLATION_TYPES]) == ("timeout",)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error_type", "status", "exception", "expected"),
    [
        (None, "", ("ConnectionResetError", "peer went away"), ("process_error", "ConnectionResetError")),
        (None, "", ("RuntimeError", "connection refused by the server"), ("process_error", "RuntimeError")),
        (None, "Bad Gateway", None, ("process_error", "Bad Gateway")),
        ("Oops", "Service Unavailable", None, ("process_error", "Oops | Service Unavailable")),
        (None, "", ("", "read timed out"), ("timeout", "error")),
        (None, "", None, None),
    ],
)
def test_the_spans_error_is_read_from_its_type_exception_events_and_status(
    pipeline: Pipeline,
    error_type: str | None,
    status: str,
    exception: tuple[str, str] | None,
    expected: tuple[str, str] | None,
) -> None:
    extra = {semconv.ERROR_TYPE: error_type} if error_type is not None else {}
    tracer = pipeline.provider.get_tracer("test")
    span = tracer.start_span("chat m", attributes=_chat(**extra))
    span.add_event("retry", {semconv.EXCEPTION_TYPE: "TimeoutError", semconv.EXCEPTION_MESSAGE: "earlier"})
    if exception is not None:
        span.add_event(
            semconv.EVENT_EXCEPTION,
            {semconv.EXCEPTION_TYPE: exception[0], semconv.EXCEPTION_MESSAGE: exception[1]},
        )
    span.set_status(Status(StatusCode.ERROR, status or None))
    content_buffer().put(span.get_span_context().span_id, ModelContent(GOOD))
    span.end()
    finished = pipeline.exporter.get_finished_spans()[-1]
    violations = [
        dict(event.attributes or {}) for event in finished.events if event.name == semconv.EVENT_VIOLATION
    ]
    if expected is None:
        assert violations == []  # an error of no known kind: and no deliverable to judge either
        return
    kind, name = expected
    detail = (
        f"the inference server failed ({name})"
        if kind == "process_error"
        else f"the call failed with a timeout ({name})"
    )
    assert [(v[semconv.VIOLATION_TYPE], v[semconv.VIOLATION_DETAIL]) for v in violations] == [(kind, detail)]


@pytest.mark.parametrize("stage", [5, ""])
def test_a_stage_that_is_not_a_name_is_no_stage(stage: Any, caplog: pytest.LogCaptureFixture) -> None:
    with_default = {"contracts": {"report": {}}, "default": {"min_chars": 500}}
    with _build(contracts=with_default) as pipeline:
        span = pipeline.span(_chat(stage=stage), content=ModelContent(GOOD))
    assert (span.attributes or {})[semconv.CONTRACT] == "default"
    with _build(contracts={"contracts": {"report": {}}}) as pipeline, caplog.at_level(logging.WARNING):
        unbound = pipeline.span(_chat(stage=stage), content=ModelContent(GOOD))
    assert semconv.CONTRACT not in (unbound.attributes or {})
    assert not [
        record for record in caplog.records if "not checked" in record.getMessage()
    ]  # no stage: no typo


@pytest.mark.parametrize(
    ("exception", "expected"),
    [
        ({semconv.EXCEPTION_MESSAGE: "read timed out"}, "the call failed with a timeout (error)"),
        (
            {semconv.EXCEPTION_TYPE: "ConnectionResetError"},
            "the inference server failed (ConnectionResetError)",
        ),
    ],
)
def test_an_exception_event_missing_its_type_or_message_still_tells_the_error(
    pipeline: Pipeline, exception: dict[str, str], expected: str
) -> None:
    span = pipeline.provider.get_tracer("test").start_span("chat m", attributes=_chat())
    span.add_event(semconv.EVENT_EXCEPTION, exception)
    span.set_status(Status(StatusCode.ERROR))
    span.end()
    finished = pipeline.exporter.get_finished_spans()[-1]
    (event,) = [e for e in finished.events if e.name == semconv.EVENT_VIOLATION]
    assert (event.attributes or {})[semconv.VIOLATION_DETAIL] == expected


def test_the_model_that_answered_binds_before_the_model_asked_for() -> None:
    contracts = {
        "contracts": {"strict": {"min_chars": 100}},
        "match": [{"model": "qwen*", "contract": "strict"}],
    }
    with _build(contracts=contracts) as pipeline:
        routed = pipeline.span(
            _chat(
                stage=None, **{semconv.GEN_AI_REQUEST_MODEL: "auto", semconv.GEN_AI_RESPONSE_MODEL: "qwen3"}
            ),
            content=ModelContent("短い"),
        )
        asked = pipeline.span(
            _chat(
                stage=None, **{semconv.GEN_AI_REQUEST_MODEL: "qwen3", semconv.GEN_AI_RESPONSE_MODEL: "gpt"}
            ),
            content=ModelContent("短い"),
        )
    assert (routed.attributes or {})[semconv.CONTRACT] == "strict"
    assert semconv.CONTRACT not in (asked.attributes or {})


def test_tool_content_on_a_model_span_is_no_output_to_judge(pipeline: Pipeline) -> None:
    from tallyspan._content import ToolContent

    span = pipeline.span(_chat(), content=ToolContent(arguments={"q": "x"}))  # type: ignore[arg-type]
    attributes = span.attributes or {}
    assert attributes[semconv.CONTRACT] == "report"
    assert semconv.CHECK_ERRORS not in attributes
    assert semconv.VIOLATION_TYPES not in attributes


def test_checks_that_fail_as_a_whole_are_recorded_on_the_span_and_counted(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    """The last line of defence: content an instrumentor got wrong (a list, not text) breaks the checks."""
    with caplog.at_level(logging.DEBUG, logger="tallyspan_processors._checks"):
        span = pipeline.span(_chat(), content=ModelContent(["text"], prompt="q"))  # type: ignore[arg-type]
    attributes = dict(span.attributes or {})
    assert attributes[semconv.CHECK_ERRORS] == ["checks"]
    assert attributes[semconv.CONTRACT] == "report"
    assert semconv.VIOLATION_TYPES not in attributes
    assert tallyspan.stats()["errors.checks.engine"] == 1
    debug = [
        r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name.endswith("_checks")
    ]
    assert debug == ["tallyspan's checks failed on a span"]


def test_the_checks_component_takes_the_status_and_evaluation_settings() -> None:
    exporter = InMemorySpanExporter()
    settings = Settings(
        contracts=tallyspan.load_contracts(CONTRACTS), mark_error_status=False, evaluation_events=True
    )
    provider = TracerProvider()
    provider.add_span_processor(checks_component([SimpleSpanProcessor(exporter)], settings))
    span = provider.get_tracer("test").start_span("chat m", attributes=_chat())
    content_buffer().put(span.get_span_context().span_id, ModelContent("Here you go"))
    span.end()
    provider.shutdown()
    (finished,) = exporter.get_finished_spans()
    assert finished.status.status_code is StatusCode.UNSET
    assert semconv.EVENT_GEN_AI_EVALUATION_RESULT in [event.name for event in finished.events]


def test_only_the_most_recent_calls_are_remembered() -> None:
    with _build(recent_calls=1) as pipeline:
        start = time.time_ns()
        free = _chat(stage="free")
        pipeline.span(
            free, content=ModelContent("人口は増えています。", prompt=_TOWER), start_ns=start, duration_s=3
        )
        pipeline.span(free, content=ModelContent("別の答えです。", prompt="別の質問です。"), start_ns=start)
        swapped = pipeline.span(
            free, content=ModelContent(_TOWER_ANSWER, prompt=_LEAF), start_ns=start + 500_000_000
        )
    assert semconv.VIOLATION_TYPES not in (swapped.attributes or {})  # the tower call was forgotten
