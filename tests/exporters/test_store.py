"""The embedded store: migrations from a blank database, idempotency, and export of real spans."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from tests.core.test_json_encoding import TRICKY_ATTRIBUTES

import tallyspan
from tallyspan import semconv
from tallyspan._state import Settings
from tallyspan._store import _store_schema
from tallyspan._store._store_queries import LedgerRun, ledger_runs
from tallyspan._store._store_schema import MIGRATIONS, applied_migrations, connect, migrate
from tallyspan_exporters import SQLiteSpanExporter, store_component
from tallyspan_processors._worker import DEFAULT_MAX_QUEUE_SIZE

ALL_MIGRATIONS = ["m001_initial", "m002_run_balance_only_in_reconciliations", "m003_self_stats"]


@pytest.fixture
def store(db_path: Path) -> Iterator[sqlite3.Connection]:
    db = connect(db_path)
    yield db
    db.close()


@pytest.fixture
def exporter(db_path: Path) -> Iterator[SQLiteSpanExporter]:
    exporter = SQLiteSpanExporter(db_path)
    yield exporter
    exporter.shutdown()


@pytest.fixture
def provider(exporter: SQLiteSpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "weekly-reports"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row["name"] for row in db.execute(f"PRAGMA table_info({table})")]


_COMPACT_SORTED: dict[str, Any] = {"ensure_ascii": False, "sort_keys": True, "separators": (",", ":")}


def _rows(db_path: Path, sql: str) -> list[dict[str, object]]:
    db = connect(db_path)
    try:
        return [dict(row) for row in db.execute(sql)]
    finally:
        db.close()


# --- connect and migrations ------------------------------------------------------------------------


def test_connect_creates_the_folder_and_applies_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.db"
    db = connect(path)
    try:
        assert path.is_file()
        assert applied_migrations(db) == [function.__name__ for function in MIGRATIONS] == ALL_MIGRATIONS
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {
            "_tallyspan_migrations",
            "runs",
            "spans",
            "violations",
            "ledger_entries",
            "ledger_reconciliations",
            "self_stats",
        }
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] == _store_schema.BUSY_TIMEOUT_MS
        assert db.execute("PRAGMA page_size").fetchone()[0] == _store_schema.PAGE_SIZE == 16384
    finally:
        db.close()


def test_a_store_made_with_smaller_pages_keeps_them_and_takes_every_span(db_path: Path) -> None:
    # A store made before the page size was set: SQLite's default 4096 bytes, in WAL mode already.
    old = sqlite3.connect(db_path, isolation_level=None)
    old.execute("PRAGMA page_size = 4096")
    old.execute("PRAGMA journal_mode = WAL")
    old.close()
    connect(db_path).close()  # the schema, as tallyspan made it then
    exporter = SQLiteSpanExporter(db_path)
    try:
        assert exporter.export(_finished_spans(_agent_run)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert _rows(db_path, "PRAGMA page_size") == [{"page_size": 4096}]
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM spans") == [{"n": 3}]
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM violations") == [{"n": 2}]
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM runs") == [{"n": 1}]


def test_connecting_again_applies_nothing_and_keeps_the_data(db_path: Path) -> None:
    first = connect(db_path)
    first.execute("INSERT INTO ledger_entries (trace_id, side, seq) VALUES ('t', 'observed', 1)")
    first.close()
    second = connect(db_path)
    try:
        assert migrate(second) == []
        assert applied_migrations(second) == ALL_MIGRATIONS
        assert second.execute("SELECT COUNT(*) FROM ledger_entries").fetchone()[0] == 1
    finally:
        second.close()


def test_a_new_migration_is_applied_once_to_an_existing_store(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect(db_path).close()
    calls: list[str] = []

    def m999_add_notes(db: sqlite3.Connection) -> None:
        calls.append("m002")
        db.execute("ALTER TABLE runs ADD COLUMN notes TEXT")

    monkeypatch.setattr(_store_schema, "MIGRATIONS", [*MIGRATIONS, m999_add_notes])
    db = connect(db_path)
    db.close()
    db = connect(db_path)
    try:
        assert calls == ["m002"]
        assert applied_migrations(db) == [*ALL_MIGRATIONS, "m999_add_notes"]
        assert "notes" in _columns(db, "runs")
    finally:
        db.close()


def test_a_failing_migration_is_rolled_back_and_not_recorded(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect(db_path).close()

    def m999_broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half_done (x INTEGER)")
        db.execute("THIS IS NOT SQL")

    monkeypatch.setattr(_store_schema, "MIGRATIONS", [*MIGRATIONS, m999_broken])
    with pytest.raises(sqlite3.OperationalError):
        connect(db_path)
    monkeypatch.undo()
    db = connect(db_path)
    try:
        assert applied_migrations(db) == ALL_MIGRATIONS
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchone() is None
    finally:
        db.close()


def test_an_old_store_opens_with_each_run_balance_stored_once_and_nothing_lost(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store as tallyspan wrote it before m002: the balance on the run's row, and (for the first run
    # only) the ledger sink's reconciliation too; the third run is a local root nobody reconciled.
    monkeypatch.setattr(_store_schema, "MIGRATIONS", MIGRATIONS[:1])
    old = connect(db_path)
    old.executemany(
        "INSERT INTO runs (trace_id, span_id, name, operation, agent_name, run_name, start_unix_nano,"
        " end_unix_nano, status_code, ledger_balanced, ledger_protocol_ok, ledger_discrepancy_types)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            ("t1", "s1", "invoke_agent a", "invoke_agent", "a", None, 10, 20, "UNSET", 0, 1, '["unlogged_call"]'),
            ("t2", "s2", "invoke_agent b", "invoke_agent", "b", "weekly", 30, 40, "ERROR", 0, 0,
             '["phantom_log", "self_logged"]'),
            ("t3", "s3", "chat x", "chat", None, None, 50, 60, "UNSET", None, None, "[]"),
        ],
    )  # fmt: skip
    old.execute(
        "INSERT INTO ledger_reconciliations VALUES ('t1', 's1', 'a', 0, 1, '[\"unlogged_call\"]',"
        ' \'[{"type": "unlogged_call", "call_id": "c2", "detail": "x"}]\', 2, 1, 25)'
    )
    old.close()
    monkeypatch.undo()

    db = connect(db_path)
    try:
        assert applied_migrations(db) == ALL_MIGRATIONS
        assert _columns(db, "runs") == [
            "trace_id", "span_id", "name", "operation", "agent_name", "run_name", "start_unix_nano",
            "end_unix_nano", "status_code",
        ]  # fmt: skip
        assert [tuple(row) for row in db.execute("SELECT trace_id, span_id, status_code FROM runs")] == [
            ("t1", "s1", "UNSET"),
            ("t2", "s2", "ERROR"),
            ("t3", "s3", "UNSET"),
        ]
        # What the report showed of the old store, now read from the reconciliations alone.
        assert ledger_runs(db) == [
            LedgerRun("t1", "s1", "a", False, True, ["unlogged_call"], 2, 1),
            LedgerRun("t2", "s2", "weekly", False, False, ["phantom_log", "self_logged"], None, None),
        ]
        moved = db.execute(
            "SELECT time_unix_nano, discrepancies FROM ledger_reconciliations WHERE trace_id = 't2'"
        )
        assert tuple(moved.fetchone()) == (40, "[]")  # stamped with the run's end
    finally:
        db.close()


def test_the_ledger_tables_have_exactly_the_agreed_columns(store: sqlite3.Connection) -> None:
    assert _columns(store, "ledger_entries") == [
        "trace_id", "run_span_id", "side", "seq", "call_id", "tool_name", "outcome", "summary", "span_id",
        "time_unix_nano",
    ]  # fmt: skip
    assert _columns(store, "ledger_reconciliations") == [
        "trace_id", "run_span_id", "run_name", "balanced", "protocol_ok", "discrepancy_types",
        "discrepancies", "observed_count", "claimed_count", "time_unix_nano",
    ]  # fmt: skip


def _finished_spans(make: Callable[[TracerProvider], object]) -> tuple[ReadableSpan, ...]:
    """The spans ``make`` ends on a provider of its own, collected in memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    make(provider)
    provider.shutdown()
    return memory.get_finished_spans()


