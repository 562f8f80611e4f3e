"""A store filled the way a real run fills it: real spans through the exporter, ledger rows as the sink writes them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tallyspan import semconv
from tallyspan._store_schema import connect
from tallyspan_exporters import SQLiteSpanExporter


@dataclass(frozen=True)
class Filled:
    """The filled store and the spans in it, by name."""

    path: Path
    spans: dict[str, ReadableSpan]

    def trace_id(self, name: str) -> str:
        return format(self.spans[name].context.trace_id, "032x")

    def span_id(self, name: str) -> str:
        return format(self.spans[name].context.span_id, "016x")


def _violation(span: trace.Span, kind: str, failure_class: str, detail: str) -> None:
    span.add_event(
        semconv.EVENT_VIOLATION,
        {
            semconv.VIOLATION_TYPE: kind,
            semconv.VIOLATION_FAILURE_CLASS: failure_class,
            semconv.VIOLATION_DETAIL: detail,
        },
    )


def _record(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("test")
    chat = {semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT, semconv.GEN_AI_PROVIDER_NAME: "openai"}
    with tracer.start_as_current_span(
        "invoke_agent reporter",
        attributes={
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: "reporter",
            semconv.LEDGER_BALANCED: False,
            semconv.LEDGER_PROTOCOL_OK: True,
            semconv.LEDGER_DISCREPANCY_TYPES: ["unlogged_call"],
        },
    ):
        with tracer.start_as_current_span(
            "chat qwen3-32b",
            attributes={
                **chat,
                semconv.GEN_AI_REQUEST_MODEL: "qwen3-32b",
                semconv.GEN_AI_USAGE_INPUT_TOKENS: 100,
                semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 50,
                semconv.STAGE: "weekly_report",
                semconv.VIOLATION_TYPES: ["missing_required", "too_short"],
                semconv.VIOLATION_COUNT: 2,
                semconv.FAILURE_CLASS: "contract_violation",
            },
        ) as bad:
            _violation(bad, "too_short", "contract_violation", "12 chars < min_chars 150")
            _violation(bad, "missing_required", "contract_violation", "pattern 'verdict_line' not found")
        with tracer.start_as_current_span(
            "execute_tool fetch_metrics",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL,
                semconv.GEN_AI_TOOL_NAME: "fetch_metrics",
                semconv.ERROR_TYPE: "TimeoutError",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "chat qwen3-32b ok",
            attributes={
                **chat,
                semconv.GEN_AI_REQUEST_MODEL: "qwen3-32b",
                semconv.GEN_AI_USAGE_INPUT_TOKENS: 80,
                semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 200,
                semconv.STAGE: "weekly_report",
            },
        ):
            pass
    with tracer.start_as_current_span(
        "chat gpt-4o-mini",
        attributes={
            **chat,
            semconv.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
            semconv.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini-2024-07-18",
            semconv.GEN_AI_USAGE_INPUT_TOKENS: 10,
            semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 5,
            semconv.STAGE: "triage",
            semconv.VIOLATION_TYPES: ["not_japanese"],
        },
    ):
        pass


@pytest.fixture
def filled(db_path: Path) -> Filled:
    """The test's store (``TALLYSPAN_DB``) with two traces, two runs, one reconciliation."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _record(provider)
    provider.shutdown()
    spans = {span.name: span for span in memory.get_finished_spans()}
    exporter = SQLiteSpanExporter(db_path)
    exporter.export(list(spans.values()))
    exporter.shutdown()
    store = Filled(db_path, spans)
    db = connect(db_path)
    db.execute(
        "INSERT INTO ledger_reconciliations (trace_id, run_span_id, run_name, balanced, protocol_ok,"
        " discrepancy_types, discrepancies, observed_count, claimed_count, time_unix_nano)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            store.trace_id("invoke_agent reporter"),
            store.span_id("invoke_agent reporter"),
            "reporter",
            0,
            1,
            json.dumps(["unlogged_call"]),
            json.dumps(
                [{"type": "unlogged_call", "call_id": "call_2", "detail": "no log_action for call_2"}]
            ),
            2,
            1,
            1,
        ),
    )
    db.close()
    return store
