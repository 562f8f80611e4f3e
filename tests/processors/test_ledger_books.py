"""LedgerProcessor's bookkeeping around the reconciliation: the run's name and status message, what the
sinks are handed (and when they fail), the redaction of claims with capture off, the bounds and their
counters, and the ``ledger`` component's settings. Real spans through a real provider; the sinks are
recording doubles of the public ``LedgerSink`` protocol."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from tests.recording import RecordingLedgerSink

import tallyspan
from tallyspan import semconv
from tallyspan._content import ToolContent, content_buffer
from tallyspan._state import Settings
from tallyspan.ledger import LedgerEntry, LedgerRecord, LogToolSpec
from tallyspan_processors import LedgerProcessor, OffThreadProcessor
from tallyspan_processors._ledger import ledger_component
from tallyspan_processors._wrapping import WrappingProcessor


class _CallsSink(RecordingLedgerSink):
    """Records every call, and answers each with ``answer`` (False: the sink could not write)."""

    def __init__(self, answer: bool = True, flushed: bool = True) -> None:
        super().__init__()
        self.answer = answer
        self.flushed = flushed
        self.entry_calls: list[int] = []

    def export_entries(self, entries: Sequence[LedgerEntry]) -> bool:
        self.entry_calls.append(len(entries))
        super().export_entries(entries)
        return self.answer

    def export_reconciliation(self, record: LedgerRecord) -> bool:
        super().export_reconciliation(record)
        return self.answer

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.flushed


class _BrokenSink(RecordingLedgerSink):
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        raise RuntimeError("a sink that cannot flush")

    def shutdown(self) -> None:
        super().shutdown()
        raise RuntimeError("a sink that cannot shut down")


class _Downstream(SimpleSpanProcessor):
    def __init__(self, exporter: InMemorySpanExporter, flushed: bool = True) -> None:
        super().__init__(exporter)
        self.flushed = flushed

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.flushed


class _Chain:
    def __init__(self, *, flushed: bool = True, **options: Any) -> None:
        self.exporter = InMemorySpanExporter()
        self.sink = _CallsSink()
        options.setdefault("sinks", [self.sink])
        self.processor = LedgerProcessor([_Downstream(self.exporter, flushed)], **options)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("test")

    def run(self, name: str = "invoke_agent agent", **attributes: Any) -> Any:
        return self.tracer.start_as_current_span(
            name, attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT, **attributes}
        )

    def tool(self, name: str, call_id: str | None = None, **attributes: Any) -> None:
        own: dict[str, Any] = {semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: name}
        if call_id is not None:
            own[semconv.GEN_AI_TOOL_CALL_ID] = call_id
        with self.tracer.start_as_current_span(f"execute_tool {name}", attributes={**own, **attributes}):
            pass

    def log(self, call_id: str | None, tool_name: str, outcome: str = "succeeded") -> None:
        arguments: dict[str, Any] = {"tool_name": tool_name, "claimed_outcome": outcome, "summary": "words"}
        if call_id is not None:
            arguments["call_id"] = call_id
        with self.tracer.start_as_current_span(
            "execute_tool log_action",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: "execute_tool",
                semconv.GEN_AI_TOOL_NAME: "log_action",
            },
        ) as span:
            content_buffer().put(span.get_span_context().span_id, ToolContent(arguments=arguments))

    def finished(self, name: str = "invoke_agent agent") -> ReadableSpan:
        (span,) = [s for s in self.exporter.get_finished_spans() if s.name == name]
        return span

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def chain() -> Iterator[_Chain]:
    made = _Chain()
    yield made
    made.close()


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(event.attributes or {}) for event in span.events if event.name == name]


# --- construction ----------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["max_tracked_spans", "max_open_runs", "max_entries_per_run"])
def test_a_bound_below_one_is_refused_and_one_is_accepted(option: str) -> None:
    before = content_buffer().active
    with pytest.raises(ValueError, match=f"^{option} must be at least 1$"):
        LedgerProcessor([], **{option: 0})  # type: ignore[arg-type]
    assert content_buffer().active is before  # refused: not left consuming the content buffer
    LedgerProcessor([], **{option: 1}).shutdown()  # type: ignore[arg-type]


def test_the_sinks_are_the_ones_given() -> None:
    sinks = [RecordingLedgerSink(), RecordingLedgerSink()]
    processor = LedgerProcessor([], sinks=sinks)
    assert processor.sinks == tuple(sinks)
    processor.shutdown()


def test_the_ledger_component_takes_the_settings() -> None:
    sink = RecordingLedgerSink()
    settings = Settings(
        ledger_sinks=(sink, object()),  # type: ignore[arg-type]
        ledger_log_tool="note",
        capture_content=True,
        mark_error_status=False,
    )
    exporter = InMemorySpanExporter()
    processor = ledger_component([SimpleSpanProcessor(exporter)], settings)
    assert isinstance(processor, LedgerProcessor)
    assert processor.sinks == (sink,)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span(
            "invoke_agent a", attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT}
        ),
        tracer.start_as_current_span(
            "execute_tool note",
            attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "note"},
        ) as note,
    ):
        arguments = {"tool_name": "x", "claimed_outcome": "ok", "summary": "said so"}
        content_buffer().put(note.get_span_context().span_id, ToolContent(arguments=arguments))
    provider.shutdown()
    (run,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent a"]
    assert _attrs(run)[semconv.LEDGER_CLAIMED_COUNT] == 1  # "note" is the log tool
    assert _attrs(run)[semconv.LEDGER_BALANCED] is False  # a claim of a call never made
    (entry,) = sink.entries
    assert (entry.tool_name, entry.summary) == ("x", "said so")  # captured: not redacted, summary kept
    assert run.status.status_code is StatusCode.UNSET  # mark_error_status off


# --- the run span ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({semconv.RUN_NAME: "r", semconv.GEN_AI_AGENT_NAME: "a", semconv.GEN_AI_WORKFLOW_NAME: "w"}, "r"),
        ({semconv.GEN_AI_AGENT_NAME: "a", semconv.GEN_AI_WORKFLOW_NAME: "w"}, "a"),
        ({semconv.GEN_AI_WORKFLOW_NAME: "w"}, "w"),
        ({}, "invoke_agent agent"),
    ],
)
def test_the_run_name_is_the_run_name_else_the_agent_else_the_workflow_else_the_span_name(
    chain: _Chain, attributes: dict[str, str], expected: str
) -> None:
    with chain.run(**attributes):
        pass
    (record,) = chain.sink.records
    assert record.run_name == expected


def test_the_record_carries_the_counts_and_the_run_span_end(chain: _Chain) -> None:
    with chain.run():
        chain.tool("search", "c1")
        chain.tool("fetch", "c2")
        chain.log("c1", "search")
    run = chain.finished()
    (record,) = chain.sink.records
    assert (record.observed_count, record.claimed_count) == (2, 1)
    assert record.time_unix_nano == run.end_time
    assert record.trace_id == run.context.trace_id
    assert chain.sink.entry_calls == [3]


def test_the_status_names_unbalanced_types_only_and_the_violations_below(chain: _Chain) -> None:
    with chain.run():
        chain.log("c1", "search")  # logged before the call: out_of_order_log, a protocol finding
        chain.tool("search", "c1")
        chain.tool("refund", "c2", **{semconv.TOOL_OUTCOME: "rejected"})
        chain.tool("fetch", None, **{semconv.VIOLATION_TYPES: ["too_short", "not_json"]})
    run = chain.finished()
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_TYPES] == (
        "out_of_order_log",
        "unlogged_call",
        "unlogged_refusal",
    )
    assert run.status.description == (
        # what failed first, each discrepancy with its call's tool
        "ledger unbalanced: unlogged_call fetch, unlogged_refusal refund; not_json, too_short in 1 of 1 call"
    )
    assert _attrs(run)[semconv.RUN_VIOLATION_COUNT] == 2
    assert _attrs(run)[semconv.RUN_VIOLATION_TYPES] == ["not_json", "too_short"]
    assert _attrs(run)[semconv.VIOLATED] is True


def _chat(chain: _Chain, *violation_types: str) -> Any:
    attributes: dict[str, Any] = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT}
    if violation_types:
        attributes[semconv.VIOLATION_TYPES] = list(violation_types)
    return chain.tracer.start_as_current_span("chat m", attributes=attributes)


def test_the_status_leads_with_what_failed_and_in_how_many_of_the_runs_calls(chain: _Chain) -> None:
    # Phoenix's trace list shows the first ~30 characters of a status: the types come first.
    with chain.run():
        for types in [("not_japanese",), (), ("refusal", "not_japanese"), (), ()]:
            with _chat(chain, *types):
                pass
        chain.tool("issue_refund", "c1")
        chain.log("c1", "issue_refund")
        chain.log("c9", "issue_refund")  # a second refund the agent says it made: nobody observed it
    run = chain.finished()
    assert run.status.description == (
        "ledger unbalanced: phantom_log issue_refund; not_japanese, refusal in 2 of 5 calls"
    )


def test_a_claimed_tool_the_run_never_saw_stays_out_of_the_status_with_content_capture_off(
    chain: _Chain,
) -> None:
    with chain.run():
        chain.log("c9", "wire_transfer_to_acct_12345")  # the agent's own words
    assert chain.finished().status.description == "ledger unbalanced: phantom_log"


def test_a_model_span_around_another_is_one_call(chain: _Chain) -> None:
    # Another instrumentation's span around ours (or ours inside a wrapper's): one call, violating.
    with chain.run(), _chat(chain), _chat(chain, "refusal"):
        pass
    with chain.run("invoke_agent other"), _chat(chain):
        pass
    assert chain.finished().status.description == "refusal in 1 of 1 call"
    assert chain.finished("invoke_agent other").status.status_code is StatusCode.UNSET


def test_the_calls_of_a_run_inside_another_count_in_both(chain: _Chain) -> None:
    with chain.run("invoke_agent outer"):
        with _chat(chain):
            pass
        with chain.run("invoke_agent inner"):
            for types in [("too_short",), ()]:
                with _chat(chain, *types):
                    pass
    assert chain.finished("invoke_agent inner").status.description == "too_short in 1 of 2 calls"
    assert chain.finished("invoke_agent outer").status.description == "too_short in 1 of 3 calls"


def test_an_error_status_of_the_run_span_is_kept(chain: _Chain) -> None:
    with chain.run() as run_span:
        chain.tool("search", "c1")
        run_span.set_status(Status(StatusCode.ERROR, "the agent crashed"))
    assert chain.finished().status.description == "the agent crashed"


@pytest.mark.parametrize(
    ("attributes", "count", "types"),
    [
        ({semconv.VIOLATION_TYPES: ["a", "b"], semconv.VIOLATION_COUNT: 5}, 5, ("a", "b")),
        ({semconv.VIOLATION_TYPES: ["a", "b"]}, 2, ("a", "b")),
        ({semconv.VIOLATION_TYPES: ["a", "b"], semconv.VIOLATION_COUNT: True}, 2, ("a", "b")),
        ({semconv.VIOLATION_TYPES: ["a"], semconv.VIOLATION_COUNT: "3"}, 1, ("a",)),
        ({semconv.VIOLATION_TYPES: "a", semconv.VIOLATION_COUNT: 1}, None, None),
        ({semconv.VIOLATION_TYPES: [], semconv.VIOLATION_COUNT: 1}, None, None),
        ({semconv.VIOLATION_COUNT: 1}, None, None),
    ],
)
def test_the_verdicts_rolled_up_are_read_from_the_checks_attributes(
    chain: _Chain, attributes: dict[str, Any], count: int | None, types: tuple[str, ...] | None
) -> None:
    with chain.run():
        chain.tool("search", **attributes)
    run = _attrs(chain.finished())
    assert run.get(semconv.RUN_VIOLATION_COUNT) == count
    assert run.get(semconv.RUN_VIOLATION_TYPES) == (None if types is None else list(types))


def test_verdicts_of_a_lone_root_span_are_its_own_not_a_roll_up(chain: _Chain) -> None:
    with chain.tracer.start_as_current_span("chat m", attributes={semconv.VIOLATION_TYPES: ["too_short"]}):
        pass
    assert semconv.RUN_VIOLATION_COUNT not in _attrs(chain.finished("chat m"))
    assert chain.sink.records == []


def test_entry_events_carry_only_what_the_entry_has_at_its_time(chain: _Chain) -> None:
    with chain.run():
        chain.tool("search")
        chain.log(None, "search")
    run = chain.finished()
    observed, claimed = _events(run, semconv.EVENT_LEDGER_ENTRY)
    assert observed == {
        semconv.LEDGER_SIDE: "observed",
        semconv.LEDGER_SEQ: 0,
        semconv.LEDGER_TOOL_NAME: "search",
        semconv.LEDGER_OUTCOME: "succeeded",
    }
    assert claimed == {
        semconv.LEDGER_SIDE: "claimed",
        semconv.LEDGER_SEQ: 1,
        semconv.LEDGER_TOOL_NAME: "search",
        semconv.LEDGER_OUTCOME: "succeeded",
    }  # no summary: content is not captured
    times = [event.timestamp for event in run.events if event.name == semconv.EVENT_LEDGER_ENTRY]
    assert times == [entry.time_unix_nano for entry in chain.sink.entries]
    assert [entry.summary for entry in chain.sink.entries] == ["", ""]


def test_a_malformed_claim_event_names_why_and_discrepancy_events_sit_at_the_run_end(chain: _Chain) -> None:
    with (
        chain.run(),
        chain.tracer.start_as_current_span(
            "execute_tool log_action",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: "execute_tool",
                semconv.GEN_AI_TOOL_NAME: "log_action",
                semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"tool_name": "x"}),
            },
        ),
    ):
        pass
    run = chain.finished()
    (entry,) = _events(run, semconv.EVENT_LEDGER_ENTRY)
    assert entry[semconv.LEDGER_MALFORMED] == "no outcome"
    assert semconv.LEDGER_CALL_ID not in entry
    discrepancies = [event for event in run.events if event.name == semconv.EVENT_LEDGER_DISCREPANCY]
    assert [event.timestamp for event in discrepancies] == [run.end_time] * len(discrepancies)
    assert all(semconv.LEDGER_CALL_ID not in (event.attributes or {}) for event in discrepancies)


def test_no_span_events_at_all_when_the_cap_is_zero_or_below() -> None:
    chain = _Chain(max_span_events=-1)
    with chain.run():
        chain.tool("search", "c1")
    run = chain.finished()
    assert [event.name for event in run.events] == []
    assert _attrs(run)[semconv.LEDGER_DISCREPANCY_COUNT] == 2
    assert tallyspan.stats()["dropped.ledger_span_events"] == 3  # one entry, two discrepancies
    chain.close()


def test_events_up_to_the_cap_exactly_are_not_counted_as_dropped() -> None:
    chain = _Chain(max_span_events=2)
    with chain.run():
        chain.tool("search", "c1")
        chain.log("c1", "search")
    assert len(_events(chain.finished(), semconv.EVENT_LEDGER_ENTRY)) == 2
    assert "dropped.ledger_span_events" not in tallyspan.stats()
    chain.close()


# --- the sinks -------------------------------------------------------------------------------------


def test_an_empty_run_hands_the_sinks_no_entries_only_its_reconciliation(chain: _Chain) -> None:
    with chain.run():
        pass
    assert chain.sink.entry_calls == []
    assert len(chain.sink.records) == 1


def test_a_sink_that_cannot_write_is_counted_per_kind() -> None:
    failing = _CallsSink(answer=False)
    chain = _Chain(sinks=[failing])
    with chain.run():
        chain.tool("search", "c1")
    with chain.run():
        pass
    stats = tallyspan.stats()
    assert stats["errors.ledger_sink.entries"] == 1
    assert stats["errors.ledger_sink.reconciliation"] == 2
    chain.close()


def test_force_flush_is_true_only_when_the_downstream_and_every_sink_flushed() -> None:
    chains = [
        _Chain(),
        _Chain(flushed=False),
        _Chain(sinks=[_CallsSink(flushed=False), _CallsSink()]),
        _Chain(sinks=[_CallsSink(), _CallsSink(flushed=False)]),
    ]
    assert [chain.processor.force_flush() for chain in chains] == [True, False, False, False]
    for chain in chains:
        chain.close()


def _ledger_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the ledger logged (each failure at debug level every time, a warning the first time)."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "tallyspan_processors._ledger" and record.levelno == logging.DEBUG
    ]


def test_a_sink_raising_in_flush_or_shutdown_is_counted_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, after = _BrokenSink(), _CallsSink(flushed=True)
    chain = _Chain(sinks=[broken, after])
    with caplog.at_level(logging.DEBUG, logger="tallyspan_processors._ledger"):
        assert chain.processor.force_flush() is False
        chain.close()
    assert (broken.shutdowns, after.shutdowns) == (1, 1)
    stats = tallyspan.stats()
    assert stats["errors.ledger.sink.flush"] == 1
    assert stats["errors.ledger.sink.shutdown"] == 1
    assert _ledger_messages(caplog) == [
        "ledger sink _BrokenSink failed to flush",
        "ledger sink _BrokenSink failed to shut down",
    ]


class _RaisingSink(RecordingLedgerSink):
    def export_reconciliation(self, record: LedgerRecord) -> bool:
        raise RuntimeError("a sink that breaks its promise")


def test_a_sink_raising_on_export_is_named_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    chain = _Chain(sinks=[_RaisingSink()])
    with caplog.at_level(logging.DEBUG, logger="tallyspan_processors._ledger"), chain.run():
        pass
    assert _ledger_messages(caplog) == ["ledger sink _RaisingSink raised"]
    assert tallyspan.stats()["errors.ledger.sink"] == 1
    chain.close()


class _Starts(SpanProcessor):
    def __init__(self) -> None:
        self.started: list[tuple[object, object]] = []

    def on_start(self, span: object, parent_context: object = None) -> None:
        self.started.append((span, parent_context))


def test_a_span_the_ledger_cannot_track_still_starts_downstream(caplog: pytest.LogCaptureFixture) -> None:
    """A broken wrapper of the app hands on_start something that is not a span: logged, counted, passed on."""
    starts = _Starts()
    processor = LedgerProcessor([starts])
    not_a_span, parent = object(), Context()
    with caplog.at_level(logging.DEBUG, logger="tallyspan_processors._ledger"):
        processor.on_start(not_a_span, parent_context=parent)  # type: ignore[arg-type]
    assert starts.started == [(not_a_span, parent)]
    assert tallyspan.stats()["errors.ledger.on_start"] == 1
    assert _ledger_messages(caplog) == ["the ledger processor failed in on_start"]
    processor.shutdown()


def test_runs_still_open_at_shutdown_are_counted_as_dropped(chain: _Chain) -> None:
    first = chain.tracer.start_span(
        "invoke_agent a", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
    )
    second = chain.tracer.start_span(
        "invoke_agent b", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
    )
    for run in (first, second):
        with trace.use_span(run):
            chain.tool("search", "c1")
    chain.close()
    assert tallyspan.stats()["dropped.ledger_runs"] == 2
    assert chain.sink.shutdowns == 1


def test_shutdown_without_open_runs_counts_nothing(chain: _Chain) -> None:
    with chain.run():
        chain.tool("search", "c1")
    chain.close()
    assert "dropped.ledger_runs" not in tallyspan.stats()


# --- privacy: claims that name nothing observed ---------------------------------------------------


def test_without_capture_claims_naming_nothing_observed_are_unobserved(chain: _Chain) -> None:
    with chain.run():
        chain.tool("search", "c1")
        chain.log("c1", "search")
        chain.log("c9", "secret_tool")
        chain.log(None, "log_action")  # the log tool's own name is no secret
    names = [(entry.side, entry.call_id, entry.tool_name) for entry in chain.sink.entries]
    assert names == [
        ("observed", "c1", "search"),
        ("claimed", "c1", "search"),
        ("claimed", "unobserved", "unobserved"),
        ("claimed", None, "log_action"),
    ]
    assert [entry.summary for entry in chain.sink.entries] == ["", "", "", ""]


class _DiskSink(_CallsSink):
    """A sink on the user's own disk, as the local store is."""

    keeps_claimed_identifiers = True


