"""Stores for the CLI tests.

``recorded``: written by the real chain (``tallyspan.instrument()``, a real OpenAI client, a local model,
and opentelemetry-instrumentation-openai-v2 side by side for one run). ``filled``: hand-made spans
through the real exporter, and a ledger row as the sink writes it, for the oldest pinned documents.
"""

from __future__ import annotations

import json
import locale
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tqdm import tqdm

import tallyspan
from tallyspan import semconv
from tallyspan._store._store_schema import connect
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall
from tallyspan_exporters import SQLiteSpanExporter

# tqdm's default lock holds a multiprocessing semaphore, shared with every process forked after it was
# made, and its monitor thread takes it every 10 s. The mutation tool forks one process per mutant from
# one that ran these tests and ends each with os._exit or a kill: one ended while holding the semaphore
# left every later export bar waiting for it, each mutant a timeout. The tests need a lock per process.
tqdm.set_lock(threading.RLock())
tqdm.monitor_interval = 0


@pytest.fixture
def tokyo_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is Asia/Tokyo (nine hours ahead of UTC) for the test."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """The process's locale encoding is ASCII for the test, as under the C locale (a file opened without an
    encoding is read and written as ASCII)."""
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode reads every file as UTF-8 whatever the locale")
    saved = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)


@pytest.fixture
def store_without_spans(tmp_path: Path) -> Path:
    """A store written by a process that dropped a ledger claim before it exported any span: its counters
    are there, with no service name."""
    tallyspan.ledger.claim("c1", "search", "succeeded")  # outside any run: dropped and counted
    path = tmp_path / "lonely.db"
    exporter = SQLiteSpanExporter(path)
    exporter.export([])
    exporter.shutdown()
    return path


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


# --- a store written by the real chain -----------------------------------------------------------------

RECORDED_CONTRACTS = """\
contracts:
  weekly_report:
    language: ja
    min_chars: 60
    required:
      - name: verdict_line
        pattern: '(?m)^判定[:：]'
  triage:
    allow_refusal: false
