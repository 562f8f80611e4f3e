"""Arize Phoenix end to end: an instrumented agent exports OTLP to a real Phoenix, the spans come back
through Phoenix's REST and GraphQL APIs with their violations, events and ledger balance intact, and
Phoenix's own span filter finds them by violation type."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.e2e.phoenix_server import PROJECT_RESOURCE_ATTRIBUTE, Phoenix, filter_path
from tests.e2e.violating_agent import (
    CHAT_SPAN,
    EXPECTED_DISCREPANCIES,
    EXPECTED_VIOLATIONS,
    REPORT_STAGE,
    RUN_SPAN,
    SINGLE_ANSWER_RUNS,
    SUMMARY_STAGE,
    TOOL_SPAN,
    run_single_answer_agents,
    run_weekly_agent,
)

from tallyspan import FailureClass, ViolationType, semconv

_SPANS_PER_RUN = 5  # three chats, one tool call, the run

_SPAN_FILTER_QUERY = """
query ($project: ID!, $condition: String) {
  node(id: $project) {
    ... on Project {
      spans(first: 100, filterCondition: $condition) { edges { node { name context { spanId } } } }
    }
  }
}
"""


@pytest.fixture(scope="module")
def project(phoenix: Phoenix) -> str:
    """One agent run exported to its own Phoenix project; returns the project name."""
    name = f"tallyspan-e2e-{uuid.uuid4().hex[:8]}"
    exporter = OTLPSpanExporter(endpoint=phoenix.traces_endpoint, timeout=30)
    run_weekly_agent([SimpleSpanProcessor(exporter)], resource_attributes={PROJECT_RESOURCE_ATTRIBUTE: name})
    phoenix.wait_for_spans(name, _SPANS_PER_RUN)
    return name


_ROOT_SPANS_QUERY = """
query ($project: ID!) {
  node(id: $project) {
    ... on Project {
      spans(first: 100, filterCondition: "parent_id is None") {
        edges { node { name statusCode statusMessage attributes } }
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def single_answer_project(phoenix: Phoenix) -> str:
    """The English-answer run and the refusing run, each its own trace, in a Phoenix project of their own."""
    name = f"tallyspan-e2e-roots-{uuid.uuid4().hex[:8]}"
    exporter = OTLPSpanExporter(endpoint=phoenix.traces_endpoint, timeout=30)
    run_single_answer_agents(
        [SimpleSpanProcessor(exporter)], resource_attributes={PROJECT_RESOURCE_ATTRIBUTE: name}
    )
    phoenix.wait_for_spans(name, 2 * len(SINGLE_ANSWER_RUNS))
    return name


def test_runs_whose_model_failed_are_error_in_phoenixs_root_span_list(
    phoenix: Phoenix, single_answer_project: str
) -> None:
    """Phoenix's default view lists root spans: the failing runs must be red there, with their types."""
    (project_id,) = [
        p["id"] for p in phoenix.get("/v1/projects")["data"] if p["name"] == single_answer_project
    ]
    data = phoenix.graphql(_ROOT_SPANS_QUERY, project=project_id)
    roots = {edge["node"]["name"]: edge["node"] for edge in data["node"]["spans"]["edges"]}
    assert sorted(roots) == sorted(f"invoke_agent {agent}" for agent, _, _ in SINGLE_ANSWER_RUNS)
    for agent, _, types in SINGLE_ANSWER_RUNS:
        root = roots[f"invoke_agent {agent}"]
        assert root["statusCode"] == "ERROR"
        assert root["statusMessage"] == f"{', '.join(types)} in 1 of 1 call"  # what failed, first
        attributes = json.loads(root["attributes"])
        tallyspan_attributes = attributes["tallyspan"]
        assert tallyspan_attributes["run"]["violation_types"] == list(types)
        assert tallyspan_attributes["run"]["violation_count"] == 1
        assert tallyspan_attributes["violated"] is True
        assert tallyspan_attributes["ledger"]["balanced"] is True  # red for the answer, not the books


def _by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [span for span in spans if span["name"] == name]


def _filtered(phoenix: Phoenix, project: str, condition: str) -> list[str]:
    """Span ids Phoenix's own span filter (the UI's filter box) selects."""
    (project_id,) = [p["id"] for p in phoenix.get("/v1/projects")["data"] if p["name"] == project]
    data = phoenix.graphql(_SPAN_FILTER_QUERY, project=project_id, condition=condition)
    return sorted(edge["node"]["context"]["spanId"] for edge in data["node"]["spans"]["edges"])


def test_every_span_of_the_run_arrives_in_phoenix(phoenix: Phoenix, project: str) -> None:
    spans = phoenix.spans(project)
    assert sorted(span["name"] for span in spans) == sorted([CHAT_SPAN] * 3 + [TOOL_SPAN, RUN_SPAN])
    (run,) = _by_name(spans, RUN_SPAN)
    assert {span["parent_id"] for span in spans if span["name"] != RUN_SPAN} == {run["context"]["span_id"]}


def test_violation_attributes_arrive_intact(phoenix: Phoenix, project: str) -> None:
    chats = _by_name(phoenix.spans(project), CHAT_SPAN)
    violating = [chat for chat in chats if semconv.VIOLATED in chat["attributes"]]
    assert len(violating) == len(EXPECTED_VIOLATIONS)
    got = set()
    for chat in violating:
        attributes = chat["attributes"]
        assert attributes[semconv.VIOLATED] is True
        assert attributes[semconv.STAGE] == REPORT_STAGE
        assert isinstance(attributes[semconv.VIOLATION_TYPES], list)
        assert attributes[semconv.VIOLATION_COUNT] == len(attributes[semconv.VIOLATION_TYPES])
        assert chat["status_code"] == "ERROR"
        got.add((tuple(sorted(attributes[semconv.VIOLATION_TYPES])), attributes[semconv.FAILURE_CLASS]))
    assert got == {(expected.violation_types, expected.failure_class) for expected in EXPECTED_VIOLATIONS}
    (clean,) = [chat for chat in chats if semconv.VIOLATED not in chat["attributes"]]
    assert clean["attributes"][semconv.STAGE] == SUMMARY_STAGE
    assert semconv.VIOLATION_TYPES not in clean["attributes"]
    assert clean["status_code"] == "UNSET"


def test_violation_events_arrive_with_type_class_and_a_content_free_detail(
    phoenix: Phoenix, project: str
) -> None:
    for chat in _by_name(phoenix.spans(project), CHAT_SPAN):
        events = [event for event in chat["events"] if event["name"] == semconv.EVENT_VIOLATION]
        types = chat["attributes"].get(semconv.VIOLATION_TYPES, [])
        assert sorted(event["attributes"][semconv.VIOLATION_TYPE] for event in events) == sorted(types)
        for event in events:
            attributes = event["attributes"]
            expected_class = {
                ViolationType.REFUSAL.value: FailureClass.CONTRACT_VIOLATION.value,
                ViolationType.NOT_JAPANESE.value: FailureClass.LANGUAGE_CORRUPTION.value,
            }[attributes[semconv.VIOLATION_TYPE]]
            assert attributes[semconv.VIOLATION_FAILURE_CLASS] == expected_class
            detail = attributes[semconv.VIOLATION_DETAIL]
            assert isinstance(detail, str)
            assert detail
            assert "sorry" not in detail  # the model's words stay out of the detail


def test_ledger_balance_arrives_on_the_run_span(phoenix: Phoenix, project: str) -> None:
    (run,) = _by_name(phoenix.spans(project), RUN_SPAN)
    attributes = run["attributes"]
    assert attributes[semconv.LEDGER_BALANCED] is False
    assert sorted(attributes[semconv.LEDGER_DISCREPANCY_TYPES]) == sorted(EXPECTED_DISCREPANCIES)
    assert attributes[semconv.LEDGER_OBSERVED_COUNT] == 1
    assert attributes[semconv.LEDGER_CLAIMED_COUNT] == 0
    assert attributes[semconv.RUN_VIOLATION_COUNT] == 3  # not_japanese twice, refusal once, below it
    assert sorted(attributes[semconv.RUN_VIOLATION_TYPES]) == ["not_japanese", "refusal"]
    assert run["status_code"] == "ERROR"
    # What failed comes first: Phoenix's lists cut a status message after a few words.
    assert run["status_message"] == (
        "ledger unbalanced: ledger_missing, unlogged_call send_mail; not_japanese, refusal in 2 of 3 calls"
    )
    discrepancies = [event for event in run["events"] if event["name"] == semconv.EVENT_LEDGER_DISCREPANCY]
    assert sorted(e["attributes"][semconv.LEDGER_DISCREPANCY_TYPE] for e in discrepancies) == sorted(
        EXPECTED_DISCREPANCIES
    )


def test_message_content_stays_out_of_phoenix_by_default(phoenix: Phoenix, project: str) -> None:
    for span in phoenix.spans(project):
        for name in (
            semconv.GEN_AI_INPUT_MESSAGES,
            semconv.GEN_AI_OUTPUT_MESSAGES,
            semconv.GEN_AI_TOOL_CALL_ARGUMENTS,
        ):
            assert name not in span["attributes"], (span["name"], name)


@pytest.mark.parametrize(
    ("violation_type", "expected_count"),
    [
        (ViolationType.REFUSAL.value, 1),
        (ViolationType.NOT_JAPANESE.value, 2),
        (ViolationType.TOO_LONG.value, 0),
    ],
)
def test_phoenix_span_filter_finds_spans_by_violation_type(
    phoenix: Phoenix, project: str, violation_type: str, expected_count: int
) -> None:
    condition = f"'{violation_type}' in {filter_path(semconv.VIOLATION_TYPES)}"
    selected = _filtered(phoenix, project, condition)
    expected = sorted(
        span["context"]["span_id"]
        for span in phoenix.spans(project)
        if violation_type in span["attributes"].get(semconv.VIOLATION_TYPES, [])
    )
    assert len(selected) == expected_count
    assert selected == expected


def test_phoenix_filters_on_the_scalar_attributes(phoenix: Phoenix, project: str) -> None:
    violated = phoenix.spans(project, attribute=f"{semconv.VIOLATED}:true")
    assert sorted(span["name"] for span in violated) == [CHAT_SPAN, CHAT_SPAN, RUN_SPAN]  # the run rolls up
    language = phoenix.spans(
        project, attribute=f"{semconv.FAILURE_CLASS}:{FailureClass.LANGUAGE_CORRUPTION.value}"
    )
    assert [sorted(span["attributes"][semconv.VIOLATION_TYPES]) for span in language] == [
        [ViolationType.NOT_JAPANESE.value]
    ]
    unbalanced = phoenix.spans(project, attribute=f"{semconv.LEDGER_BALANCED}:false")
    assert [span["name"] for span in unbalanced] == [RUN_SPAN]
    in_ui = _filtered(phoenix, project, f"{filter_path(semconv.VIOLATED)} == True")
    assert in_ui == sorted(span["context"]["span_id"] for span in violated)


def _expected_ids(phoenix: Phoenix, project: str, attribute: str, value: Any) -> list[str]:
    return sorted(
        span["context"]["span_id"]
        for span in phoenix.spans(project)
        if span["attributes"].get(attribute) == value
    )


def test_every_filter_of_the_backends_guide_selects_what_it_says(phoenix: Phoenix, project: str) -> None:
    """The Phoenix filter table in README.md, condition by condition, against Phoenix's own filter."""
    language = FailureClass.LANGUAGE_CORRUPTION.value
    violated_in_stage = _expected_ids(phoenix, project, semconv.STAGE, REPORT_STAGE)
    assert _filtered(
        phoenix, project, f"{filter_path(semconv.FAILURE_CLASS)} == '{language}'"
    ) == _expected_ids(phoenix, project, semconv.FAILURE_CLASS, language)
    stage_errors = f"{filter_path(semconv.STAGE)} == '{REPORT_STAGE}' and status_code == 'ERROR'"
    assert _filtered(phoenix, project, stage_errors) == violated_in_stage
    assert len(violated_in_stage) == len(EXPECTED_VIOLATIONS)
    unbalanced = _filtered(phoenix, project, f"{filter_path(semconv.LEDGER_BALANCED)} == False")
    assert unbalanced == _expected_ids(phoenix, project, semconv.LEDGER_BALANCED, False)
    assert len(unbalanced) == 1