# --- the exporter ----------------------------------------------------------------------------------


def _agent_run(provider: TracerProvider) -> tuple[trace.Span, trace.Span, trace.Span]:
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "invoke_agent reporter",
        attributes={
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: "reporter",
            semconv.RUN_NAME: "weekly",
            semconv.LEDGER_BALANCED: False,
            semconv.LEDGER_PROTOCOL_OK: True,
            semconv.LEDGER_DISCREPANCY_TYPES: ["unlogged_call"],
        },
    ) as run:
        with tracer.start_as_current_span(
            "chat qwen3",
            kind=trace.SpanKind.CLIENT,
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
                semconv.GEN_AI_PROVIDER_NAME: semconv.PROVIDER_OPENAI,
                semconv.GEN_AI_REQUEST_MODEL: "qwen3",
                semconv.GEN_AI_RESPONSE_MODEL: "qwen3-32b",
                semconv.GEN_AI_USAGE_INPUT_TOKENS: 120,
                semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
                semconv.STAGE: "weekly_report",
                semconv.VIOLATION_TYPES: ["missing_required", "too_short"],
                semconv.VIOLATION_COUNT: 2,
                semconv.FAILURE_CLASS: "contract_violation",
            },
        ) as chat:
            chat.add_event(
                semconv.EVENT_VIOLATION,
                {
                    semconv.VIOLATION_TYPE: "too_short",
                    semconv.VIOLATION_FAILURE_CLASS: "contract_violation",
                    semconv.VIOLATION_DETAIL: "12 chars < min_chars 150",
                },
            )
            chat.add_event(
                semconv.EVENT_VIOLATION,
                {
                    semconv.VIOLATION_TYPE: "missing_required",
                    semconv.VIOLATION_FAILURE_CLASS: "contract_violation",
                    semconv.VIOLATION_DETAIL: "pattern 'verdict_line' not found",
                },
            )
            chat.set_status(Status(StatusCode.ERROR, "contract_violation: too_short"))
        with tracer.start_as_current_span(
            "execute_tool fetch",
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL,
                semconv.GEN_AI_TOOL_NAME: "fetch",
                semconv.ERROR_TYPE: "TimeoutError",
            },
        ) as tool:
            pass
    return run, chat, tool