def test_without_capture_a_sink_on_the_users_disk_gets_claimed_identifiers_and_no_summary() -> None:
    disk, other = _DiskSink(), _CallsSink()
    chain = _Chain(sinks=[other, disk])
    with chain.run():
        chain.tool("search", "c1")
        chain.log("c1", "search")
        chain.log("c9", "issue_refund")
        chain.log("c 10", "refund Tanaka")  # free text, not identifiers
    chain.close()
    assert [(entry.side, entry.call_id, entry.tool_name, entry.summary) for entry in disk.entries] == [
        ("observed", "c1", "search", ""),
        ("claimed", "c1", "search", ""),
        ("claimed", "c9", "issue_refund", ""),
        ("claimed", "unobserved", "unobserved", ""),
    ]
    assert [(entry.call_id, entry.tool_name) for entry in other.entries] == [
        ("c1", "search"),
        ("c1", "search"),
        ("unobserved", "unobserved"),
        ("unobserved", "unobserved"),
    ]
    (on_disk,) = disk.records
    (elsewhere,) = other.records
    assert [(d.type, d.call_id, d.detail) for d in on_disk.reconciliation.discrepancies] == [
        ("phantom_log", "c9", "issue_refund claimed succeeded, never called"),
        ("phantom_log", "unobserved", "unobserved claimed succeeded, never called"),
    ]
    assert [(d.type, d.call_id, d.detail) for d in elsewhere.reconciliation.discrepancies] == [
        ("phantom_log", "unobserved", "unobserved claimed succeeded, never called"),
        ("phantom_log", "unobserved", "unobserved claimed succeeded, never called"),
    ]
    # The run span leaves the process: its events and status name nothing unobserved.
    run = chain.finished()
    assert [event.get(semconv.LEDGER_TOOL_NAME) for event in _events(run, semconv.EVENT_LEDGER_ENTRY)] == [
        "search",
        "search",
        "unobserved",
        "unobserved",
    ]
    assert run.status.description == "ledger unbalanced: phantom_log"


