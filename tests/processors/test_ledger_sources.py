"""Where the ledger's entries come from, entry by entry: real spans through a LedgerProcessor (content
captured, so nothing is redacted), read back from a recording sink with every field of every entry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from tests.recording import RecordingLedgerSink

from tallyspan import semconv
from tallyspan._content import ModelContent, ToolCallContent, ToolContent, content_buffer
from tallyspan.ledger import LedgerEntry, LogToolSpec
from tallyspan_processors import LedgerProcessor


class _Harness:
    """A provider whose only processor is a LedgerProcessor with content captured (no redaction)."""

    def __init__(self, spec: LogToolSpec | None = None) -> None:
        self.exporter = InMemorySpanExporter()
        self.sink = RecordingLedgerSink()
        self.processor = LedgerProcessor(
            [SimpleSpanProcessor(self.exporter)], sinks=[self.sink], spec=spec, capture_content=True
        )
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("test")

    def run(self) -> Any:
        return self.tracer.start_as_current_span(
            "invoke_agent agent", attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT}
        )

    def tool_span(
        self,
        span_name: str,
        attributes: dict[str, Any] | None = None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        content: ToolContent | None = None,
        status: StatusCode = StatusCode.UNSET,
    ) -> ReadableSpan:
        with self.tracer.start_as_current_span(
            span_name,
            kind=kind,
            attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL, **(attributes or {})},
        ) as span:
            if content is not None:
                content_buffer().put(span.get_span_context().span_id, content)
            if status is not StatusCode.UNSET:
                span.set_status(Status(status))
        return span  # type: ignore[return-value]

    def chat(
        self, content: ModelContent | ToolContent, operation: str = semconv.OPERATION_CHAT
    ) -> ReadableSpan:
        with self.tracer.start_as_current_span(
            f"{operation} m", attributes={semconv.GEN_AI_OPERATION_NAME: operation}
        ) as span:
            content_buffer().put(span.get_span_context().span_id, content)
        return span  # type: ignore[return-value]

    def rows(self) -> list[tuple[Any, ...]]:
        """Each entry as (side, call id, tool name, outcome, summary, malformed)."""
        return [
            (e.side, e.call_id, e.tool_name, e.outcome, e.summary, e.malformed) for e in self.sink.entries
        ]

    def entry_of(self, span: ReadableSpan) -> LedgerEntry:
        (entry,) = [e for e in self.sink.entries if e.span_id == _span_id(span)]
        return entry


@pytest.fixture
def harness() -> Iterator[_Harness]:
    made = _Harness()
    yield made
    made.provider.shutdown()


def _span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def test_the_tool_name_attribute_wins_over_the_span_name(harness: _Harness) -> None:
    with harness.run():
        harness.tool_span("execute_tool lookup", {semconv.GEN_AI_TOOL_NAME: "search"})
    assert harness.rows() == [("observed", None, "search", "succeeded", "", None)]


def test_an_empty_tool_name_attribute_falls_back_to_the_span_name(harness: _Harness) -> None:
    with harness.run():
        harness.tool_span("execute_tool fetch", {semconv.GEN_AI_TOOL_NAME: ""})
        harness.tool_span("execute_tool book", {semconv.GEN_AI_TOOL_NAME: 7})
        harness.tool_span("lookup")  # another instrumentation's name, without the prefix: kept whole
    assert [row[2] for row in harness.rows()] == ["fetch", "book", "lookup"]


def test_call_ids_are_text_and_an_empty_one_is_none(harness: _Harness) -> None:
    with harness.run():
        harness.tool_span("execute_tool a", {semconv.GEN_AI_TOOL_CALL_ID: ""})
        harness.tool_span("execute_tool b", {semconv.GEN_AI_TOOL_CALL_ID: 42})
        harness.tool_span("execute_tool c", {semconv.GEN_AI_TOOL_CALL_ID: "c3"})
    assert [row[1] for row in harness.rows()] == [None, "42", "c3"]


def test_the_outcome_attribute_is_normalised_else_the_status_decides(harness: _Harness) -> None:
    with harness.run():
        harness.tool_span("execute_tool a", {semconv.TOOL_OUTCOME: "denied"}, status=StatusCode.ERROR)
        harness.tool_span("execute_tool b", status=StatusCode.ERROR)
        harness.tool_span("execute_tool c", status=StatusCode.OK)
        harness.tool_span("execute_tool d", {semconv.TOOL_OUTCOME: "nonsense"})
    assert [row[3] for row in harness.rows()] == ["rejected", "failed", "succeeded", "succeeded"]


def test_an_observed_entry_carries_its_span_and_end_time(harness: _Harness) -> None:
    with harness.run():
        tool = harness.tool_span("execute_tool a", {semconv.GEN_AI_TOOL_CALL_ID: "c1"})
    entry = harness.entry_of(tool)
    assert (entry.side, entry.time_unix_nano) == ("observed", tool.end_time)


def test_a_server_side_tool_span_enters_nothing_but_its_claim_events_count(harness: _Harness) -> None:
    """An MCP server handling tools/call: the caller's span already counts the call."""
    with harness.run():
        harness.tool_span("execute_tool search", {semconv.GEN_AI_TOOL_CALL_ID: "c1"}, kind=SpanKind.SERVER)
        with harness.tracer.start_as_current_span("tools/call", kind=SpanKind.SERVER) as server:
            server.add_event(
                semconv.EVENT_LEDGER_CLAIM,
                {semconv.LEDGER_TOOL_NAME: "search", semconv.LEDGER_OUTCOME: "succeeded"},
            )
    assert harness.rows() == [("claimed", None, "search", "succeeded", "", None)]


