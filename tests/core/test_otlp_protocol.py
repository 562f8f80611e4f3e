"""OTLP protocol selection: ``OTEL_EXPORTER_OTLP[_TRACES|_LOGS]_PROTOCOL`` decides whether
``tallyspan.instrument()`` sends traces and ledger log records over gRPC or HTTP. Real receivers on
127.0.0.1 (a grpcio server with the OTLP collector services, the OTLP/HTTP one of conftest) decode
what arrives."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan import semconv
from tallyspan._config import (
    ENV_EXPORTER_OTLP_LOGS_PROTOCOL,
    ENV_EXPORTER_OTLP_PROTOCOL,
    ENV_EXPORTER_OTLP_TRACES_PROTOCOL,
    otlp_logs_protocol,
    otlp_traces_protocol,
)

_PROTOCOL_ENV = (
    ENV_EXPORTER_OTLP_PROTOCOL,
    ENV_EXPORTER_OTLP_TRACES_PROTOCOL,
    ENV_EXPORTER_OTLP_LOGS_PROTOCOL,
    "OTEL_EXPORTER_OTLP_INSECURE",
)


@pytest.fixture(autouse=True)
def _no_protocol_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROTOCOL_ENV:
        monkeypatch.delenv(name, raising=False)


class GRPCReceiver:
    """A real OTLP/gRPC receiver on 127.0.0.1: the trace and logs collector services of the OTLP protos."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.log_records: list[Any] = []
        self.lock = threading.Lock()
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                with receiver.lock:
                    for resource_spans in request.resource_spans:
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                with receiver.lock:
                    for resource_logs in request.resource_logs:
                        for scope_logs in resource_logs.scope_logs:
                            receiver.log_records.extend(scope_logs.log_records)
                return logs_service_pb2.ExportLogsServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._server)  # type: ignore[no-untyped-call]
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self._server)  # type: ignore[no-untyped-call]
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self._server.stop(grace=None).wait()


@pytest.fixture
def grpc_receiver() -> Iterator[GRPCReceiver]:
    """A running OTLP/gRPC receiver; point OTEL_EXPORTER_OTLP_ENDPOINT at ``.endpoint``."""
    receiver = GRPCReceiver()
    yield receiver
    receiver.close()


def _attributes(item: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for kv in item.attributes:
        kind = kv.value.WhichOneof("value")
        values[kv.key] = (
            tuple(v.string_value for v in kv.value.array_value.values)
            if kind == "array_value"
            else getattr(kv.value, kind)
        )
    return values


def _one_run_with_one_unlogged_call(tracer_provider: TracerProvider) -> tuple[tallyspan.Instrumentation, Any]:
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=[])

    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    with tallyspan.run("agent") as run_span:
        search("flights", tool_call_id="c1")
    assert instrumentation.force_flush(10_000) is True
    return instrumentation, run_span