def test_with_capture_a_sink_on_the_users_disk_gets_the_same_books_as_the_others() -> None:
    disk, other = _DiskSink(), _CallsSink()
    chain = _Chain(sinks=[other, disk], capture_content=True)
    with chain.run():
        chain.log("c9", "refund Tanaka")
    chain.close()
    assert disk.entries == other.entries
    assert disk.records == other.records
    assert [(e.call_id, e.tool_name, e.summary) for e in disk.entries] == [("c9", "refund Tanaka", "words")]


def test_with_capture_claims_keep_their_words() -> None:
    chain = _Chain(capture_content=True)
    with chain.run():
        chain.log("c9", "secret_tool")
    (entry,) = chain.sink.entries
    assert (entry.call_id, entry.tool_name, entry.summary) == ("c9", "secret_tool", "words")
    chain.close()


def test_without_capture_claim_events_are_redacted_on_their_span_too(chain: _Chain) -> None:
    with chain.run():
        chain.tool("search", "c1")
        with chain.tracer.start_as_current_span("step") as step:
            step.add_event(
                semconv.EVENT_LEDGER_CLAIM,
                {
                    semconv.LEDGER_CALL_ID: "c1",
                    semconv.LEDGER_TOOL_NAME: "search",
                    semconv.LEDGER_OUTCOME: "ok",
                },
                timestamp=111,
            )
            step.add_event(
                semconv.EVENT_LEDGER_CLAIM,
                {
                    semconv.LEDGER_CALL_ID: "c7",
                    semconv.LEDGER_TOOL_NAME: "secret",
                    semconv.LEDGER_OUTCOME: "ok",
                },
                timestamp=222,
            )
            step.add_event(
                semconv.EVENT_LEDGER_CLAIM, {semconv.LEDGER_OUTCOME: "ok"}, timestamp=333
            )  # nothing to redact
            step.add_event("note", {semconv.LEDGER_TOOL_NAME: "secret"}, timestamp=444)
    step_span = chain.finished("step")
    assert [(event.name, dict(event.attributes or {}), event.timestamp) for event in step_span.events] == [
        (
            semconv.EVENT_LEDGER_CLAIM,
            {semconv.LEDGER_CALL_ID: "c1", semconv.LEDGER_TOOL_NAME: "search", semconv.LEDGER_OUTCOME: "ok"},
            111,
        ),
        (
            semconv.EVENT_LEDGER_CLAIM,
            {
                semconv.LEDGER_CALL_ID: "unobserved",
                semconv.LEDGER_TOOL_NAME: "unobserved",
                semconv.LEDGER_OUTCOME: "ok",
            },
            222,
        ),
        (semconv.EVENT_LEDGER_CLAIM, {semconv.LEDGER_OUTCOME: "ok"}, 333),
        ("note", {semconv.LEDGER_TOOL_NAME: "secret"}, 444),  # not a claim: the app's own event
    ]


