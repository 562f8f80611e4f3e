"""Rotel between the app and a backend: only the violating spans come out the other side.

The real Rotel collector (the binary shipped in the ``rotel`` wheel) runs on 127.0.0.1 with
collector-config/rotel/rotel.env and the Python processor collector-config/rotel/violations_only.py;
an instrumented agent exports OTLP/HTTP to it; the ``otlp_receiver`` fixture stands for the backend.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode
from tests.e2e.violating_agent import (
    CHAT_SPAN,
    CONTRACTS,
    EXPECTED_DISCREPANCIES,
    REPORT_STAGE,
    RUN_SPAN,
    run_weekly_agent,
)

from tallyspan import ViolationType, semconv

ROOT = Path(__file__).resolve().parents[2]
ROTEL_DIR = ROOT / "collector-config" / "rotel"
_STARTUP_TIMEOUT_S = 15.0
_DELIVERY_TIMEOUT_S = 15.0
_SHUTDOWN_TIMEOUT_S = 10.0


def _with_libpython(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this interpreter's library folder on the loader's path.

    The agent binary of the rotel wheel embeds CPython through the shared libpython of the Python the
    wheel is for (libpython3.12.so.1.0 for cp312), and looks for it only on the loader's path. A
    distribution's Python keeps it there; pyenv's (how CI gets 3.10, 3.12 and 3.13) keeps it in its own
    lib folder, where the binary would not find it and could not start.
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir:
        return env
    loader_path = env.get("LD_LIBRARY_PATH")
    return {**env, "LD_LIBRARY_PATH": f"{libdir}{os.pathsep}{loader_path}" if loader_path else libdir}


def _rotel_binary() -> Path:
    rotel = pytest.importorskip("rotel", reason="the rotel package (test extra) is not installed")
    binary = Path(rotel.__file__).parent / "rotel-agent"
    if not binary.is_file():
        pytest.skip(f"the rotel wheel ships no agent binary at {binary}")
    # The binary embeds CPython through this Python's libpython; without it, it cannot start.
    probe = subprocess.run(
        [str(binary), "version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=_with_libpython(dict(os.environ)),
    )
    if probe.returncode != 0:
        pytest.skip(f"rotel-agent cannot run here: {probe.stderr.strip() or probe.stdout.strip()}")
    return binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def _rotel(exporter_endpoint: str, tmp_path: Path) -> Iterator[str]:
    """Run Rotel in the foreground with rotel.env loaded as it says (``set -a; . rotel.env; set +a``,
    from the repository's root), the ports and files given in the environment; yield its OTLP/HTTP URL."""
    binary = _rotel_binary()
    http_port, grpc_port = _free_port(), _free_port()
    env = _with_libpython({key: value for key, value in os.environ.items() if not key.startswith("ROTEL_")})
    env.update(
        ROTEL_OTLP_HTTP_ENDPOINT=f"127.0.0.1:{http_port}",
        ROTEL_OTLP_GRPC_ENDPOINT=f"127.0.0.1:{grpc_port}",
        ROTEL_OTLP_EXPORTER_ENDPOINT=exporter_endpoint,
        ROTEL_PID_FILE=str(tmp_path / "rotel.pid"),
        ROTEL_LOG_FILE=str(tmp_path / "rotel.log"),
    )
    log = (tmp_path / "rotel.out").open("wb")
    process = subprocess.Popen(
        [
            "sh",
            "-c",
            'set -a; . "$1"; set +a; exec "$2" start',
            "sh",
            str(ROTEL_DIR / "rotel.env"),
            str(binary),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"rotel exited with {process.returncode}: {(tmp_path / 'rotel.out').read_text()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", http_port), timeout=0.2),
            ):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"rotel did not listen within {_STARTUP_TIMEOUT_S}s")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        # SIGTERM makes Rotel flush its batches and exit: once it has exited, nothing else can arrive.
        process.terminate()
        try:
            process.wait(timeout=_SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
            pytest.fail(
                f"rotel did not exit within {_SHUTDOWN_TIMEOUT_S}s of SIGTERM: its last batch is unknown"
            )
        finally:
            log.close()


def _attributes(span: Any) -> dict[str, Any]:
    """Decode an OTLP protobuf span's attributes into plain Python values."""
    values: dict[str, Any] = {}
    for key_value in span.attributes:
        value = key_value.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            values[key_value.key] = [item.string_value for item in value.array_value.values]
        else:
            values[key_value.key] = getattr(value, kind)
    return values


def _wait_for(receiver: Any, count: int) -> None:
    """Wait until ``count`` spans arrived (or the delivery timeout); what else arrives is read after
    Rotel exited (``_received``)."""
    deadline = time.monotonic() + _DELIVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        with receiver.lock:
            if len(receiver.spans) >= count:
                return
        time.sleep(0.05)


def _received(receiver: Any) -> list[Any]:
    """Everything Rotel forwarded: call after its ``_rotel`` block, when it has flushed and exited."""
    with receiver.lock:
        return list(receiver.spans)


#: The weekly agent's contracts with two required lines the report stage's answers both lack: each of its
#: chat spans then has one more violation than it has types (missing_required twice).
TWO_REQUIRED = {
    **CONTRACTS,
    REPORT_STAGE: {
        **CONTRACTS[REPORT_STAGE],
        "required": [{"name": "verdict_line", "pattern": "^判定"}, {"name": "closing", "pattern": "以上$"}],
    },
}
#: Per violating chat span, written out by hand: sorted types, failure class, violations (events).
EXPECTED_CHATS = {
    (("missing_required", "not_japanese"), "contract_violation", 3),
    (("missing_required", "not_japanese", "refusal"), "contract_violation", 4),
}


def test_rotel_forwards_only_violating_spans_of_a_real_agent_run(otlp_receiver: Any, tmp_path: Path) -> None:
    with _rotel(otlp_receiver.endpoint, tmp_path) as rotel_url:
        exporter = OTLPSpanExporter(endpoint=f"{rotel_url}/v1/traces", timeout=5)
        run_weekly_agent([SimpleSpanProcessor(exporter)], contracts=TWO_REQUIRED)
        _wait_for(otlp_receiver, len(EXPECTED_CHATS) + 1)
    received = _received(otlp_receiver)  # Rotel has flushed and exited: nothing else can arrive

    # Sent: three chat spans, one tool span, one run span. Out: the two violating chats and the run.
    assert sorted(span.name for span in received) == sorted([CHAT_SPAN, CHAT_SPAN, RUN_SPAN])
    chat_spans = [span for span in received if span.name == CHAT_SPAN]
    chats = [_attributes(span) for span in chat_spans]
    # Rotel reverses arrays (seen here) and need not keep span order: compare sorted, as sets.
    assert {
        (
            tuple(sorted(chat[semconv.VIOLATION_TYPES])),
            chat[semconv.FAILURE_CLASS],
            chat[semconv.VIOLATION_COUNT],
        )
        for chat in chats
    } == EXPECTED_CHATS
    for chat, span in zip(chats, chat_spans, strict=True):
        assert chat[semconv.VIOLATED] is True
        assert chat[semconv.STAGE] == REPORT_STAGE
        events = [_attributes(event) for event in span.events if event.name == semconv.EVENT_VIOLATION]
        assert len(events) == chat[semconv.VIOLATION_COUNT]  # one event per violation, not per type
        assert sorted(event[semconv.VIOLATION_TYPE] for event in events).count("missing_required") == 2
        assert span.status.code == span.status.STATUS_CODE_ERROR
    (run,) = [_attributes(span) for span in received if span.name == RUN_SPAN]
    assert run[semconv.LEDGER_BALANCED] is False
    assert sorted(run[semconv.LEDGER_DISCREPANCY_TYPES]) == sorted(EXPECTED_DISCREPANCIES)


def test_rotel_keeps_error_and_violation_event_spans_of_other_sdks_and_drops_clean_ones(
    otlp_receiver: Any, tmp_path: Path
) -> None:
    with _rotel(otlp_receiver.endpoint, tmp_path) as rotel_url:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{rotel_url}/v1/traces")))
        tracer = provider.get_tracer("some.http.instrumentation")
        with tracer.start_as_current_span("GET /ok"):
            pass
        with tracer.start_as_current_span("GET /broken") as span:
            span.set_status(Status(StatusCode.ERROR, "502 from upstream"))
        with tracer.start_as_current_span("chat other-sdk") as span:
            # A checker elsewhere that only adds the event, not the boolean: still a violation.
            span.add_event(semconv.EVENT_VIOLATION, {semconv.VIOLATION_TYPE: ViolationType.REFUSAL.value})
        with tracer.start_as_current_span("GET /also-ok"):
            pass
        provider.shutdown()
        _wait_for(otlp_receiver, 2)
    received = _received(otlp_receiver)  # Rotel has flushed and exited: nothing else can arrive

    assert sorted(span.name for span in received) == ["GET /broken", "chat other-sdk"]
