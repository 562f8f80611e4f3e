"""LedgerProcessor: per-run books from tool spans, model-requested log calls and claim() events,
reconciled when the run span ends, forwarded on the run span and written to the ledger sinks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from tests.conftest import MakeInstrumented
from tests.recording import RecordingLedgerSink

import tallyspan
from tallyspan import semconv
from tallyspan._content import ModelContent, ToolCallContent, ToolContent, content_buffer
from tallyspan.ledger import LedgerRecord
from tallyspan.plugin.exporters import is_run_span
from tallyspan_processors import LedgerProcessor


class _RaisingSink(RecordingLedgerSink):
    def export_reconciliation(self, record: LedgerRecord) -> bool:
        raise RuntimeError("a sink that breaks its promise")


class _Books:
    """A private provider whose only processor is a LedgerProcessor (synchronous: no worker)."""

    def __init__(self, **options: Any) -> None:
        self.exporter = InMemorySpanExporter()
        self.sink = RecordingLedgerSink()
        options.setdefault("sinks", [self.sink])
        self.processor = LedgerProcessor([SimpleSpanProcessor(self.exporter)], **options)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("test")

    def run(self, name: str = "agent") -> Any:
        return self.tracer.start_as_current_span(
            f"invoke_agent {name}",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT,
                semconv.GEN_AI_AGENT_NAME: name,
            },
        )

    def tool(
        self, name: str, call_id: str | None, outcome: str | None = "succeeded", arguments: Any = None
    ) -> None:
        attributes: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: "execute_tool",
            semconv.GEN_AI_TOOL_NAME: name,
        }
        if call_id is not None:
            attributes[semconv.GEN_AI_TOOL_CALL_ID] = call_id
        if outcome is not None:
            attributes[semconv.TOOL_OUTCOME] = outcome
        with self.tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
            if arguments is not None:
                content_buffer().put(span.get_span_context().span_id, ToolContent(arguments=arguments))

    def log(self, call_id: str, tool_name: str, outcome: str, log_call_id: str | None = None) -> None:
        arguments = {"call_id": call_id, "tool_name": tool_name, "claimed_outcome": outcome, "summary": "s"}
        self.tool("log_action", log_call_id or f"L-{call_id}", arguments=arguments)

    def chat(
        self, *tool_calls: ToolCallContent, attributes: dict[str, Any] | None = None, put: bool = True
    ) -> None:
        with self.tracer.start_as_current_span(
            "chat m", attributes={semconv.GEN_AI_OPERATION_NAME: "chat", **(attributes or {})}
        ) as span:
            if put:
                content_buffer().put(span.get_span_context().span_id, ModelContent("", tuple(tool_calls)))

    def finished(self, name: str) -> ReadableSpan:
        (span,) = [s for s in self.exporter.get_finished_spans() if s.name == name]
        return span

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def books() -> Iterator[_Books]:
    made = _Books()
    yield made
    made.close()


def _log_call(call_id: str, tool_name: str, outcome: str, log_call_id: str) -> ToolCallContent:
    arguments = json.dumps({"call_id": call_id, "tool_name": tool_name, "claimed_outcome": outcome})
    return ToolCallContent("log_action", arguments, log_call_id)


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(event.attributes or {}) for event in span.events if event.name == name]


def test_balanced_run_gets_the_balance_and_both_columns_as_events(books: _Books) -> None:
    with books.run():
        books.tool("search", "c1")
        books.log("c1", "search", "succeeded")
        books.tool("book", "c2", "failed")
        books.log("c2", "book", "failed")
    run = books.finished("invoke_agent agent")
    attributes = _attrs(run)
    assert attributes[semconv.LEDGER_BALANCED] is True
    assert attributes[semconv.LEDGER_PROTOCOL_OK] is True
    assert attributes[semconv.LEDGER_OBSERVED_COUNT] == 2
    assert attributes[semconv.LEDGER_CLAIMED_COUNT] == 2
    assert attributes[semconv.LEDGER_DISCREPANCY_COUNT] == 0
    assert semconv.LEDGER_DISCREPANCY_TYPES not in attributes  # absent when clean
    assert run.status.status_code is StatusCode.UNSET
    entries = _events(run, semconv.EVENT_LEDGER_ENTRY)
    assert [(e[semconv.LEDGER_SIDE], e[semconv.LEDGER_SEQ], e[semconv.LEDGER_CALL_ID]) for e in entries] == [
        ("observed", 0, "c1"),
        ("claimed", 1, "c1"),
        ("observed", 2, "c2"),
        ("claimed", 3, "c2"),
    ]
    assert semconv.LEDGER_SUMMARY not in entries[1]  # the agent's words are content: not exported by default
    assert _events(run, semconv.EVENT_LEDGER_DISCREPANCY) == []


def test_unlogged_call_unbalances_the_run_with_an_event_and_error_status(books: _Books) -> None:
    with books.run():
        books.tool("search", "c1")
        books.log("c1", "search", "succeeded")
        books.tool("refund", "c2", "rejected")
    run = books.finished("invoke_agent agent")
    assert _attrs(run)[semconv.LEDGER_BALANCED] is False
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_TYPES] == ("unlogged_refusal",)
    assert _events(run, semconv.EVENT_LEDGER_DISCREPANCY) == [
        {
            semconv.LEDGER_DISCREPANCY_TYPE: "unlogged_refusal",
            semconv.LEDGER_DETAIL: "refund rejected, not logged",
            semconv.LEDGER_CALL_ID: "c2",
        }
    ]
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "ledger unbalanced: unlogged_refusal refund"


def test_protocol_only_discrepancy_keeps_the_status(books: _Books) -> None:
    with books.run():
        books.log("c1", "search", "succeeded")  # logged before the call
        books.tool("search", "c1")
    run = books.finished("invoke_agent agent")
    assert _attrs(run)[semconv.LEDGER_BALANCED] is True
    assert _attrs(run)[semconv.LEDGER_PROTOCOL_OK] is False
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_TYPES] == ("out_of_order_log",)
    assert run.status.status_code is StatusCode.UNSET


def test_mark_error_status_off_leaves_the_status() -> None:
    books = _Books(mark_error_status=False)
    with books.run():
        books.tool("search", "c1")
    assert books.finished("invoke_agent agent").status.status_code is StatusCode.UNSET
    books.close()


def test_log_call_requested_by_the_model_counts_as_a_claim(books: _Books) -> None:
    with books.run():
        books.tool("search", "c1")
        books.chat(_log_call("c1", "search", "succeeded", "L1"), ToolCallContent("other_tool", "{}", "x"))
    run = books.finished("invoke_agent agent")
    assert _attrs(run)[semconv.LEDGER_BALANCED] is True
    assert _attrs(run)[semconv.LEDGER_CLAIMED_COUNT] == 1


def test_log_call_requested_then_executed_is_counted_once(books: _Books) -> None:
    with books.run():
        books.tool("search", "c1")
        books.chat(_log_call("c1", "search", "succeeded", "L1"))
        books.log("c1", "search", "succeeded", log_call_id="L1")  # the harness runs the same call
    run = books.finished("invoke_agent agent")
    assert _attrs(run)[semconv.LEDGER_CLAIMED_COUNT] == 1
    assert semconv.LEDGER_DISCREPANCY_TYPES not in _attrs(run)


def test_log_calls_are_read_from_captured_output_messages_without_buffer_content(books: _Books) -> None:
    messages = [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "L1",
                    "name": "log_action",
                    "arguments": {"call_id": "c1", "tool_name": "search", "claimed_outcome": "succeeded"},
                }
            ],
        }
    ]
    with books.run():
        books.tool("search", "c1")
        books.chat(attributes={semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps(messages)}, put=False)
    assert _attrs(books.finished("invoke_agent agent"))[semconv.LEDGER_BALANCED] is True


def test_log_tool_arguments_from_captured_attribute(books: _Books) -> None:
    arguments = json.dumps({"log_id": "c1", "tool": "search", "outcome": "ok"})
    with books.run():
        books.tool("search", "c1")
        with books.tracer.start_as_current_span(
            "execute_tool log_action",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: "execute_tool",
                semconv.GEN_AI_TOOL_NAME: "log_action",
                semconv.GEN_AI_TOOL_CALL_ARGUMENTS: arguments,
            },
        ):
            pass
    assert _attrs(books.finished("invoke_agent agent"))[semconv.LEDGER_BALANCED] is True


def test_unparseable_log_is_malformed(books: _Books) -> None:
    with books.run():
        books.tool("search", "c1")
        books.chat(ToolCallContent("log_action", "{not json", "L1"))
    run = books.finished("invoke_agent agent")
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_TYPES] == ("malformed_log", "unlogged_call")
    (claimed,) = [e for e in _events(run, semconv.EVENT_LEDGER_ENTRY) if e[semconv.LEDGER_SIDE] == "claimed"]
    assert claimed[semconv.LEDGER_MALFORMED] == "arguments are not valid JSON"


def test_log_tool_span_without_any_arguments_is_malformed(books: _Books) -> None:
    with books.run():
        books.tool("log_action", "L1")
    assert _attrs(books.finished("invoke_agent agent"))[semconv.LEDGER_DISCREPANCY_TYPES] == (
        "malformed_log",
    )


def test_tool_outcome_falls_back_to_the_span_status(books: _Books) -> None:
    with (
        books.run(),
        books.tracer.start_as_current_span(
            "execute_tool fetch", attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool"}
        ) as span,
    ):
        span.set_status(Status(StatusCode.ERROR))
    run = books.finished("invoke_agent agent")
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_TYPES] == ("ledger_missing", "unlogged_failure")
    (observed,) = _events(run, semconv.EVENT_LEDGER_ENTRY)
    assert observed[semconv.LEDGER_TOOL_NAME] == "fetch"  # from the span name
    assert semconv.LEDGER_CALL_ID not in observed


def test_empty_run_is_reconciled_and_balanced(books: _Books) -> None:
    with books.run():
        pass
    attributes = _attrs(books.finished("invoke_agent agent"))
    assert attributes[semconv.LEDGER_BALANCED] is True
    assert attributes[semconv.LEDGER_OBSERVED_COUNT] == 0
    assert len(books.sink.records) == 1
    assert books.sink.entries == []


def test_local_root_is_the_run_when_there_is_no_agent_span(books: _Books) -> None:
    with books.tracer.start_as_current_span("POST /ask"):
        books.tool("search", "c1")
    root = books.finished("POST /ask")
    assert _attrs(root)[semconv.LEDGER_DISCREPANCY_TYPES] == ("ledger_missing", "unlogged_call")


def test_local_root_without_entries_is_left_alone(books: _Books) -> None:
    with books.tracer.start_as_current_span("GET /health"), books.tracer.start_as_current_span("db"):
        pass
    assert _attrs(books.finished("GET /health")) == {}
    assert books.sink.records == []


def test_nested_runs_keep_separate_books(books: _Books) -> None:
    with books.run("outer"):
        books.tool("plan", "p1")
        books.log("p1", "plan", "succeeded")
        with books.run("inner"):
            books.tool("search", "c1")
        books.tool("report", "r1")
        books.log("r1", "report", "succeeded")
    assert _attrs(books.finished("invoke_agent inner"))[semconv.LEDGER_DISCREPANCY_TYPES] == (
        "ledger_missing",
        "unlogged_call",
    )
    outer = _attrs(books.finished("invoke_agent outer"))
    assert outer[semconv.LEDGER_BALANCED] is True
    assert outer[semconv.LEDGER_OBSERVED_COUNT] == 2


def _workflow(books: _Books, name: str = "Agent workflow") -> Any:
    return books.tracer.start_as_current_span(
        f"invoke_workflow {name}",
        attributes={
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_WORKFLOW,
            semconv.GEN_AI_WORKFLOW_NAME: name,
        },
    )


def test_a_workflow_around_agent_runs_is_their_container_not_a_run(books: _Books) -> None:
    with _workflow(books):
        with books.run("triage"):
            books.tool("search", "c1")
        with books.run("expert"):
            pass
    workflow = _attrs(books.finished("invoke_workflow Agent workflow"))
    assert workflow == {
        semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_WORKFLOW,
        semconv.GEN_AI_WORKFLOW_NAME: "Agent workflow",
        semconv.RUN_CONTAINER: True,
    }
    assert [record.run_name for record in books.sink.records] == ["triage", "expert"]  # no empty third
    assert is_run_span(workflow, None) is False
    assert is_run_span(_attrs(books.finished("invoke_agent triage")), None) is True


def test_a_workflow_with_books_of_its_own_stays_a_run(books: _Books) -> None:
    with _workflow(books, "graph"):
        books.tool("fetch", "f1")  # done by the workflow itself, outside any agent
        with books.run("writer"):
            pass
    workflow = _attrs(books.finished("invoke_workflow graph"))
    assert semconv.RUN_CONTAINER not in workflow
    assert workflow[semconv.LEDGER_OBSERVED_COUNT] == 1
    assert sorted(record.run_name for record in books.sink.records) == ["graph", "writer"]


def test_a_workflow_without_agent_runs_is_the_run(books: _Books) -> None:
    with _workflow(books, "graph"):
        pass
    assert _attrs(books.finished("invoke_workflow graph"))[semconv.LEDGER_BALANCED] is True
    assert [record.run_name for record in books.sink.records] == ["graph"]


def test_an_agent_run_around_other_agent_runs_is_still_a_run(books: _Books) -> None:
    with books.run("orchestrator"), books.run("worker"):
        pass
    assert semconv.RUN_CONTAINER not in _attrs(books.finished("invoke_agent orchestrator"))
    assert sorted(record.run_name for record in books.sink.records) == ["orchestrator", "worker"]


def test_a_local_root_around_an_agent_run_is_its_container(books: _Books) -> None:
    with books.tracer.start_as_current_span("POST /ask"), books.run():
        books.tool("search", "c1")
    root = _attrs(books.finished("POST /ask"))
    assert root == {semconv.RUN_CONTAINER: True}
    assert is_run_span(root, None) is False
    assert [record.run_name for record in books.sink.records] == ["agent"]


def test_deeper_descendants_belong_to_the_nearest_run(books: _Books) -> None:
    with books.run(), books.tracer.start_as_current_span("step"), books.tracer.start_as_current_span("sub"):
        books.tool("search", "c1")
        books.log("c1", "search", "succeeded")
    assert _attrs(books.finished("invoke_agent agent"))[semconv.LEDGER_OBSERVED_COUNT] == 1


def test_tool_in_another_thread_with_the_context_belongs_to_the_run(books: _Books) -> None:
    with books.run():
        ctx = otel_context.get_current()

        def work() -> None:
            token = otel_context.attach(ctx)
            try:
                books.tool("search", "c1")
            finally:
                otel_context.detach(token)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        books.log("c1", "search", "succeeded")
    assert _attrs(books.finished("invoke_agent agent"))[semconv.LEDGER_BALANCED] is True


def test_sinks_get_entries_then_the_reconciliation_with_ids(books: _Books) -> None:
    with books.run("support") as run_span:
        books.tool("search", "c1")
        books.log("c1", "search", "failed")
    run_context = run_span.get_span_context()
    assert [(e.side, e.seq, e.call_id, e.tool_name, e.outcome) for e in books.sink.entries] == [
        ("observed", 0, "c1", "search", "succeeded"),
        ("claimed", 1, "c1", "search", "failed"),
    ]
    assert {(e.trace_id, e.run_span_id) for e in books.sink.entries} == {
        (run_context.trace_id, run_context.span_id)
    }
    assert all(e.span_id and e.time_unix_nano > 0 for e in books.sink.entries)
    (record,) = books.sink.records
    assert (record.trace_id, record.run_span_id, record.run_name) == (
        run_context.trace_id,
        run_context.span_id,
        "support",
    )
    assert record.reconciliation.discrepancy_types == ("mismatched_result",)
    assert (record.observed_count, record.claimed_count) == (1, 1)


def test_summary_is_kept_when_content_is_captured() -> None:
    books = _Books(capture_content=True)
    with books.run():
        books.tool("search", "c1")
        books.log("c1", "search", "succeeded")
    claimed = [
        e
        for e in _events(books.finished("invoke_agent agent"), semconv.EVENT_LEDGER_ENTRY)
        if e[semconv.LEDGER_SIDE] == "claimed"
    ]
    assert claimed[0][semconv.LEDGER_SUMMARY] == "s"
    assert books.sink.entries[1].summary == "s"
    books.close()


def test_a_raising_sink_costs_neither_the_span_nor_the_other_sinks() -> None:
    good = RecordingLedgerSink()
    books = _Books(sinks=[_RaisingSink(), good])
    with books.run():
        books.tool("search", "c1")
    assert _attrs(books.finished("invoke_agent agent"))[semconv.LEDGER_BALANCED] is False
    assert len(good.records) == 1
    assert tallyspan.stats()["errors.ledger.sink"] == 1
    books.close()
    assert good.shutdowns == 1


def test_entries_over_the_bound_are_dropped_counted_and_reported() -> None:
    books = _Books(max_entries_per_run=2)
    with books.run():
        for i in range(5):
            books.tool("search", f"c{i}")
    attributes = _attrs(books.finished("invoke_agent agent"))
    assert attributes[semconv.LEDGER_OBSERVED_COUNT] == 2
    assert attributes[semconv.LEDGER_DROPPED_ENTRIES] == 3
    assert tallyspan.stats()["dropped.ledger_entries"] == 3
    books.close()


def test_span_events_are_capped_but_sinks_get_every_entry() -> None:
    books = _Books(max_span_events=3)
    with books.run():
        for i in range(4):
            books.tool("search", f"c{i}")
            books.log(f"c{i}", "search", "succeeded")
    run = books.finished("invoke_agent agent")
    assert len(_events(run, semconv.EVENT_LEDGER_ENTRY)) == 3
    assert len(books.sink.entries) == 8
    assert tallyspan.stats()["dropped.ledger_span_events"] == 5
    books.close()


def test_discrepancy_events_are_capped_but_counted_in_full() -> None:
    books = _Books(max_span_events=2)
    with books.run():
        for i in range(5):
            books.tool("search", f"c{i}")
    run = books.finished("invoke_agent agent")
    assert len(_events(run, semconv.EVENT_LEDGER_DISCREPANCY)) == 2
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_COUNT] == 6  # five unlogged calls and ledger_missing
    assert len(books.sink.records[0].reconciliation.discrepancies) == 6
    books.close()


def test_open_runs_over_the_bound_are_dropped_and_counted() -> None:
    books = _Books(max_open_runs=1)
    first = books.tracer.start_span(
        "invoke_agent a", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
    )
    second = books.tracer.start_span(
        "invoke_agent b", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
    )
    with trace.use_span(first):
        books.tool("search", "c1")
    with trace.use_span(second):
        books.tool("search", "c2")
    assert tallyspan.stats()["dropped.ledger_runs"] == 1
    first.end()
    second.end()
    assert (
        _attrs(books.finished("invoke_agent a"))[semconv.LEDGER_OBSERVED_COUNT] == 0
    )  # its books were dropped
    assert _attrs(books.finished("invoke_agent b"))[semconv.LEDGER_OBSERVED_COUNT] == 1
    books.close()


def test_memory_is_freed_when_runs_end(books: _Books) -> None:
    for _ in range(3):
        with books.run():
            books.tool("search", "c1")
            books.log("c1", "search", "succeeded")
    assert books.processor._runs == {}
    assert books.processor._run_of == {}


def test_entries_that_arrive_after_their_run_ended_are_counted(books: _Books) -> None:
    with books.run():
        late = books.tracer.start_span(
            "execute_tool slow", attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool"}
        )
    late.end()
    assert tallyspan.stats()["dropped.ledger_late_entries"] == 1
    assert books.processor._runs == {}


def test_lone_model_calls_leave_no_bookkeeping_behind(books: _Books) -> None:
    for _ in range(3):
        books.chat()  # its own trace's root, nothing started in it
    assert books.processor._run_of == {}
    assert books.processor._runs == {}
    assert books.processor._closed_runs == {}  # nothing can reach them after they ended
    assert books.processor._has_members == {}
    assert [span.name for span in books.exporter.get_finished_spans()] == ["chat m"] * 3
    assert books.sink.records == []


def test_a_root_span_with_a_child_ending_after_it_still_counts_the_late_entry(books: _Books) -> None:
    with books.tracer.start_as_current_span("chat m", attributes={semconv.GEN_AI_OPERATION_NAME: "chat"}):
        late = books.tracer.start_span(
            "execute_tool slow", attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool"}
        )
    assert list(books.processor._closed_runs) == [_span_id(books.finished("chat m"))]
    late.end()
    assert tallyspan.stats()["dropped.ledger_late_entries"] == 1
    assert books.processor._runs == {}
    assert books.processor._has_members == {}
    assert books.sink.records == []


def test_a_child_started_after_its_root_ended_runs_books_of_its_own(books: _Books) -> None:
    root = books.tracer.start_span("chat m", attributes={semconv.GEN_AI_OPERATION_NAME: "chat"})
    root.end()
    assert books.processor._closed_runs == {}
    with trace.use_span(root):
        books.tool("search", "c1")
    (record,) = books.sink.records
    assert (record.run_name, record.observed_count) == ("execute_tool search", 1)
    assert "dropped.ledger_late_entries" not in tallyspan.stats()


def test_claim_api_records_a_claim_in_the_current_run(
    instrumented: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    with tallyspan.run("coder"):
        search("x", tool_call_id="c1")
        tallyspan.ledger.claim("c1", "search", "succeeded", summary="looked it up")
        search("y", tool_call_id="c2")
        tallyspan.ledger.claim(None, "search", "success")
        tallyspan.ledger.claim("c3", "search", "maybe")
    instrumented.force_flush()
    (run,) = [s for s in span_exporter.get_finished_spans() if s.name == "invoke_agent coder"]
    attributes = _attrs(run)
    assert attributes[semconv.LEDGER_BALANCED] is True
    assert attributes[semconv.LEDGER_CLAIMED_COUNT] == 3
    assert attributes[semconv.LEDGER_DISCREPANCY_TYPES] == ("malformed_log",)
    claim_events = _events(run, semconv.EVENT_LEDGER_CLAIM)
    assert claim_events[0] == {
        semconv.LEDGER_CALL_ID: "c1",
        semconv.LEDGER_TOOL_NAME: "search",
        semconv.LEDGER_OUTCOME: "succeeded",
    }  # no summary: content is not captured


def test_claim_without_a_recording_span_is_dropped_and_counted() -> None:
    tallyspan.ledger.claim("c1", "search", "succeeded")
    assert tallyspan.stats()["dropped.ledger_claims"] == 1


def test_whole_chain_with_tool_decorator_and_worker(
    instrumented: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    @tallyspan.tool
    def lookup(key: str, tool_call_id: str) -> str:
        if key == "bad":
            raise KeyError(key)
        return key

    @tallyspan.tool
    def log_action(
        call_id: str, tool_name: str, claimed_outcome: str, summary: str, tool_call_id: str
    ) -> str:
        return "logged"

    with tallyspan.run("agent"):
        lookup("a", tool_call_id="c1")
        log_action("c1", "lookup", "succeeded", "found a", tool_call_id="L1")
        with pytest.raises(KeyError):
            lookup("bad", tool_call_id="c2")
        log_action("c2", "lookup", "succeeded", "found bad", tool_call_id="L2")  # lies about the failure
    instrumented.force_flush()
    (run,) = [s for s in span_exporter.get_finished_spans() if s.name == "invoke_agent agent"]
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_TYPES] == ("mismatched_result",)
    (discrepancy,) = _events(run, semconv.EVENT_LEDGER_DISCREPANCY)
    assert discrepancy[semconv.LEDGER_DETAIL] == "failed claimed as succeeded"
    assert len(content_buffer()) == 0  # the ledger took every tool's content out of the buffer


def test_shutdown_releases_the_content_buffer_consumer() -> None:
    before = content_buffer().active
    books = _Books()
    assert content_buffer().active is True
    books.close()
    books.processor.shutdown()  # twice is harmless
    assert content_buffer().active is before


def test_claim_summary_is_recorded_when_content_is_captured(
    span_exporter: InMemorySpanExporter, make_instrumented: MakeInstrumented
) -> None:
    instrumentation = make_instrumented(store=None, instrumentors=(), capture_content=True).instrumentation
    with tallyspan.run("coder"):
        tallyspan.ledger.claim("c1", "search", "succeeded", summary="looked it up")
    instrumentation.force_flush()
    (run,) = [s for s in span_exporter.get_finished_spans() if s.name == "invoke_agent coder"]
    (entry,) = _events(run, semconv.EVENT_LEDGER_ENTRY)
    assert entry[semconv.LEDGER_SUMMARY] == "looked it up"
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_TYPES] == ("phantom_log",)


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    span_id: int = span.context.span_id
    return span_id