"""
GOOD_REPORT = (
    "判定：合格\n今週の営業部は新規商談を十四件獲得し、受注は五件でした。来週は既存顧客への提案を強化し、"
    "解約の兆しがある三社を重点的に訪問します。"
)
#: The tokens each scripted reply reports, in the order of the calls: (input, output).
RECORDED_TOKENS = {
    "reporter_tool": (10, 5),
    "reporter": (20, 8),
    "booker": (30, 40),
    "triage": (5, 12),
    "both": (11, 7),
}


@dataclass(frozen=True)
class Recorded:
    """A store written by ``tallyspan.instrument()`` around a real OpenAI client and a local model.

    Traces, in the order they were recorded (``reporter`` was then moved three days back):

    - ``reporter``: a run; a tool call (claimed, so the books balance), then a weekly report in English,
      too short and without its verdict line;
    - ``booker``: a run; a tool call nobody logged (its books do not balance), then a good report;
    - ``triage``: a call outside any run, in stage ``triage``: a refusal;
    - ``both``: a run whose one call is also traced by opentelemetry-instrumentation-openai-v2: tallyspan
      joins its span, so the store has one chat span for it (openai-v2's, with our stage and verdicts).

    A claim made outside any run was dropped, and the store recorded the counter.
    """

    path: Path
    contracts: Path
    trace_ids: dict[str, str]

    def copy(self, target: Path) -> Path:
        """A private copy of the store, for a test that changes it."""
        source, copy = sqlite3.connect(self.path), sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            source.close()
            copy.close()
        return target


def age_trace(db_path: Path, trace_id: str, days: float) -> None:
    """Move every row of one trace ``days`` into the past, as if it had been recorded then."""
    shift = int(days * 86400e9)
    db = connect(db_path)
    with db:
        db.execute(
            "UPDATE spans SET start_unix_nano = start_unix_nano - ?, end_unix_nano = end_unix_nano - ?"
            " WHERE trace_id = ?",
            (shift, shift, trace_id),
        )
        db.execute(
            "UPDATE runs SET start_unix_nano = start_unix_nano - ?, end_unix_nano = end_unix_nano - ?"
            " WHERE trace_id = ?",
            (shift, shift, trace_id),
        )
        for table in ("ledger_entries", "ledger_reconciliations"):
            db.execute(
                f"UPDATE {table} SET time_unix_nano = time_unix_nano - ? WHERE trace_id = ?",
                (shift, trace_id),
            )
    db.close()


def _reply(name: str, **fields: Any) -> ScriptedReply:
    prompt_tokens, completion_tokens = RECORDED_TOKENS[name]
    return ScriptedReply(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, **fields)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The store of ``Recorded``, written once for the session; use ``copy()`` to change it."""
    import openai
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIV2Instrumentor

    folder = tmp_path_factory.mktemp("recorded")
    db_path, contracts = folder / "tallyspan.db", folder / "contracts.yaml"
    contracts.write_text(RECORDED_CONTRACTS, encoding="utf-8")
    replies = [
        _reply("reporter_tool", tool_calls=[ScriptedToolCall("search", {"query": "売上"}, "call_r1")]),
        _reply("reporter", text="Sales went well this week."),
        _reply("booker", text=GOOD_REPORT),
        _reply("triage", text="申し訳ありませんが、そのご依頼にはお応えできません。"),
        _reply("both", text=GOOD_REPORT),
    ]
    tallyspan.reset_stats()
    provider = TracerProvider()
    instrumentation = tallyspan.instrument(
        contracts=contracts, tracer_provider=provider, store=db_path, instrumentors=["tallyspan_openai"]
    )

    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return f"{query}: 14"

    @tallyspan.tool
    def book(flight: str, tool_call_id: str) -> str:
        return f"booked {flight}"

    def ask(client: openai.OpenAI, stage: str | None) -> Any:
        messages: list[Any] = [{"role": "user", "content": "今週の報告を書いてください。"}]
        if stage is None:
            return client.chat.completions.create(model="qwen3-32b", messages=messages)
        with tallyspan.stage(stage):
            return client.chat.completions.create(model="qwen3-32b", messages=messages)

    trace_ids: dict[str, str] = {}
    try:
        with (
            OpenAICompatibleServer(replies=replies) as server,
            openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client,
        ):
            with tallyspan.run("reporter") as span:
                call = ask(client, None).choices[0].message.tool_calls[0]
                search(**json.loads(call.function.arguments), tool_call_id=call.id)
                tallyspan.ledger.claim(call.id, "search", "succeeded")
                ask(client, "weekly_report")
            trace_ids["reporter"] = format(span.get_span_context().trace_id, "032x")
            with tallyspan.run("booker") as span:
                book("HND-CTS", tool_call_id="call_b1")  # never logged
                ask(client, "weekly_report")
            trace_ids["booker"] = format(span.get_span_context().trace_id, "032x")
            ask(client, "triage")
            trace_ids["triage"] = _latest_trace(instrumentation, db_path, "triage")
            tallyspan.ledger.claim("call_x", "search", "succeeded")  # outside any run: dropped, counted
            side_by_side = OpenAIV2Instrumentor()  # type: ignore[no-untyped-call]
            side_by_side.instrument(tracer_provider=provider)
            try:
                with tallyspan.run("both") as span:
                    ask(client, "weekly_report")
            finally:
                side_by_side.uninstrument()
            trace_ids["both"] = format(span.get_span_context().trace_id, "032x")
        instrumentation.force_flush()
    finally:
        tallyspan.uninstrument()
        provider.shutdown()
    age_trace(db_path, trace_ids["reporter"], days=3)
    return Recorded(db_path, contracts, trace_ids)


def _latest_trace(instrumentation: tallyspan.Instrumentation, db_path: Path, stage: str) -> str:
    """The trace of the latest span of ``stage`` in the store (a call outside any run has no span of ours)."""
    instrumentation.force_flush()
    db = connect(db_path)
    try:
        row = db.execute(
            "SELECT trace_id FROM spans WHERE stage = ? ORDER BY start_unix_nano DESC LIMIT 1", (stage,)
        ).fetchone()
    finally:
        db.close()
    return str(row[0])