def test_a_first_span_of_a_run_with_only_claim_events_is_redacted(chain: _Chain) -> None:
    """Nothing is on the run's books yet: every claimed name is unobserved."""
    with chain.run(), chain.tracer.start_as_current_span("step") as step:
        step.add_event(
            semconv.EVENT_LEDGER_CLAIM,
            {semconv.LEDGER_CALL_ID: "c1", semconv.LEDGER_TOOL_NAME: "search", semconv.LEDGER_OUTCOME: "ok"},
        )
    (event,) = chain.finished("step").events
    assert dict(event.attributes or {}) == {
        semconv.LEDGER_CALL_ID: "unobserved",
        semconv.LEDGER_TOOL_NAME: "unobserved",
        semconv.LEDGER_OUTCOME: "ok",
    }
    assert not any(key.startswith("errors.") for key in tallyspan.stats())


def test_a_claim_event_that_arrives_after_its_run_ended_is_still_redacted(chain: _Chain) -> None:
    with chain.run():
        late = chain.tracer.start_span("step")
    late.add_event(
        semconv.EVENT_LEDGER_CLAIM, {semconv.LEDGER_TOOL_NAME: "secret", semconv.LEDGER_OUTCOME: "ok"}
    )
    late.end()
    (event,) = chain.finished("step").events
    assert dict(event.attributes or {}) == {
        semconv.LEDGER_TOOL_NAME: "unobserved",
        semconv.LEDGER_OUTCOME: "ok",
    }
    assert tallyspan.stats()["dropped.ledger_late_entries"] == 1