def test_exports_real_spans_with_their_runs_and_violations(provider: TracerProvider, db_path: Path) -> None:
    run, chat, _tool = _agent_run(provider)
    trace_id = format(run.get_span_context().trace_id, "032x")
    run_id = format(run.get_span_context().span_id, "016x")
    chat_id = format(chat.get_span_context().span_id, "016x")

    spans = {row["name"]: row for row in _rows(db_path, "SELECT * FROM spans")}
    assert len(spans) == 3
    row = spans["chat qwen3"]
    start, end = chat.start_time, chat.end_time  # type: ignore[attr-defined]
    assert row == {
        "trace_id": trace_id,
        "span_id": chat_id,
        "parent_span_id": run_id,
        "name": "chat qwen3",
        "kind": "client",
        "operation": "chat",
        "provider": "openai",
        "request_model": "qwen3",
        "response_model": "qwen3-32b",
        "stage": "weekly_report",
        "start_unix_nano": start,
        "end_unix_nano": end,
        "duration_ns": end - start,
        "status_code": "ERROR",
        "status_description": "contract_violation: too_short",
        "error_type": None,
        "input_tokens": 120,
        "output_tokens": 7,
        "violation_count": 2,
        "violation_types": '["missing_required","too_short"]',
        "failure_class": "contract_violation",
        "service_name": "weekly-reports",
        "attributes": row["attributes"],
    }
    assert json.loads(str(row["attributes"]))[semconv.GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert json.loads(str(row["attributes"]))[semconv.VIOLATION_TYPES] == ["missing_required", "too_short"]
    assert len(trace_id) == 32
    assert len(chat_id) == 16
    assert spans["execute_tool fetch"]["error_type"] == "TimeoutError"
    assert spans["invoke_agent reporter"]["parent_span_id"] is None

    assert _rows(db_path, "SELECT trace_id, span_id, stage, type, failure_class, detail FROM violations") == [
        {
            "trace_id": trace_id,
            "span_id": chat_id,
            "stage": "weekly_report",
            "type": "too_short",
            "failure_class": "contract_violation",
            "detail": "12 chars < min_chars 150",
        },
        {
            "trace_id": trace_id,
            "span_id": chat_id,
            "stage": "weekly_report",
            "type": "missing_required",
            "failure_class": "contract_violation",
            "detail": "pattern 'verdict_line' not found",
        },
    ]
    assert _rows(db_path, "SELECT * FROM runs") == [
        {
            "trace_id": trace_id,
            "span_id": run_id,
            "name": "invoke_agent reporter",
            "operation": "invoke_agent",
            "agent_name": "reporter",
            "run_name": "weekly",
            "start_unix_nano": run.start_time,  # type: ignore[attr-defined]
            "end_unix_nano": run.end_time,  # type: ignore[attr-defined]
            "status_code": "UNSET",
        }
    ]  # the run's balance is the ledger sink's to store, in ledger_reconciliations


def test_violation_types_without_events_give_one_row_per_type(
    provider: TracerProvider, db_path: Path
) -> None:
    with provider.get_tracer("test").start_as_current_span(
        "chat m",
        attributes={semconv.STAGE: "s", semconv.VIOLATION_TYPES: ["not_japanese", "made_up_type"]},
    ):
        pass
    assert _rows(db_path, "SELECT stage, type, failure_class, detail FROM violations ORDER BY type") == [
        {"stage": "s", "type": "made_up_type", "failure_class": None, "detail": None},
        {"stage": "s", "type": "not_japanese", "failure_class": "language_corruption", "detail": None},
    ]
    assert _rows(db_path, "SELECT violation_count FROM spans") == [{"violation_count": 2}]


def test_a_local_root_is_a_run_and_a_child_without_run_operation_is_not(
    provider: TracerProvider, db_path: Path
) -> None:
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("handle request"), tracer.start_as_current_span("chat m"):
        pass
    assert _rows(db_path, "SELECT name, operation FROM runs") == [
        {"name": "handle request", "operation": None}
    ]


def test_a_root_whose_parent_is_in_another_process_is_a_run(provider: TracerProvider, db_path: Path) -> None:
    """An agent called over HTTP: its server span's parent is remote, and it is a run here."""
    remote_parent = trace.NonRecordingSpan(
        trace.SpanContext(trace_id=0x1234, span_id=0x5678, is_remote=True, trace_flags=trace.TraceFlags(1))
    )
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("POST /agent", context=trace.set_span_in_context(remote_parent)),
        tracer.start_as_current_span("chat m"),
    ):
        pass
    assert _rows(db_path, "SELECT name, trace_id FROM runs") == [
        {"name": "POST /agent", "trace_id": format(0x1234, "032x")}
    ]


