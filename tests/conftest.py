"""Fixtures shared by every test: an isolated store, an in-memory exporter and an instrumented provider.

Chain: ``span_exporter`` > ``tracer_provider`` > ``instrumented`` (instrument, yield, uninstrument).
``span_exporter`` receives the spans our chain forwards, i.e. with violations and ledger balance on them;
call ``instrumented.force_flush()`` before reading it, since the chain runs on a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan

#: ../shared/data beside the clone: real public traces and model outputs (see its README.md).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

_OTEL_ENV = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_SERVICE_NAME",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets its own store, no OTLP export from the environment, zeroed counters."""
    monkeypatch.setenv("TALLYSPAN_DB", str(tmp_path / "tallyspan.db"))
    for name in _OTEL_ENV:
        monkeypatch.delenv(name, raising=False)
    tallyspan.reset_stats()
    yield
    tallyspan.uninstrument()


@pytest.fixture
def shared_data() -> Path:
    """The shared real-data folder; skips the test where it is absent (a user's own clone)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs the shared data folder beside the clone ({SHARED_DATA}), absent here")
    return SHARED_DATA


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """The path of this test's embedded store."""
    return tmp_path / "tallyspan.db"


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    """Collects finished spans in memory."""
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider() -> Iterator[TracerProvider]:
    """A private SDK provider (never the global one), shut down after the test."""
    provider = TracerProvider()
    yield provider
    provider.shutdown()


@pytest.fixture
def instrumented(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, db_path: Path
) -> Iterator[tallyspan.Instrumentation]:
    """``tallyspan.instrument()`` on the private provider; ``span_exporter`` gets the enriched spans."""
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider,
        store=db_path,
        span_processors=[SimpleSpanProcessor(span_exporter)],
    )
    yield instrumentation
    tallyspan.uninstrument()


class OTLPReceiver:
    """A real OTLP/HTTP (protobuf) receiver on 127.0.0.1: decodes what exporters send to /v1/traces and /v1/logs."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
            ExportLogsServiceResponse,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        receiver = self
        self.spans: list[Any] = []
        self.log_records: list[Any] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.paths.append(self.path)
                    if self.path == "/v1/traces":
                        request = ExportTraceServiceRequest.FromString(body)
                        for resource_spans in request.resource_spans:
                            for scope_spans in resource_spans.scope_spans:
                                receiver.spans.extend(scope_spans.spans)
                        reply = ExportTraceServiceResponse().SerializeToString()
                    elif self.path == "/v1/logs":
                        logs_request = ExportLogsServiceRequest.FromString(body)
                        for resource_logs in logs_request.resource_logs:
                            for scope_logs in resource_logs.scope_logs:
                                receiver.log_records.extend(scope_logs.log_records)
                        reply = ExportLogsServiceResponse().SerializeToString()
                    else:
                        self.send_response(404)
                        self.end_headers()
                        return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """A running OTLP/HTTP receiver; point OTEL_EXPORTER_OTLP_ENDPOINT at ``.endpoint``."""
    receiver = OTLPReceiver()
    yield receiver
    receiver.close()