def test_span_events_over_the_cap_are_counted_per_kind() -> None:
    chain = _Chain(max_span_events=2)
    with chain.run():
        for i in range(5):
            chain.tool("search", f"c{i}")
    assert len(_events(chain.finished(), semconv.EVENT_LEDGER_ENTRY)) == 2
    assert tallyspan.stats()["dropped.ledger_span_events"] == (5 - 2) + (6 - 2)  # entries, discrepancies
    chain.close()


def test_a_span_without_claim_events_is_forwarded_as_it_is(chain: _Chain) -> None:
    with chain.run(), chain.tracer.start_as_current_span("step") as step:
        step.add_event("note", {"k": "v"})
        step.set_attribute("kept", 1)
    finished = chain.finished("step")
    assert _attrs(finished) == {"kept": 1}
    assert [event.name for event in finished.events] == ["note"]


# --- which run ------------------------------------------------------------------------------------


def test_a_span_under_a_remote_parent_starts_a_run_of_its_own(chain: _Chain) -> None:
    remote = trace.NonRecordingSpan(
        trace.SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=True, trace_flags=trace.TraceFlags(1))
    )
    with chain.tracer.start_as_current_span("POST /agent", context=trace.set_span_in_context(remote)):
        chain.tool("search", "c1")
    (record,) = chain.sink.records
    assert record.run_name == "POST /agent"
    assert record.observed_count == 1


