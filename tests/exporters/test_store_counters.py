"""The store records each writing process's ``tallyspan.stats()`` counters, for ``tallyspan doctor``."""

from __future__ import annotations

import os
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.stats import losses

from tallyspan._selfstats import count
from tallyspan._store._store_queries import open_store, process_counters
from tallyspan_exporters import SQLiteSpanExporter, StoreProcessor


def _spans(n: int) -> list[object]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):
        with provider.get_tracer("t").start_as_current_span(f"s{i}"):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_the_exporter_records_the_counters_with_its_writes_and_at_flush(db_path: Path) -> None:
    exporter = SQLiteSpanExporter(db_path)
    count("dropped.spans", 3)
    exporter.export(_spans(1))  # type: ignore[arg-type]
    with open_store(db_path) as db:
        (process,) = process_counters(db)
    assert (process.pid, process.counts) == (os.getpid(), {"dropped.spans": 3})
    count("dropped.spans", 2)
    count("errors.checks", 1)
    exporter.force_flush()
    with open_store(db_path) as db:
        (process,) = process_counters(db)
    assert process.counts == {"dropped.spans": 5, "errors.checks": 1}
    exporter.shutdown()


def test_the_store_processor_records_the_counters_at_flush_even_with_no_span_waiting(db_path: Path) -> None:
    processor = StoreProcessor(db_path)
    for span in _spans(2):
        processor.on_end(span)  # type: ignore[arg-type]
    assert processor.force_flush()
    count("dropped.ledger_claims")
    assert processor.force_flush()
    with open_store(db_path) as db:
        (process,) = process_counters(db)
    assert process.counts == {"dropped.ledger_claims": 1}
    processor.shutdown()


def test_counters_alone_never_create_a_store(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    processor = StoreProcessor(path)
    count("dropped.spans")
    assert processor.force_flush()
    processor.shutdown()
    exporter = SQLiteSpanExporter(path)
    exporter.force_flush()
    exporter.shutdown()
    assert not path.exists()
    assert losses() == {"dropped.spans": 1}