def test_a_log_tool_span_without_arguments_is_a_claim_that_says_so(harness: _Harness) -> None:
    with harness.run():
        log = harness.tool_span("execute_tool log_action", {semconv.GEN_AI_TOOL_CALL_ID: "L1"})
    entry = harness.entry_of(log)
    assert (entry.side, entry.call_id, entry.tool_name, entry.outcome, entry.malformed) == (
        "claimed",
        None,
        None,
        None,
        "log call arguments not available",
    )
    assert entry.time_unix_nano == log.end_time


def test_a_log_tool_span_with_arguments_is_the_claim_they_make(harness: _Harness) -> None:
    arguments = {"call_id": "c1", "tool_name": "search", "claimed_outcome": "error", "summary": "it broke"}
    with harness.run():
        log = harness.tool_span("execute_tool log_action", content=ToolContent(arguments=arguments))
    assert harness.rows() == [("claimed", "c1", "search", "failed", "it broke", None)]
    assert harness.entry_of(log).time_unix_nano == log.end_time


def test_a_requested_log_call_without_arguments_is_one_claim_with_the_executed_call(
    harness: _Harness,
) -> None:
    """The model asked for the log call with no arguments, then the harness ran it (same id): one claim."""
    with harness.run():
        chat = harness.chat(ModelContent("", (ToolCallContent("log_action", "", "L1"),)))
        harness.tool_span("execute_tool log_action", {semconv.GEN_AI_TOOL_CALL_ID: "L1"})
    assert harness.rows() == [("claimed", None, None, None, "", "no arguments")]
    entry = harness.entry_of(chat)
    assert entry.time_unix_nano == chat.end_time


def test_a_requested_log_call_is_a_claim_of_the_model_span(harness: _Harness) -> None:
    arguments = json.dumps({"call_id": "c9", "tool_name": "book", "claimed_outcome": "ok", "summary": "done"})
    with harness.run():
        chat = harness.chat(
            ModelContent(
                "", (ToolCallContent("search", "{}", "x"), ToolCallContent("log_action", arguments, "L9"))
            )
        )
    assert harness.rows() == [("claimed", "c9", "book", "succeeded", "done", None)]
    assert harness.entry_of(chat).time_unix_nano == chat.end_time