def test_live_spans_over_the_tracking_bound_are_forgotten_and_counted() -> None:
    chain = _Chain(max_tracked_spans=2)
    with chain.run(), chain.tracer.start_as_current_span("step"):
        assert "dropped.ledger_tracked_spans" not in tallyspan.stats()
        chain.tool("search", "c1")  # a third live span: the oldest (the run) is forgotten
        assert tallyspan.stats()["dropped.ledger_tracked_spans"] == 1
    chain.close()


def test_a_nested_run_rolls_its_violations_up_even_when_the_parent_ended_first(chain: _Chain) -> None:
    outer = chain.tracer.start_span(
        "invoke_agent outer", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
    )
    with trace.use_span(outer):
        inner = chain.tracer.start_span(
            "invoke_agent inner", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
        )
    outer.end()
    with trace.use_span(inner):
        chain.tool("search", "c1", **{semconv.VIOLATION_TYPES: ["too_short"]})
    inner.end()
    assert tallyspan.stats()["dropped.run_late_verdicts"] == 1
    assert _attrs(chain.finished("invoke_agent inner"))[semconv.RUN_VIOLATION_COUNT] == 1


def test_a_workflow_with_only_violations_below_is_a_run_not_a_container(chain: _Chain) -> None:
    with (
        chain.tracer.start_as_current_span(
            "invoke_workflow graph",
            attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_WORKFLOW},
        ),
        chain.tracer.start_as_current_span("chat m", attributes={semconv.VIOLATION_TYPES: ["too_short"]}),
    ):
        pass
    workflow = _attrs(chain.finished("invoke_workflow graph"))
    assert semconv.RUN_CONTAINER not in workflow
    assert workflow[semconv.LEDGER_BALANCED] is True
    assert workflow[semconv.RUN_VIOLATION_COUNT] == 1


