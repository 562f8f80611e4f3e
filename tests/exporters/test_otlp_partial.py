"""OTLP partial success: a backend that answers 200 with ``partial_success.rejected_spans`` /
``rejected_log_records`` in a real ``Export*ServiceResponse``, over HTTP and over gRPC. The rejected are
counted under their own cause, the backend's message is logged once, ``force_flush()`` says False, and
a record with a verdict leaves the spool only once it is accepted or isolated as one of the rejected.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from tests.otlp_faults import FaultyReceiver, GrpcReceiver, produced, run_agents, span_key
from tests.recording import RecordingLedgerSink

import tallyspan
from tallyspan._config import ENV_EXPORT_TIMEOUT, ENV_RETRY_MAX, ENV_SHUTDOWN_TIMEOUT

RUNS = 12
POISON_WITH_VERDICT = 3
POISON_CLEAN = 2
#: What the backend says: hostile on purpose (a format string, a line break).
MESSAGE = "span name 'poison' is not allowed\n%s %d"


@pytest.fixture(params=["http/protobuf", "grpc"])
def receiver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultyReceiver]:
    backend = FaultyReceiver() if request.param == "http/protobuf" else GrpcReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", backend.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", request.param)
    monkeypatch.setenv(ENV_EXPORT_TIMEOUT, "2")
    monkeypatch.setenv(ENV_RETRY_MAX, "0.2")
    monkeypatch.setenv(ENV_SHUTDOWN_TIMEOUT, "1")
    yield backend
    backend.close()


def test_records_the_backend_rejects_in_a_partial_success_are_counted_logged_once_and_flush_says_false(
    receiver: FaultyReceiver,
    tracer_provider: TracerProvider,
    db_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver.reject_span = lambda name: name == "poison"
    receiver.reject_log = lambda record_id: record_id.endswith("/reconciliation")
    receiver.partial_message = MESSAGE
    exporter, sink = InMemorySpanExporter(), RecordingLedgerSink()
    caplog.set_level(logging.WARNING, logger="tallyspan_exporters._delivery")
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider,
        store=db_path,
        instrumentors=[],
        span_processors=[SimpleSpanProcessor(exporter)],
        ledger_sinks=[sink],
    )
    tracer = tracer_provider.get_tracer("workload")
    run_agents(tracer_provider, RUNS, clean_spans_per_run=2)
    for _ in range(POISON_WITH_VERDICT):
        with tracer.start_as_current_span("poison") as span:
            span.set_status(Status(StatusCode.ERROR, "failed"))
    for _ in range(POISON_CLEAN):
        with tracer.start_as_current_span("poison"):
            pass

    assert instrumentation.force_flush(20000) is False  # records were lost: said so
    assert instrumentation.force_flush(20000) is True  # and only once

    made = produced(exporter, sink, ignore=("poison",))  # the workload's spans; the poison ones apart
    poison = {span_key(span) for span in exporter.get_finished_spans() if span.name == "poison"}
    assert len(poison) == POISON_WITH_VERDICT + POISON_CLEAN
    reconciliations = {
        record_id for record_id in made.ledger_records if record_id.endswith("/reconciliation")
    }
    assert len(reconciliations) == RUNS
    with receiver.lock:
        assert set(receiver.spans) == (made.durable_spans | made.clean_spans) - poison
        assert set(receiver.rejected_spans) == poison
        assert set(receiver.logs) == made.ledger_records - reconciliations
        assert set(receiver.rejected_logs) == reconciliations
        partial_answers = dict(receiver.partial_answers)
    stats = tallyspan.stats()
    dropped = {key: value for key, value in stats.items() if key.startswith("dropped.otlp.")}
    assert dropped == {
        "dropped.otlp.traces.partial_rejected": POISON_WITH_VERDICT + POISON_CLEAN,
        "dropped.otlp.logs.partial_rejected": RUNS,
    }
    assert stats["errors.otlp.traces.partial_success"] == partial_answers["/v1/traces"]
    assert stats["errors.otlp.logs.partial_success"] == partial_answers["/v1/logs"]

    # Nothing is left in the spool: every record with a verdict was accepted or isolated and counted.
    with closing(
        sqlite3.connect(tmp_path / "tallyspan.spool.db")
    ) as spool:  # TALLYSPAN_SPOOL (tests/conftest.py)
        assert spool.execute("SELECT count(*) FROM records").fetchone() == (0,)

    warnings = [record.getMessage() for record in caplog.records if "rejected" in record.getMessage()]
    assert len(warnings) == 2  # once per signal, however many answers said so
    assert sorted(w.split(" but ")[0] for w in warnings) == [
        "the OTLP backend accepted logs",
        "the OTLP backend accepted traces",
    ]
    assert all(repr(MESSAGE) in warning for warning in warnings)