def test_model_spans_with_tool_content_or_other_operations_enter_nothing(harness: _Harness) -> None:
    call = ToolCallContent("log_action", json.dumps({"tool_name": "a", "claimed_outcome": "ok"}), "L1")
    with harness.run():
        harness.chat(ToolContent(arguments={"tool_name": "a", "claimed_outcome": "ok"}))
        harness.chat(ModelContent("", (call,)), operation="embeddings")
    assert harness.rows() == []


def test_a_log_tool_of_its_own_names_is_read_with_them() -> None:
    spec = LogToolSpec(
        tool="note", call_id=("ref",), tool_name=("what",), outcome=("result",), summary=("why",)
    )
    custom = _Harness(spec)
    arguments = json.dumps({"ref": "c1", "what": "search", "result": "ok", "why": "found"})
    with custom.run():
        custom.chat(ModelContent("", (ToolCallContent("note", arguments, "N1"),)))
        custom.tool_span(
            "execute_tool note", content=ToolContent(arguments={"what": "book", "result": "error"})
        )
    custom.provider.shutdown()
    assert custom.rows() == [
        ("claimed", "c1", "search", "succeeded", "found", None),
        ("claimed", None, "book", "failed", "", None),
    ]


def test_claim_events_are_claims_at_their_own_time_on_their_span(harness: _Harness) -> None:
    with harness.run(), harness.tracer.start_as_current_span("step") as step:
        step.add_event(
            semconv.EVENT_LEDGER_CLAIM,
            {
                semconv.LEDGER_CALL_ID: "c1",
                semconv.LEDGER_TOOL_NAME: "search",
                semconv.LEDGER_OUTCOME: "failed",
                semconv.LEDGER_SUMMARY: "no hits",
                "call_id": "not this one",
            },
            timestamp=1234,
        )
        step.add_event(semconv.EVENT_LEDGER_CLAIM, {}, timestamp=5678)
        step.add_event("something else", {semconv.LEDGER_TOOL_NAME: "x"})
    assert harness.rows() == [
        ("claimed", "c1", "search", "failed", "no hits", None),
        ("claimed", None, None, None, "", "no tool name"),
    ]
    step_id = step.get_span_context().span_id
    assert [(e.span_id, e.time_unix_nano) for e in harness.sink.entries] == [(step_id, 1234), (step_id, 5678)]


def test_a_claim_event_on_a_model_span_comes_before_its_requested_log_calls_in_time(
    harness: _Harness,
) -> None:
    arguments = json.dumps({"call_id": "c1", "tool_name": "search", "claimed_outcome": "ok"})
    with (
        harness.run(),
        harness.tracer.start_as_current_span(
            "chat m", attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT}
        ) as chat,
    ):
        chat.add_event(
            semconv.EVENT_LEDGER_CLAIM,
            {semconv.LEDGER_TOOL_NAME: "plan", semconv.LEDGER_OUTCOME: "ok"},
            timestamp=1,
        )
        content_buffer().put(
            chat.get_span_context().span_id,
            ModelContent("", (ToolCallContent("log_action", arguments, "L1"),)),
        )
    assert [(row[0], row[2]) for row in harness.rows()] == [("claimed", "plan"), ("claimed", "search")]
    assert {e.span_id for e in harness.sink.entries} == {chat.get_span_context().span_id}


def test_entries_of_a_span_outside_any_run_go_to_its_own_root(harness: _Harness) -> None:
    tool = harness.tool_span("execute_tool lone", {semconv.GEN_AI_TOOL_CALL_ID: "c1"})
    (record,) = harness.sink.records
    assert record.run_span_id == _span_id(tool)
    assert harness.rows() == [("observed", "c1", "lone", "succeeded", "", None)]
    assert trace.get_current_span() is trace.INVALID_SPAN
