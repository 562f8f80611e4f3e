"""Ledger sinks: OTLP log records (in memory and over real OTLP/HTTP), the store tables, the factory."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan import semconv
from tallyspan._state import Settings
from tallyspan._store._store_schema import connect
from tallyspan.ledger import Claim, LedgerEntry, LedgerRecord, LedgerSink, Observed, reconcile
from tallyspan_exporters import OTLPLedgerSink, SQLiteLedgerSink, ledger_sinks_component

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
RUN_SPAN_ID = 0x00F067AA0BA902B7
TOOL_SPAN_ID = 0x1111111111111111
LOG_SPAN_ID = 0x2222222222222222


def _entries() -> list[LedgerEntry]:
    return [
        LedgerEntry(
            TRACE_ID, RUN_SPAN_ID, "observed", 0, "c1", "search", "succeeded", "", TOOL_SPAN_ID, 1_000
        ),
        LedgerEntry(
            TRACE_ID, RUN_SPAN_ID, "claimed", 1, "c1", "search", "failed", "it broke", LOG_SPAN_ID, 2_000
        ),
        LedgerEntry(
            TRACE_ID,
            RUN_SPAN_ID,
            "claimed",
            2,
            None,
            None,
            None,
            "",
            LOG_SPAN_ID,
            3_000,
            malformed="no tool name",
        ),
    ]


def _record() -> LedgerRecord:
    result = reconcile(
        [Observed("c1", "search", "succeeded", 0)],
        [
            Claim("c1", "search", "failed", "it broke", 1),
            Claim(None, None, None, seq=2, malformed="no tool name"),
        ],
    )
    return LedgerRecord(TRACE_ID, RUN_SPAN_ID, "support", result, 1, 2, 4_000)


@pytest.fixture
def memory_sink() -> Iterator[tuple[OTLPLedgerSink, InMemoryLogRecordExporter]]:
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    sink = OTLPLedgerSink(exporter, batch=False)
    yield sink, exporter
    sink.shutdown()


def _drive(sink: LedgerSink, delivered: Callable[[], list[str]]) -> None:
    """The whole LedgerSink protocol, called the way the ledger processor calls it: after
    ``force_flush`` (before ``shutdown``) everything exported must have been delivered."""
    assert sink.export_entries(_entries()) is True
    assert sink.export_reconciliation(_record()) is True
    assert sink.force_flush(5000) is True
    assert delivered() == ["observed", "claimed", "claimed", "reconciliation"]
    sink.shutdown()


def test_each_sink_does_what_the_protocol_promises_when_driven_through_it(tmp_path: Path) -> None:
    """Not only the method names (``isinstance`` on a Protocol checks no more): what each call leaves."""
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    otlp = OTLPLedgerSink(exporter)  # batched: force_flush must deliver

    def logged() -> list[str]:
        records = [log.log_record for log in exporter.get_finished_logs()]
        return [
            str((record.attributes or {}).get(semconv.LEDGER_SIDE, "reconciliation")) for record in records
        ]

    assert isinstance(otlp, LedgerSink)
    _drive(otlp, logged)

    path = tmp_path / "s.db"
    store = SQLiteLedgerSink(path)

    def stored() -> list[str]:
        db = connect(path)
        try:
            sides = [str(row[0]) for row in db.execute("SELECT side FROM ledger_entries ORDER BY seq")]
            runs = db.execute("SELECT COUNT(*) FROM ledger_reconciliations").fetchone()[0]
        finally:
            db.close()
        return sides + ["reconciliation"] * runs

    assert isinstance(store, LedgerSink)
    _drive(store, stored)


def test_each_entry_is_a_log_record_with_trace_and_span_ids(
    memory_sink: tuple[OTLPLedgerSink, InMemoryLogRecordExporter],
) -> None:
    sink, exporter = memory_sink
    assert sink.export_entries(_entries()) is True
    records = [log.log_record for log in exporter.get_finished_logs()]
    assert [r.event_name for r in records] == [semconv.EVENT_LEDGER_ENTRY] * 3
    assert [(r.trace_id, r.span_id, r.timestamp) for r in records] == [
        (TRACE_ID, TOOL_SPAN_ID, 1_000),
        (TRACE_ID, LOG_SPAN_ID, 2_000),
        (TRACE_ID, LOG_SPAN_ID, 3_000),
    ]
    assert dict(records[1].attributes or {}) == {
        semconv.LEDGER_RECORD_ID: "0af7651916cd43dd8448eb211c80319c/00f067aa0ba902b7/entry/1",
        semconv.LEDGER_RUN_SPAN_ID: "00f067aa0ba902b7",
        semconv.LEDGER_SIDE: "claimed",
        semconv.LEDGER_SEQ: 1,
        semconv.LEDGER_CALL_ID: "c1",
        semconv.LEDGER_TOOL_NAME: "search",
        semconv.LEDGER_OUTCOME: "failed",
        semconv.LEDGER_SUMMARY: "it broke",
    }
    assert dict(records[2].attributes or {})[semconv.LEDGER_MALFORMED] == "no tool name"
    assert records[0].severity_number is SeverityNumber.INFO


def test_reconciliation_is_one_log_record_on_the_run_span(
    memory_sink: tuple[OTLPLedgerSink, InMemoryLogRecordExporter],
) -> None:
    sink, exporter = memory_sink
    assert sink.export_reconciliation(_record()) is True
    (log,) = exporter.get_finished_logs()
    record = log.log_record
    assert record.event_name == semconv.EVENT_LEDGER_RECONCILIATION
    assert (record.trace_id, record.span_id, record.timestamp) == (TRACE_ID, RUN_SPAN_ID, 4_000)
    assert record.severity_number is SeverityNumber.WARN
    assert dict(record.attributes or {}) == {
        semconv.LEDGER_RECORD_ID: "0af7651916cd43dd8448eb211c80319c/00f067aa0ba902b7/reconciliation",
        semconv.LEDGER_RUN_SPAN_ID: "00f067aa0ba902b7",
        semconv.RUN_NAME: "support",
        semconv.LEDGER_BALANCED: False,
        semconv.LEDGER_PROTOCOL_OK: False,
        semconv.LEDGER_DISCREPANCY_TYPES: ("malformed_log", "mismatched_result"),
        semconv.LEDGER_DISCREPANCY_COUNT: 2,
        semconv.LEDGER_OBSERVED_COUNT: 1,
        semconv.LEDGER_CLAIMED_COUNT: 2,
    }
    assert record.body == {
        "discrepancies": [
            {semconv.LEDGER_DISCREPANCY_TYPE: "mismatched_result", semconv.LEDGER_CALL_ID: "c1",
             semconv.LEDGER_DETAIL: "succeeded claimed as failed"},
            {semconv.LEDGER_DISCREPANCY_TYPE: "malformed_log", semconv.LEDGER_DETAIL: "no tool name"},
        ]
    }  # fmt: skip


def test_balanced_reconciliation_is_info(
    memory_sink: tuple[OTLPLedgerSink, InMemoryLogRecordExporter],
) -> None:
    sink, exporter = memory_sink
    sink.export_reconciliation(LedgerRecord(TRACE_ID, RUN_SPAN_ID, "r", reconcile([], []), 0, 0, 1))
    (log,) = exporter.get_finished_logs()
    assert log.log_record.severity_number is SeverityNumber.INFO
    assert dict(log.log_record.attributes or {})[semconv.LEDGER_DISCREPANCY_TYPES] == ()


def test_batched_records_leave_on_flush() -> None:
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    sink = OTLPLedgerSink(exporter, service_name="svc")
    sink.export_entries(_entries())
    assert sink.force_flush(5000) is True
    logs = exporter.get_finished_logs()
    assert len(logs) == 3
    assert logs[0].resource.attributes["service.name"] == "svc"
    sink.shutdown()


def test_store_sink_writes_both_tables(db_path: Path) -> None:
    sink = SQLiteLedgerSink(db_path)
    assert sink.export_entries(_entries()) is True
    assert sink.export_reconciliation(_record()) is True
    sink.shutdown()
    db = connect(db_path)
    rows = [tuple(row) for row in db.execute("SELECT * FROM ledger_entries ORDER BY seq")]
    assert rows == [
        ("0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7", "observed", 0, "c1", "search", "succeeded", "",
         "1111111111111111", 1_000),
        ("0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7", "claimed", 1, "c1", "search", "failed", "it broke",
         "2222222222222222", 2_000),
        ("0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7", "claimed", 2, None, None, None,
         "malformed: no tool name", "2222222222222222", 3_000),
    ]  # fmt: skip
    (reconciliation,) = db.execute("SELECT * FROM ledger_reconciliations").fetchall()
    assert dict(reconciliation) == {
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "run_span_id": "00f067aa0ba902b7",
        "run_name": "support",
        "balanced": 0,
        "protocol_ok": 0,
        "discrepancy_types": '["malformed_log", "mismatched_result"]',
        "discrepancies": json.dumps(
            [
                {"type": "mismatched_result", "call_id": "c1", "detail": "succeeded claimed as failed"},
                {"type": "malformed_log", "call_id": None, "detail": "no tool name"},
            ]
        ),
        "observed_count": 1,
        "claimed_count": 2,
        "time_unix_nano": 4_000,
    }
    db.close()


def test_store_sink_replaces_a_run_written_again(db_path: Path) -> None:
    sink = SQLiteLedgerSink(db_path)
    for _ in range(2):
        sink.export_entries(_entries())
        sink.export_reconciliation(_record())
    sink.shutdown()
    db = connect(db_path)
    assert db.execute("SELECT count(*) FROM ledger_entries").fetchone()[0] == 3
    assert db.execute("SELECT count(*) FROM ledger_reconciliations").fetchone()[0] == 1
    db.close()


def test_store_sink_on_a_bad_path_never_raises_flushes_false_and_counts_every_row(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    sink = SQLiteLedgerSink(blocker / "sub" / "store.db")
    assert sink.export_entries(_entries()) is True  # queued: the sink's own thread finds out
    assert sink.export_reconciliation(_record()) is True
    assert sink.force_flush() is False
    stats = tallyspan.stats()
    assert stats["dropped.ledger_rows"] == len(_entries()) + 1
    assert stats["errors.ledger_store.write"] >= 1
    sink.shutdown()


def test_store_sink_after_shutdown_returns_false(db_path: Path) -> None:
    sink = SQLiteLedgerSink(db_path)
    sink.shutdown()
    assert sink.export_entries(_entries()) is False
    assert sink.force_flush() is True


def test_store_sink_on_a_corrupt_file_flushes_false_and_leaves_the_file_alone(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not sqlite" * 100)
    sink = SQLiteLedgerSink(corrupt)
    assert sink.export_reconciliation(_record()) is True
    assert sink.force_flush() is False
    sink.shutdown()
    assert tallyspan.stats()["dropped.ledger_rows"] == 1
    with pytest.raises(sqlite3.DatabaseError):
        connect(corrupt)


def test_factory_gives_the_store_sink_and_otlp_only_when_requested(db_path: Path) -> None:
    sinks = ledger_sinks_component(Settings(db_path=db_path))
    assert [type(s) for s in sinks] == [SQLiteLedgerSink]
    assert ledger_sinks_component(Settings(db_path=None)) == []
    both = ledger_sinks_component(Settings(db_path=db_path, otlp_logs=True))
    assert [type(s) for s in both] == [OTLPLedgerSink, SQLiteLedgerSink]
    for sink in both:
        sink.shutdown()


def _attribute_values(record: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for kv in record.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        values[kv.key] = (
            tuple(v.string_value for v in value.array_value.values)
            if kind == "array_value"
            else getattr(value, kind)
        )
    return values


def test_instrument_sends_ledger_log_records_over_otlp(
    otlp_receiver: Any, monkeypatch: pytest.MonkeyPatch, tracer_provider: TracerProvider, db_path: Path
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", f"{otlp_receiver.endpoint}/v1/logs")
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=())

    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    with tallyspan.run("agent") as run_span:
        search("a", tool_call_id="c1")
    assert instrumentation.force_flush(10_000) is True
    with otlp_receiver.lock:
        records = list(otlp_receiver.log_records)
    assert [r.event_name for r in records] == [
        semconv.EVENT_LEDGER_ENTRY,
        semconv.EVENT_LEDGER_RECONCILIATION,
    ]
    assert {r.trace_id.hex() for r in records} == {format(run_span.get_span_context().trace_id, "032x")}
    assert records[1].span_id.hex() == format(run_span.get_span_context().span_id, "016x")
    assert _attribute_values(records[1])[semconv.LEDGER_DISCREPANCY_TYPES] == (
        "ledger_missing",
        "unlogged_call",
    )
    assert _attribute_values(records[0])[semconv.LEDGER_CALL_ID] == "c1"
    # ... and the same books in the store
    db = connect(db_path)
    assert [tuple(row) for row in db.execute("SELECT side, call_id FROM ledger_entries")] == [
        ("observed", "c1")
    ]
    db.close()