def test_grpc_protocol_sends_spans_and_ledger_records_to_a_grpc_receiver(
    tracer_provider: TracerProvider, grpc_receiver: GRPCReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", grpc_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    instrumentation, run_span = _one_run_with_one_unlogged_call(tracer_provider)

    assert instrumentation.settings.otlp_traces_protocol == "grpc"
    assert instrumentation.settings.otlp_logs_protocol == "grpc"
    assert "otlp" in instrumentation.components
    with grpc_receiver.lock:
        spans = list(grpc_receiver.spans)
        records = list(grpc_receiver.log_records)
    assert [span.name for span in spans] == ["execute_tool search", "invoke_agent agent"]
    tool, run = spans
    assert run.span_id.hex() == format(run_span.get_span_context().span_id, "016x")
    assert tool.parent_span_id == run.span_id
    tool_attributes = _attributes(tool)
    assert tool_attributes[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool_attributes[semconv.GEN_AI_TOOL_CALL_ID] == "c1"
    run_attributes = _attributes(run)
    assert run_attributes[semconv.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert run_attributes[semconv.GEN_AI_AGENT_NAME] == "agent"
    assert run_attributes[semconv.RUN_NAME] == "agent"
    assert run_attributes[semconv.LEDGER_BALANCED] is False

    assert [r.event_name for r in records] == [
        semconv.EVENT_LEDGER_ENTRY,
        semconv.EVENT_LEDGER_RECONCILIATION,
    ]
    assert {r.trace_id for r in records} == {run.trace_id}
    entry, reconciliation = (_attributes(r) for r in records)
    assert entry[semconv.LEDGER_CALL_ID] == "c1"
    assert entry[semconv.LEDGER_SIDE] == "observed"
    assert records[1].span_id == run.span_id
    assert reconciliation[semconv.RUN_NAME] == "agent"
    assert reconciliation[semconv.LEDGER_BALANCED] is False
    assert reconciliation[semconv.LEDGER_DISCREPANCY_TYPES] == ("ledger_missing", "unlogged_call")


def test_the_per_signal_protocol_wins_over_the_general_one(
    tracer_provider: TracerProvider,
    grpc_receiver: GRPCReceiver,
    otlp_receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{otlp_receiver.endpoint}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", grpc_receiver.endpoint)
    instrumentation, _ = _one_run_with_one_unlogged_call(tracer_provider)

    assert instrumentation.settings.otlp_traces_protocol == "http/protobuf"
    assert instrumentation.settings.otlp_logs_protocol == "grpc"
    with otlp_receiver.lock:
        assert [span.name for span in otlp_receiver.spans] == ["execute_tool search", "invoke_agent agent"]
        assert otlp_receiver.log_records == []
        assert set(otlp_receiver.paths) == {"/v1/traces"}
    with grpc_receiver.lock:
        assert grpc_receiver.spans == []
        assert [r.event_name for r in grpc_receiver.log_records] == [
            semconv.EVENT_LEDGER_ENTRY,
            semconv.EVENT_LEDGER_RECONCILIATION,
        ]


@pytest.mark.parametrize(
    ("general", "traces", "logs", "expected"),
    [
        (None, None, None, ("http/protobuf", "http/protobuf")),
        ("grpc", None, None, ("grpc", "grpc")),
        (" GRPC ", None, None, ("grpc", "grpc")),
        ("grpc", "http/protobuf", None, ("http/protobuf", "grpc")),
        ("http/protobuf", None, "grpc", ("http/protobuf", "grpc")),
        (None, "grpc", None, ("grpc", "http/protobuf")),
    ],
)
def test_protocol_resolution_per_signal(
    general: str | None,
    traces: str | None,
    logs: str | None,
    expected: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in (
        (ENV_EXPORTER_OTLP_PROTOCOL, general),
        (ENV_EXPORTER_OTLP_TRACES_PROTOCOL, traces),
        (ENV_EXPORTER_OTLP_LOGS_PROTOCOL, logs),
    ):
        if value is not None:
            monkeypatch.setenv(name, value)
    assert (otlp_traces_protocol(), otlp_logs_protocol()) == expected


def test_an_unknown_protocol_warns_once_and_exports_http_protobuf(
    tracer_provider: TracerProvider,
    otlp_receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with caplog.at_level(logging.WARNING, logger="tallyspan"):
        instrumentation, _ = _one_run_with_one_unlogged_call(tracer_provider)
        assert otlp_traces_protocol() == "http/protobuf"  # asked again: no second warning
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "OTEL_EXPORTER_OTLP_PROTOCOL='carrier-pigeon' is not an OTLP protocol "
        "(grpc, http/protobuf, http/json); exporting http/protobuf"
    ]
    assert instrumentation.settings.otlp_traces_protocol == "http/protobuf"
    with otlp_receiver.lock:
        assert [span.name for span in otlp_receiver.spans] == ["execute_tool search", "invoke_agent agent"]
        assert [r.event_name for r in otlp_receiver.log_records] == [
            semconv.EVENT_LEDGER_ENTRY,
            semconv.EVENT_LEDGER_RECONCILIATION,
        ]


def test_http_json_warns_and_exports_http_protobuf(
    tracer_provider: TracerProvider,
    otlp_receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{otlp_receiver.endpoint}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with caplog.at_level(logging.WARNING, logger="tallyspan"):
        _one_run_with_one_unlogged_call(tracer_provider)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json: the Python OTLP exporters do not implement "
        "OTLP/JSON; exporting http/protobuf"
    ]
    with otlp_receiver.lock:
        assert [span.name for span in otlp_receiver.spans] == ["execute_tool search", "invoke_agent agent"]


def test_grpc_without_its_exporter_warns_once_and_exports_nothing(tmp_path: Path, otlp_receiver: Any) -> None:
    # A fresh interpreter in which the gRPC exporter cannot be imported, as without the extra. The
    # endpoint is an HTTP receiver: nothing may reach it, since a gRPC port would not understand HTTP.
    code = """
        import logging, sys
        sys.modules["opentelemetry.exporter.otlp.proto.grpc"] = None
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
        from opentelemetry.sdk.trace import TracerProvider
        import tallyspan
        from tallyspan import ConfigError
        from tallyspan_exporters import OTLPLedgerSink

        instrumentation = tallyspan.instrument(tracer_provider=TracerProvider(), store=None, instrumentors=[])
        with tallyspan.run("agent"):
            pass
        assert instrumentation.force_flush(10_000)
        settings = instrumentation.settings
        print("components", sorted(instrumentation.components))
        print("exported", settings.otlp_traces, settings.otlp_logs)
        try:
            OTLPLedgerSink(protocol="grpc")
        except ConfigError as error:
            print("sink", error)
        tallyspan.uninstrument()
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        },
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "components ['checks', 'ledger']",
        "exported False False",
        "sink OTLP logs over gRPC need opentelemetry-exporter-otlp-proto-grpc: pip install 'tallyspan[grpc]'",
    ]
    assert result.stderr.splitlines() == [
        "WARNING OTLP over gRPC was asked for, but its exporter (opentelemetry-exporter-otlp-proto-grpc) is "
        "not installed: tallyspan exports no traces and ledger logs over OTLP. Install it with: "
        "pip install 'tallyspan[grpc]'"
    ]
    with otlp_receiver.lock:
        assert otlp_receiver.paths == []