def test_an_enclosing_run_with_no_entries_of_its_own_is_recorded_in_its_trace(chain: _Chain) -> None:
    with chain.run("invoke_agent outer") as outer, chain.run("invoke_agent inner"):
        chain.tool("search", "c1")
    trace_id = outer.get_span_context().trace_id
    assert {record.run_name: record.trace_id for record in chain.sink.records} == {
        "invoke_agent inner": trace_id,
        "invoke_agent outer": trace_id,
    }


def test_claims_pair_with_calls_by_their_call_id_before_their_tool_name(chain: _Chain) -> None:
    with chain.run():
        chain.tool("search", "c1")
        chain.tool("search", "c2", **{semconv.TOOL_OUTCOME: "failed"})
        chain.log("c2", "search", "failed")
        chain.log("c1", "search", "succeeded")
    assert _attrs(chain.finished())[semconv.LEDGER_BALANCED] is True


def test_a_claim_that_logs_the_log_tool_itself_is_found_with_a_log_tool_of_its_own() -> None:
    chain = _Chain(spec=LogToolSpec(tool="note"))
    with (
        chain.run(),
        chain.tracer.start_as_current_span(
            "execute_tool note",
            attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "note"},
        ) as note,
    ):
        arguments = {"tool_name": "note", "claimed_outcome": "ok"}
        content_buffer().put(note.get_span_context().span_id, ToolContent(arguments=arguments))
    assert _attrs(chain.finished())[semconv.LEDGER_DISCREPANCY_TYPES] == ("self_logged",)
    chain.close()


