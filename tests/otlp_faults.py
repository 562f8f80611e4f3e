"""A hostile OTLP/HTTP backend on 127.0.0.1, and an agent workload whose every record can be accounted for.

``FaultyReceiver`` decodes what OTLP exporters send, like ``tests.conftest.OTLPReceiver``, and can be
told to misbehave the ways real backends do: refuse connections (nothing listens on its port), hang
(read the request, never answer), answer 500, 503 or 429 with ``Retry-After``, be slow, then recover on
the same port. What it accepted is kept per id (a span's trace/span id, a ledger record's
``tallyspan.ledger.record_id``) with how many times it came, so "exactly once" can be asserted.

``Workload`` runs agent runs through ``tallyspan`` (each run: a logged call, a refused call the agent
did not log, so the run is unbalanced and ERROR) and knows, from an in-memory exporter and a recording
ledger sink behind the same chain, which spans and ledger records were produced; which of them carry a
verdict is written from the scenario, by span name, never asked of the code that decides what to spool.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.recording import RecordingLedgerSink

import tallyspan
from tallyspan import semconv


@dataclass
class Request:
    """One request the receiver saw: when, where, and what it answered (0: no answer at all)."""

    at: float
    path: str
    status: int


class FaultyReceiver:
    """An OTLP/HTTP receiver that fails on demand. Modes: ``ok``, ``slow`` (``delay`` seconds, then
    accept), ``hang`` (never answer until recovered; nothing is kept), ``status`` (answer ``status``
    with ``retry_after`` if set; nothing is kept), and refusing (:meth:`refuse`: the port is closed)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: Counter[str] = Counter()
        self.span_names: dict[str, str] = {}
        self.logs: Counter[str] = Counter()
        self.requests: list[Request] = []
        self.mode = "ok"
        self.status = 200
        self.retry_after: str | None = None
        self.delay = 0.0
        #: OTLP partial success: spans (by name) and log records (by ledger record id) for which this
        #: returns True are rejected, not kept; the 200 answer says how many, with ``partial_message``.
        self.reject_span: Callable[[str], bool] = lambda name: False
        self.reject_log: Callable[[str], bool] = lambda record_id: False
        self.partial_message = ""
        self.rejected_spans: Counter[str] = Counter()
        self.rejected_logs: Counter[str] = Counter()
        self.partial_answers: Counter[str] = Counter()  # answers that rejected some records, by path
        self.on_accept: Callable[[str], None] | None = None
        """Called with the path of each request about to be accepted, before the answer is sent."""
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0
        self._listen()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    # --- control ----------------------------------------------------------------------------------------

    def fail(self, status: int, retry_after: str | None = None) -> None:
        """Answer every request with ``status`` (and ``Retry-After``)."""
        self.mode, self.status, self.retry_after = "status", status, retry_after

    def hang(self) -> None:
        """Read each request and never answer it (until :meth:`recover`)."""
        self._release.clear()
        self.mode = "hang"

    def slow(self, delay: float) -> None:
        """Accept each request after ``delay`` seconds."""
        self.mode, self.delay = "slow", delay

    def refuse(self) -> None:
        """Stop listening: connections are refused."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def recover(self) -> None:
        """Accept again, on the same port."""
        self.mode = "ok"
        self._release.set()
        if self._server is None:
            self._listen(self.port)

    def close(self) -> None:
        self._release.set()
        self.refuse()

    def received(self, path: str) -> int:
        """How many requests to ``path`` were answered with 2xx."""
        with self.lock:
            return sum(1 for request in self.requests if request.path == path and 200 <= request.status < 300)

    # --- serving ----------------------------------------------------------------------------------------

    def _listen(self, port: int = 0) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, headers, reply = receiver._answer(self.path, body)
                with receiver.lock:
                    receiver.requests.append(Request(time.monotonic(), self.path, status))
                if status == 0:
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        for attempt in range(50):
            try:
                server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
                break
            except OSError:  # the port is still in TIME_WAIT or taken: try again shortly
                if attempt == 49:
                    raise
                time.sleep(0.1)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._server = server
        self.port = server.server_address[1]

    def _answer(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        mode = self.mode
        if mode == "hang":
            self._release.wait(60)
            return 0, {}, b""
        if mode == "status":
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return self.status, headers, b""
        if mode == "slow":
            time.sleep(self.delay)
        kept = self._keep(path, body)
        if self.on_accept is not None:
            self.on_accept(path)
        return 200, {}, kept

    def _keep(self, path: str, body: bytes) -> bytes:
        with self.lock:
            if path == "/v1/traces":
                return bytes(self.keep_spans(ExportTraceServiceRequest.FromString(body)).SerializeToString())
            return bytes(self.keep_logs(ExportLogsServiceRequest.FromString(body)).SerializeToString())

    def keep_spans(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """Keep the spans of ``request`` (the caller holds the lock); the answer, with the partial
        success when some were rejected."""
        rejected = 0
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    key = f"{span.trace_id.hex()}/{span.span_id.hex()}"
                    if self.reject_span(span.name):
                        rejected += 1
                        self.rejected_spans[key] += 1
                        continue
                    self.spans[key] += 1
                    self.span_names[key] = span.name
        response = ExportTraceServiceResponse()
        if rejected:
            self.partial_answers["/v1/traces"] += 1
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = self.partial_message
        return response

    def keep_logs(self, request: ExportLogsServiceRequest) -> ExportLogsServiceResponse:
        """Keep the log records of ``request`` by ledger record id (the caller holds the lock)."""
        rejected = 0
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    ids = [
                        kv.value.string_value
                        for kv in record.attributes
                        if kv.key == semconv.LEDGER_RECORD_ID
                    ]
                    record_id = ids[0] if ids else "<no id>"
                    if self.reject_log(record_id):
                        rejected += 1
                        self.rejected_logs[record_id] += 1
                        continue
                    self.logs[record_id] += 1
        response = ExportLogsServiceResponse()
        if rejected:
            self.partial_answers["/v1/logs"] += 1
            response.partial_success.rejected_log_records = rejected
            response.partial_success.error_message = self.partial_message
        return response


class GrpcReceiver(FaultyReceiver):
    """The same receiver over OTLP/gRPC (a real ``grpc`` server on 127.0.0.1): it keeps, rejects and
    answers like the HTTP one (``ok`` mode only)."""

    def _listen(self, port: int = 0) -> None:
        from concurrent import futures

        import grpc  # type: ignore[import-untyped]
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
                with receiver.lock:
                    receiver.requests.append(Request(time.monotonic(), "/v1/traces", 200))
                    return receiver.keep_spans(request)

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: ExportLogsServiceRequest, context: Any) -> ExportLogsServiceResponse:
                with receiver.lock:
                    receiver.requests.append(Request(time.monotonic(), "/v1/logs", 200))
                    return receiver.keep_logs(request)

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)  # type: ignore[no-untyped-call]
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)  # type: ignore[no-untyped-call]
        self.port = server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        self._grpc_server = server

    def refuse(self) -> None:
        server = getattr(self, "_grpc_server", None)
        if server is not None:
            server.stop(None)
            self._grpc_server = None


def span_key(span: ReadableSpan) -> str:
    context = span.context
    assert context is not None
    return f"{context.trace_id:032x}/{context.span_id:016x}"


@dataclass
class Produced:
    """What a workload produced: span ids with and without a verdict, ledger record ids."""

    durable_spans: set[str] = field(default_factory=set)
    clean_spans: set[str] = field(default_factory=set)
    ledger_records: set[str] = field(default_factory=set)

    def update(self, other: Produced) -> None:
        self.durable_spans |= other.durable_spans
        self.clean_spans |= other.clean_spans
        self.ledger_records |= other.ledger_records

    def as_json(self) -> dict[str, list[str]]:
        return {
            "durable_spans": sorted(self.durable_spans),
            "clean_spans": sorted(self.clean_spans),
            "ledger_records": sorted(self.ledger_records),
        }

    @classmethod
    def from_json(cls, data: dict[str, list[str]]) -> Produced:
        return cls(set(data["durable_spans"]), set(data["clean_spans"]), set(data["ledger_records"]))


#: The spans of ``run_agents`` that carry a verdict, named from the scenario (not by the code that decides
#: what to spool): each run, whose books do not balance, and its refused ``book`` call. The logged
#: ``search`` call and the plain ``step`` spans are clean.
VERDICT_SPAN_PREFIXES = ("invoke_agent agent-", "execute_tool book")
CLEAN_SPAN_NAMES = ("execute_tool search", "step")


def produced(
    spans: InMemorySpanExporter, sink: RecordingLedgerSink, *, ignore: Collection[str] = ()
) -> Produced:
    """Sort what the chain forwarded into what must arrive (verdicts, ledger) and what may be dropped,
    by what the scenario made each span; spans named in ``ignore`` (a test's own) are left out."""
    result = Produced()
    for span in spans.get_finished_spans():
        if span.name in ignore:
            continue
        if span.name.startswith(VERDICT_SPAN_PREFIXES):
            result.durable_spans.add(span_key(span))
        elif span.name in CLEAN_SPAN_NAMES:
            result.clean_spans.add(span_key(span))
        else:
            raise AssertionError(f"a span the scenario does not make: {span.name!r}")
    for entry in sink.entries:
        result.ledger_records.add(f"{entry.trace_id:032x}/{entry.run_span_id:016x}/entry/{entry.seq}")
    for record in sink.records:
        result.ledger_records.add(f"{record.trace_id:032x}/{record.run_span_id:016x}/reconciliation")
    return result


def run_agents(provider: TracerProvider, runs: int, clean_spans_per_run: int = 0) -> None:
    """``runs`` agent runs: each logs one call, does not log a refused one (unbalanced: ERROR), and
    makes ``clean_spans_per_run`` plain spans (no verdict) on ``provider``."""

    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    @tallyspan.tool
    def book(flight: str, tool_call_id: str) -> str:
        raise tallyspan.Rejected("no seats")

    tracer = provider.get_tracer("workload")
    for number in range(runs):
        with tallyspan.run(f"agent-{number}"):
            search("flights", tool_call_id=f"c{number}a")
            tallyspan.ledger.claim(f"c{number}a", "search", "succeeded")
            with contextlib.suppress(tallyspan.Rejected):
                book("HAT001", tool_call_id=f"c{number}b")
            for _ in range(clean_spans_per_run):
                with tracer.start_as_current_span("step"):
                    pass
