"""The ledger end to end: the real OpenAI client on the local server, a tool-calling loop whose model
logs each call through ``log_action`` except one, through ``tallyspan.instrument()``; the run span and
the OTLP log records (decoded by a real OTLP/HTTP receiver) must show exactly the one unlogged call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.conftest import MakeInstrumented
from tests.recording import RecordingLedgerSink

import tallyspan
from tallyspan import semconv
from tallyspan._store._store_schema import connect
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall


def _log(call_id: str, tool_name: str, outcome: str, summary: str) -> dict[str, str]:
    return {"call_id": call_id, "tool_name": tool_name, "claimed_outcome": outcome, "summary": summary}


SCRIPT = [
    ScriptedReply(tool_calls=[ScriptedToolCall("search_flights", {"origin": "JFK", "destination": "SEA"}, "c1")]),
    ScriptedReply(tool_calls=[ScriptedToolCall("log_action", _log("c1", "search_flights", "succeeded", "3"), "L1")]),
    ScriptedReply(tool_calls=[ScriptedToolCall("book_flight", {"flight": "HAT001"}, "c2")]),
    # the model never logs the refused booking (c2) and goes on
    ScriptedReply(tool_calls=[ScriptedToolCall("get_user", {"user_id": "mia_li_3668"}, "c3")]),
    ScriptedReply(tool_calls=[ScriptedToolCall("log_action", _log("c3", "get_user", "succeeded", "found Mia"), "L3")]),
    ScriptedReply(text="Your booking could not be completed."),
]  # fmt: skip


@tallyspan.tool
def search_flights(origin: str, destination: str, tool_call_id: str) -> list[str]:
    return ["HAT001", "HAT002", "HAT003"]


@tallyspan.tool(risk="high")
def book_flight(flight: str, tool_call_id: str) -> str:
    raise tallyspan.Rejected("payment method not allowed by policy")


@tallyspan.tool
def get_user(user_id: str, tool_call_id: str) -> dict[str, str]:
    return {"name": "Mia Li"}


@tallyspan.tool
def log_action(call_id: str, tool_name: str, claimed_outcome: str, summary: str, tool_call_id: str) -> str:
    return "logged"


TOOLS: dict[str, Any] = {
    "search_flights": search_flights,
    "book_flight": book_flight,
    "get_user": get_user,
    "log_action": log_action,
}


def _agent(client: openai.OpenAI, *, execute_log_calls: bool) -> str:
    """A plain tool-calling loop, as an agent harness writes it."""
    messages: list[Any] = [{"role": "user", "content": "Book me JFK to SEA on May 20."}]
    with tallyspan.run("airline_agent"):
        for _ in range(10):
            reply = client.chat.completions.create(model="gpt-4o", messages=messages).choices[0].message
            if not reply.tool_calls:
                return reply.content or ""
            messages.append(reply.model_dump(exclude_none=True))
            for call in reply.tool_calls:
                assert call.type == "function"
                if call.function.name == "log_action" and not execute_log_calls:
                    result: Any = "noted"  # the harness takes the log call as read, without running a tool
                else:
                    try:
                        result = TOOLS[call.function.name](
                            **json.loads(call.function.arguments), tool_call_id=call.id
                        )
                    except tallyspan.Rejected as refusal:
                        result = f"refused: {refusal}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise AssertionError("the loop did not end")


def _values(record: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for kv in record.attributes:
        kind = kv.value.WhichOneof("value")
        if kind == "array_value":
            values[kv.key] = tuple(v.string_value for v in kv.value.array_value.values)
        else:
            values[kv.key] = getattr(kv.value, kind)
    return values


@pytest.mark.parametrize(
    "execute_log_calls", [True, False], ids=["harness-runs-log-tool", "model-requests-only"]
)
def test_one_unlogged_call_unbalances_the_run_span_and_the_otlp_log_records(
    execute_log_calls: bool,
    otlp_receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    span_exporter: InMemorySpanExporter,
    db_path: Path,
    make_instrumented: MakeInstrumented,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", f"{otlp_receiver.endpoint}/v1/logs")
    instrumentation = make_instrumented(instrumentors=["tallyspan_openai"]).instrumentation
    with (
        OpenAICompatibleServer(replies=SCRIPT) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        assert _agent(client, execute_log_calls=execute_log_calls) == "Your booking could not be completed."
    assert instrumentation.force_flush(10_000) is True

    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans if s.name.startswith("chat")] == ["chat gpt-4o"] * 6
    (run,) = [s for s in spans if s.name == "invoke_agent airline_agent"]
    attributes = dict(run.attributes or {})
    assert attributes[semconv.LEDGER_BALANCED] is False
    assert attributes[semconv.LEDGER_PROTOCOL_OK] is True
    assert attributes[semconv.LEDGER_DISCREPANCY_TYPES] == ("unlogged_refusal",)
    assert attributes[semconv.LEDGER_OBSERVED_COUNT] == 3
    assert attributes[semconv.LEDGER_CLAIMED_COUNT] == 2  # a log call requested and then run counts once
    assert run.status.status_code is StatusCode.ERROR
    entries = [dict(e.attributes or {}) for e in run.events if e.name == semconv.EVENT_LEDGER_ENTRY]
    assert [
        (e[semconv.LEDGER_SIDE], e[semconv.LEDGER_CALL_ID], e[semconv.LEDGER_OUTCOME]) for e in entries
    ] == [
        ("observed", "c1", "succeeded"),
        ("claimed", "c1", "succeeded"),
        ("observed", "c2", "rejected"),
        ("observed", "c3", "succeeded"),
        ("claimed", "c3", "succeeded"),
    ]
    (discrepancy,) = [
        dict(e.attributes or {}) for e in run.events if e.name == semconv.EVENT_LEDGER_DISCREPANCY
    ]
    assert discrepancy == {
        semconv.LEDGER_DISCREPANCY_TYPE: "unlogged_refusal",
        semconv.LEDGER_CALL_ID: "c2",
        semconv.LEDGER_DETAIL: "book_flight rejected, not logged",
    }

    with otlp_receiver.lock:
        records = list(otlp_receiver.log_records)
    assert [r.event_name for r in records] == [semconv.EVENT_LEDGER_ENTRY] * 5 + [
        semconv.EVENT_LEDGER_RECONCILIATION
    ]
    trace_hex = format(run.context.trace_id, "032x")
    run_hex = format(run.context.span_id, "016x")
    assert {r.trace_id.hex() for r in records} == {trace_hex}
    observed_spans = {
        (s.attributes or {})[semconv.GEN_AI_TOOL_CALL_ID]: format(s.context.span_id, "016x")
        for s in spans
        if s.name.startswith("execute_tool") and s.name != "execute_tool log_action"
    }
    entry_values = [_values(r) for r in records[:5]]
    assert [
        (v[semconv.LEDGER_SIDE], v[semconv.LEDGER_SEQ], v[semconv.LEDGER_CALL_ID]) for v in entry_values
    ] == [
        ("observed", 0, "c1"),
        ("claimed", 1, "c1"),
        ("observed", 2, "c2"),
        ("observed", 3, "c3"),
        ("claimed", 4, "c3"),
    ]
    assert {v[semconv.LEDGER_RUN_SPAN_ID] for v in entry_values} == {run_hex}
    assert records[2].span_id.hex() == observed_spans["c2"]  # each entry points at the span it came from
    reconciliation = _values(records[5])
    assert records[5].span_id.hex() == run_hex
    assert reconciliation[semconv.LEDGER_BALANCED] is False
    assert reconciliation[semconv.LEDGER_DISCREPANCY_TYPES] == ("unlogged_refusal",)
    assert reconciliation[semconv.RUN_NAME] == "airline_agent"
    assert records[5].severity_text == "WARN"

    db = connect(db_path)
    (row,) = db.execute(
        "SELECT balanced, discrepancy_types, observed_count, claimed_count FROM ledger_reconciliations"
    )
    assert tuple(row) == (0, '["unlogged_refusal"]', 3, 2)
    db.close()


def test_a_ledger_sink_passed_to_instrument_gets_both_columns_and_the_reconciliation(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    sink = RecordingLedgerSink()
    assert isinstance(sink, tallyspan.ledger.LedgerSink)
    tallyspan.instrument(
        tracer_provider=tracer_provider,
        store=db_path,
        instrumentors=["tallyspan_openai"],
        ledger_sinks=[sink],
    )
    with (
        OpenAICompatibleServer(replies=SCRIPT) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        _agent(client, execute_log_calls=True)
    tallyspan.uninstrument()

    assert [(e.side, e.call_id, e.outcome) for e in sink.entries] == [
        ("observed", "c1", "succeeded"),
        ("claimed", "c1", "succeeded"),
        ("observed", "c2", "rejected"),
        ("observed", "c3", "succeeded"),
        ("claimed", "c3", "succeeded"),
    ]
    (record,) = sink.records
    assert record.run_name == "airline_agent"
    assert record.reconciliation.balanced is False
    assert [d.type for d in record.reconciliation.discrepancies] == ["unlogged_refusal"]
    assert sink.shutdowns == 1
    db = connect(db_path)
    assert (
        db.execute("SELECT count(*) FROM ledger_reconciliations").fetchone()[0] == 1
    )  # the store still gets it
    db.close()
