"""Fixtures shared by every test: an isolated store, an in-memory exporter and an instrumented provider.

Chain: ``span_exporter`` > ``tracer_provider`` > ``make_instrumented`` (instrument, yield, uninstrument)
> ``instrumented`` (its defaults). ``span_exporter`` receives the spans our chain forwards, i.e. with
violations and ledger balance on them; call ``instrumented.force_flush()`` before reading it, since the
chain runs on a worker thread.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.c_library import CLibrary

import tallyspan

#: A mark expression that selects the slow run-checks or the Phoenix tests (not one that leaves them out).
_SERIAL_MARKS = re.compile(r"(?<!not )\b(?:slow|phoenix)\b")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many processes ``-n auto`` (pyproject's addopts) runs the tests in.

    The default run: one more than the CPUs this process may use. Many tests wait (local servers,
    subprocesses, a flush's delay) and the spare worker fills those waits: on 2 CPUs the suite took
    351 s in one process, 193 s in two, 157 s in three. ``-m slow`` and ``-m phoenix`` run in one
    process: the benchmarks time themselves beside their counts, and Phoenix is one server started once.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when it is set; ``-n 0`` turns it off.
    """
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    if chosen.isdigit():
        return int(chosen)
    if _SERIAL_MARKS.search(config.option.markexpr or ""):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cpus + 1


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
    "TALLYSPAN_CONTRACTS",
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets its own store and OTLP spool, no OTLP export from the environment, zeroed counters."""
    monkeypatch.setenv("TALLYSPAN_DB", str(tmp_path / "tallyspan.db"))
    # A test with store=None would otherwise spool into ./.tallyspan, and a later test send it.
    monkeypatch.setenv("TALLYSPAN_SPOOL", str(tmp_path / "tallyspan.spool.db"))
    for name in _OTEL_ENV:
        monkeypatch.delenv(name, raising=False)
    tallyspan.reset_stats()
    yield
    tallyspan.uninstrument()


def skip_or_fail_in_ci(reason: str) -> NoReturn:
    """Skip a test whose outside dependency is absent; in CI (``CI=true``), where it must be there, fail."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: CI must provide it)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def shared_data() -> Path:
    """The shared real-data folder; skips the test where it is absent (a user's own clone), fails in CI."""
    if not SHARED_DATA.is_dir():
        skip_or_fail_in_ci(f"needs the shared data folder beside the clone ({SHARED_DATA}), absent here")
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


@dataclass(frozen=True)
class Instrumented:
    """What ``make_instrumented`` made: the instrumentation and the exporter of its enriched spans."""

    instrumentation: tallyspan.Instrumentation
    spans: InMemorySpanExporter

    @property
    def store(self) -> Path | None:
        """The embedded store it writes, or None."""
        return self.instrumentation.settings.db_path


MakeInstrumented = Callable[..., Instrumented]


@pytest.fixture
def make_instrumented(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, db_path: Path
) -> Iterator[MakeInstrumented]:
    """Call it with ``tallyspan.instrument()``'s arguments; uninstrumented after the test.

    Unless given, ``tracer_provider`` is the private provider, ``store`` this test's store and
    ``span_processors`` ``span_exporter`` at the end of the chain.
    """

    def make(contracts: Any = None, **arguments: Any) -> Instrumented:
        arguments.setdefault("tracer_provider", tracer_provider)
        arguments.setdefault("store", db_path)
        arguments.setdefault("span_processors", [SimpleSpanProcessor(span_exporter)])
        return Instrumented(tallyspan.instrument(contracts, **arguments), span_exporter)

    yield make
    tallyspan.uninstrument()


@pytest.fixture
def instrumented(make_instrumented: MakeInstrumented) -> tallyspan.Instrumentation:
    """``tallyspan.instrument()`` on the private provider; ``span_exporter`` gets the enriched spans."""
    return make_instrumented().instrumentation


class LocalReceiver:
    """A real HTTP receiver on 127.0.0.1: each POST goes to ``receive(path, body)``, whose ``(status,
    reply)`` is sent back as ``content_type``. Gzip bodies are taken too (Rotel always compresses)."""

    def __init__(self, receive: Callable[[str, bytes], tuple[int, bytes]], content_type: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                status, reply = receive(self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class OTLPReceiver(LocalReceiver):
    """A real OTLP/HTTP (protobuf) receiver: decodes what exporters send to /v1/traces and /v1/logs."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.log_records: list[Any] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        super().__init__(self._receive, "application/x-protobuf")

    def _receive(self, path: str, body: bytes) -> tuple[int, bytes]:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
            ExportLogsServiceResponse,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        with self.lock:
            self.paths.append(path)
            if path == "/v1/traces":
                for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        self.spans.extend(scope_spans.spans)
                return 200, ExportTraceServiceResponse().SerializeToString()
            if path == "/v1/logs":
                for resource_logs in ExportLogsServiceRequest.FromString(body).resource_logs:
                    for scope_logs in resource_logs.scope_logs:
                        self.log_records.extend(scope_logs.log_records)
                return 200, ExportLogsServiceResponse().SerializeToString()
        return 404, b""


@pytest.fixture
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """A running OTLP/HTTP receiver; point OTEL_EXPORTER_OTLP_ENDPOINT at ``.endpoint``."""
    receiver = OTLPReceiver()
    yield receiver
    receiver.close()


class AgentsExportReceiver(LocalReceiver):
    """Stands in for the OpenAI Agents SDK's own trace-ingest endpoint and keeps the items it is sent."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        super().__init__(self._receive, "application/json")
        self.url = f"{self.endpoint}/v1/traces/ingest"

    def _receive(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.items.extend(json.loads(body).get("data", []))
        return 200, b"{}"


@pytest.fixture
def agents_export(monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentsExportReceiver]:
    """The Agents SDK's own export, kept on but sent to 127.0.0.1; its processor list restored after."""
    import agents

    monkeypatch.delenv("OPENAI_AGENTS_DISABLE_TRACING", raising=False)
    receiver = AgentsExportReceiver()
    exporter = agents.tracing.default_exporter()  # type: ignore[attr-defined]
    monkeypatch.setattr(exporter, "endpoint", receiver.url)
    monkeypatch.setattr(exporter, "_api_key", "sk-export-test")
    before = tuple(agents.tracing.get_trace_provider()._multi_processor._processors)  # type: ignore[attr-defined]
    yield receiver
    agents.tracing.flush_traces()
    agents.tracing.set_trace_processors(list(before))
    receiver.close()


@pytest.fixture
def c_library(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., CLibrary]]:
    """Install a ``CLibrary`` as ctypes' view of the process's C library, on Linux as the code expects;
    the cached lookup of ``malloc_trim`` is forgotten before and after."""
    import ctypes
    import sys

    from tallyspan._memory import _malloc_trim

    def install(**kwargs: Any) -> CLibrary:
        library = CLibrary(**kwargs)
        monkeypatch.setattr(sys, "platform", "linux")
        monkeypatch.setattr(ctypes, "CDLL", library)
        _malloc_trim.cache_clear()
        return library

    yield install
    monkeypatch.undo()
    _malloc_trim.cache_clear()


def mid_stream_error_class() -> type[Exception]:
    """What the openai SDK raises when the server cuts a stream mid-way: APIConnectionError, which wraps
    the transport's RemoteProtocolError; openai 3.0 (the floor CI installs) let the latter through."""
    import importlib

    import openai

    if tuple(int(part) for part in openai.__version__.split(".")[:2]) == (3, 0):
        return importlib.import_module("httpx2").RemoteProtocolError  # type: ignore[no-any-return]
    return openai.APIConnectionError