def test_exporting_a_span_again_replaces_its_rows(exporter: SQLiteSpanExporter, db_path: Path) -> None:
    collected = _finished_spans(_agent_run)
    assert exporter.export(collected) is SpanExportResult.SUCCESS
    assert exporter.export(collected) is SpanExportResult.SUCCESS
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM spans") == [{"n": 3}]
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM violations") == [{"n": 2}]
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM runs") == [{"n": 1}]


def test_spans_from_many_threads_are_all_written(provider: TracerProvider, db_path: Path) -> None:
    tracer = provider.get_tracer("test")

    def work(index: int) -> None:
        for number in range(20):
            with tracer.start_as_current_span(f"chat {index}-{number}"):
                pass

    threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM spans") == [{"n": 80}]


def test_an_unwritable_path_fails_the_export_without_raising(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    exporter = SQLiteSpanExporter(blocker / "tallyspan.db")
    collected = _finished_spans(_agent_run)
    assert exporter.export(collected) is SpanExportResult.FAILURE
    assert exporter.export(collected) is SpanExportResult.FAILURE
    assert tallyspan.stats()["errors.store.write"] == 2
    exporter.shutdown()


def test_a_corrupt_database_file_fails_the_export_without_raising(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not an SQLite database" * 100)
    exporter = SQLiteSpanExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("chat m"):
        pass  # the SimpleSpanProcessor exports here: nothing may escape into the app
    assert tallyspan.stats()["errors.store.write"] == 1
    provider.shutdown()


def test_export_after_shutdown_fails(exporter: SQLiteSpanExporter) -> None:
    exporter.shutdown()
    assert exporter.export([]) is SpanExportResult.FAILURE
    exporter.shutdown()  # twice is fine


def test_the_exporter_defaults_to_the_tallyspan_db_variable(db_path: Path) -> None:
    assert SQLiteSpanExporter().path == db_path


# --- the store component in instrument()'s chain ----------------------------------------------------


def test_store_component_writes_everything_by_force_flush(db_path: Path) -> None:
    processor = store_component((), Settings(db_path=db_path))
    assert processor is not None
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    for number in range(30):
        with tracer.start_as_current_span(f"chat {number}"):
            pass
    assert processor.force_flush()
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM spans") == [{"n": 30}]
    provider.shutdown()


def test_instrument_writes_enriched_spans_to_the_store(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    # No library instrumentors: this is about the chain ending in the store, and they are slow to import.
    instrumented = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    assert "store" in instrumented.components
    tracer = instrumented.tracer_provider.get_tracer("test")
    with tallyspan.run("reporter"), tracer.start_as_current_span("work"):
        pass
    assert instrumented.force_flush()
    names = sorted(str(row["name"]) for row in _rows(db_path, "SELECT name FROM spans"))
    assert names == ["invoke_agent reporter", "work"]
    assert _rows(db_path, "SELECT agent_name, run_name FROM runs") == [
        {"agent_name": "reporter", "run_name": "reporter"}
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_writes_through_its_own_connection(
    exporter: SQLiteSpanExporter, db_path: Path
) -> None:
    spans = _finished_spans(_agent_run)
    assert exporter.export(spans[:1]) is SpanExportResult.SUCCESS
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads; this child only writes SQLite.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: export the rest and report through the exit status
        os._exit(0 if exporter.export(spans[1:]) is SpanExportResult.SUCCESS else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert exporter.export(spans[:1]) is SpanExportResult.SUCCESS  # the parent's connection still works
    assert _rows(db_path, "SELECT COUNT(*) AS n FROM spans") == [{"n": 3}]


def test_the_store_keeps_a_whole_worker_queue_of_spans_written_in_one_burst(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    """The worker may hand the store 8192 spans at once; the store's batch queue must take them all."""
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    tracer = tracer_provider.get_tracer("test")
    for index in range(DEFAULT_MAX_QUEUE_SIZE):
        tracer.start_span(f"span-{index}").end()
    assert instrumentation.force_flush(60_000)
    db = connect(db_path)
    assert db.execute("SELECT count(*) FROM spans").fetchone()[0] == DEFAULT_MAX_QUEUE_SIZE
    db.close()
    assert "dropped.spans" not in tallyspan.stats()


def test_the_stored_attributes_are_the_sorted_json_of_the_span_attributes(
    exporter: SQLiteSpanExporter, db_path: Path
) -> None:
    finite = {key: value for key, value in TRICKY_ATTRIBUTES.items() if key not in ("m.ints", "m.floats")}
    finite["m.ints"] = (1, -2, 2**63 - 1)
    finite["m.floats"] = (0.1, 1e300, -0.0)
    beyond = {"m.huge": 2**70, "m.nan": float("nan"), "m.text": "判定"}  # beyond orjson: the standard library
    spans = _finished_spans(
        lambda p: [
            p.get_tracer("test").start_span(f"chat {index}", attributes=a).end()
            for index, a in enumerate([TRICKY_ATTRIBUTES, finite, beyond])
        ]
    )
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    rows = _rows(db_path, "SELECT name, typeof(attributes) AS type, attributes FROM spans ORDER BY name")
    assert rows == [
        {"name": f"chat {index}", "type": "text", "attributes": json.dumps(a, **_COMPACT_SORTED)}
        for index, a in enumerate([TRICKY_ATTRIBUTES, finite, beyond])
    ]
    assert str(rows[1]["attributes"]).startswith('{"a.first":["stop","length"],"m.bools":[true,false]')
    # SQLite reads the column as JSON text, so the queries that look inside it work
    assert _rows(
        db_path, "SELECT json_extract(attributes, '$.\"m.ints\"[2]') AS n FROM spans WHERE name = 'chat 1'"
    ) == [{"n": 2**63 - 1}]


def test_a_lone_surrogate_in_an_attribute_is_stored_escaped_and_costs_no_span(
    exporter: SQLiteSpanExporter, db_path: Path
) -> None:
    """A provider's broken escape (``\\ud800``) decodes to a lone surrogate, which UTF-8 cannot hold: it
    used to fail the whole batch's transaction."""
    broken = "判定\ud800合格"
    spans = _finished_spans(
        lambda p: [
            p.get_tracer("test").start_span(name, attributes=attributes).end()
            for name, attributes in [("before", {}), ("broken", {"answer": broken}), ("after", {})]
        ]
    )
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    rows = _rows(db_path, "SELECT name, attributes FROM spans ORDER BY start_unix_nano")
    assert [row["name"] for row in rows] == ["before", "broken", "after"]
    assert rows[1]["attributes"] == '{"answer":"\\u5224\\u5b9a\\ud800\\u5408\\u683c"}'
    assert json.loads(str(rows[1]["attributes"])) == {"answer": broken}
    assert "dropped.store_spans" not in tallyspan.stats()
