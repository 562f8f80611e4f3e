"""The ``otlp`` component: OTLP trace export is a link of the chain made by the exporters plugin, like
the store; a real OTLP/HTTP receiver on 127.0.0.1 decodes what arrives."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan import ConfigError
from tallyspan._config import ENV_EXPORTER_OTLP_TRACES_ENDPOINT
from tallyspan._state import Settings
from tallyspan_exporters import otlp_component
from tallyspan_exporters._otlp import OTLPSpanProcessor, otlp_log_exporter, otlp_span_exporter


def test_the_component_adds_nothing_unless_trace_export_is_requested() -> None:
    assert otlp_component((), Settings()) is None
    assert otlp_component((), Settings(otlp_logs=True)) is None


def test_the_component_sends_the_spans_it_is_given_to_the_otlp_endpoint(
    otlp_receiver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_EXPORTER_OTLP_TRACES_ENDPOINT, f"{otlp_receiver.endpoint}/v1/traces")
    link = otlp_component((), Settings(otlp_traces=True, otlp_traces_protocol="http/protobuf"))
    assert isinstance(link, OTLPSpanProcessor)
    provider = TracerProvider()
    provider.add_span_processor(link)
    provider.get_tracer("test").start_span("chat qwen3").end()
    assert link.force_flush(10_000) is True
    provider.shutdown()
    with otlp_receiver.lock:
        assert [span.name for span in otlp_receiver.spans] == ["chat qwen3"]


def test_an_exporter_that_cannot_be_made_is_logged_once_and_the_link_left_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The gRPC exporter reads its compression setting when it is made: a bad value fails right there.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "bogus")
    settings = Settings(otlp_traces=True, otlp_traces_protocol="grpc")
    with caplog.at_level(logging.WARNING):
        assert otlp_component((), settings) is None
        assert otlp_component((), settings) is None
    assert tallyspan.stats()["errors.otlp.traces"] == 2
    assert [r.getMessage().split(" (logged once")[0] for r in caplog.records] == [
        "could not create the OTLP span exporter; traces are not exported"
    ]


def test_an_unknown_protocol_is_a_config_error_for_both_signals() -> None:
    with pytest.raises(ConfigError, match="not 'http/json'"):
        otlp_span_exporter("http/json")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not 'carrier-pigeon'"):
        otlp_log_exporter("carrier-pigeon")  # type: ignore[arg-type]


def test_instrument_without_the_otlp_component_warns_once_and_goes_on(
    tracer_provider: TracerProvider,
    otlp_receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stale install (the entry point missing) loses OTLP traces with one warning, never the app."""
    from tallyspan import _instrument

    find = _instrument._component_entry_point
    monkeypatch.setattr(
        _instrument, "_component_entry_point", lambda name: None if name == "otlp" else find(name)
    )
    monkeypatch.setenv(ENV_EXPORTER_OTLP_TRACES_ENDPOINT, f"{otlp_receiver.endpoint}/v1/traces")
    with caplog.at_level(logging.WARNING, logger="tallyspan"):
        instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=[])
    with tallyspan.run("agent"):
        pass
    assert instrumentation.force_flush(10_000) is True
    assert "otlp" not in instrumentation.components
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "OTLP trace export was asked for, but tallyspan's 'otlp' component is not installed: traces are "
        "not exported over OTLP. Reinstall tallyspan."
    ]
    with otlp_receiver.lock:
        assert otlp_receiver.spans == []