def test_a_tool_span_without_any_name_is_still_an_observed_call_with_an_empty_name(chain: _Chain) -> None:
    with (
        chain.run(),
        chain.tracer.start_as_current_span("", attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool"}),
    ):
        pass
    (entry,) = chain.sink.entries
    assert (entry.side, entry.tool_name) == ("observed", "")
    details = {
        event[semconv.LEDGER_DISCREPANCY_TYPE]: event[semconv.LEDGER_DETAIL]
        for event in _events(chain.finished(), semconv.EVENT_LEDGER_DISCREPANCY)
    }
    assert details["unlogged_call"] == " succeeded, not logged"


# --- spans the worker dropped ----------------------------------------------------------------------


class _Gate(SpanProcessor):
    """Holds the worker on the span named ``stuck`` until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == "stuck":
            self.entered.set()
            self.release.wait(10)


class _Forgetful(WrappingProcessor):
    """A link below the ledger that records which spans it was told to forget."""

    def __init__(self) -> None:
        super().__init__([])
        self.forgotten: list[str] = []

    def forget(self, span: ReadableSpan) -> None:
        self.forgotten.append(span.name)


@pytest.fixture
def gate() -> Iterator[_Gate]:
    made = _Gate()
    yield made
    made.release.set()


def test_a_run_span_the_worker_dropped_frees_its_books_and_later_entries_are_late(gate: _Gate) -> None:
    sink, below = _CallsSink(), _Forgetful()
    ledger = LedgerProcessor([gate, below], sinks=[sink], max_tracked_spans=4)
    worker = OffThreadProcessor([ledger], max_queue_size=1)
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    early = tracer.start_span("early")  # started before the chain was attached: never tracked
    provider.add_span_processor(worker)
    tool = {semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "search"}
    with tracer.start_as_current_span(
        "invoke_agent live", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
    ):
        run = tracer.start_span(
            "invoke_agent lost", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
        )
        with trace.use_span(run):
            tracer.start_span("execute_tool search", attributes=tool).end()
            assert worker.force_flush()  # its books are open, with one entry
            tracer.start_span("stuck").end()
            assert gate.entered.wait(10)  # the worker holds "stuck": the queue has room for one span
            tracer.start_span("execute_tool queued", attributes=tool).end()  # queued
            tracer.start_span("execute_tool dropped", attributes=tool).end()  # dropped: its note freed
        run.end()  # dropped: its books freed unreconciled
        tracer.start_span(
            "invoke_agent idle", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
        ).end()
        early.end()
        for index in range(6):  # more dropped spans than the ledger tracks: none stays tracked
            tracer.start_span(f"other-{index}").end()
        gate.release.set()
        assert worker.force_flush()
        tracer.start_span("execute_tool after", attributes={**tool, semconv.GEN_AI_TOOL_CALL_ID: "c1"}).end()
        assert worker.force_flush()  # the queue holds one span: let the run's end find room
    assert worker.force_flush()
    stats = tallyspan.stats()
    assert stats["dropped.spans"] == 10
    assert stats["dropped.ledger_runs"] == 1
    assert stats["dropped.ledger_late_entries"] == 1  # "queued" reached a run already given up
    assert not any(key.startswith("errors.") for key in stats)
    assert below.forgotten == ["execute_tool dropped", "invoke_agent lost", "invoke_agent idle", "early"] + [
        f"other-{i}" for i in range(6)
    ]
    assert [record.run_name for record in sink.records] == ["invoke_agent live"]
    (record,) = sink.records
    assert record.observed_count == 1  # the live run kept its note through the burst
    provider.shutdown()


def test_every_record_carries_its_trace_even_when_its_books_were_opened_by_verdicts(chain: _Chain) -> None:
    with chain.run("invoke_agent empty") as empty:
        pass
    with (
        chain.run("invoke_agent flagged") as flagged,
        chain.tracer.start_as_current_span("chat m", attributes={semconv.VIOLATION_TYPES: ["too_short"]}),
    ):
        pass
    assert {record.run_name: record.trace_id for record in chain.sink.records} == {
        "invoke_agent empty": empty.get_span_context().trace_id,
        "invoke_agent flagged": flagged.get_span_context().trace_id,
    }


def test_a_nested_run_rolls_up_its_own_violations_and_those_below_it(chain: _Chain) -> None:
    with (
        chain.run("invoke_agent outer"),
        chain.run("invoke_agent inner", **{semconv.VIOLATION_TYPES: ["not_json"]}),
    ):
        chain.tool("search", "c1", **{semconv.VIOLATION_TYPES: ["too_short"]})
    outer = _attrs(chain.finished("invoke_agent outer"))
    assert outer[semconv.RUN_VIOLATION_COUNT] == 2
    assert outer[semconv.RUN_VIOLATION_TYPES] == ["not_json", "too_short"]


def test_shutting_down_twice_shuts_the_sinks_down_once(chain: _Chain) -> None:
    chain.processor.shutdown()
    chain.processor.shutdown()
    assert chain.sink.shutdowns == 1


def test_a_span_whose_start_the_ledger_missed_belongs_to_its_parents_run() -> None:
    """As when on_start failed for it (logged, counted): the span's parent's run is its run."""
    sink = _CallsSink()
    exporter = InMemorySpanExporter()
    ledger = LedgerProcessor([SimpleSpanProcessor(exporter)], sinks=[sink])
    tracer = TracerProvider().get_tracer("test")  # real spans; the ledger is driven by hand
    run = tracer.start_span("invoke_agent a", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"})
    ledger.on_start(run)  # type: ignore[arg-type]
    with trace.use_span(run):
        missed = tracer.start_span(
            "execute_tool search", attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool"}
        )
    with trace.use_span(missed):
        orphan = tracer.start_span(
            "execute_tool fetch", attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool"}
        )
    remote = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=1,
            span_id=run.get_span_context().span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(1),
        )
    )
    with trace.use_span(remote):
        called = tracer.start_span(
            "execute_tool remote", attributes={semconv.GEN_AI_OPERATION_NAME: "execute_tool"}
        )
    for span in (missed, orphan, called, run):
        span.end()
        ledger.on_end(span)  # type: ignore[arg-type]
    ledger.shutdown()
    runs = {record.run_name: record.observed_count for record in sink.records}
    assert runs == {"invoke_agent a": 1, "execute_tool fetch": 1, "execute_tool remote": 1}
    assert not any(key.startswith("errors.") for key in tallyspan.stats())


def test_nested_runs_over_the_tracking_bound_forget_the_oldest_first() -> None:
    """Runs nested four deep, with room to remember two: the two innermost still roll up into theirs."""
    chain = _Chain(max_tracked_spans=2)
    agent = {semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}
    outer = chain.tracer.start_span("invoke_agent outer", attributes=agent)
    with trace.use_span(outer):
        first = chain.tracer.start_span("invoke_agent first", attributes=agent)
    with trace.use_span(first):
        second = chain.tracer.start_span(
            "invoke_agent second", attributes={**agent, semconv.VIOLATION_TYPES: ["too_short"]}
        )
    with trace.use_span(second):
        third = chain.tracer.start_span(
            "invoke_agent third", attributes={**agent, semconv.VIOLATION_TYPES: ["not_json"]}
        )
    for span in (third, second, first, outer):
        span.end()
    rolled = _attrs(chain.finished("invoke_agent first"))
    assert rolled[semconv.RUN_VIOLATION_COUNT] == 2
    assert rolled[semconv.RUN_VIOLATION_TYPES] == ["not_json", "too_short"]
    chain.close()
