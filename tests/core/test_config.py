"""Configuration: argument > environment > default; a bad env value warns and defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from tallyspan._config import (
    DEFAULT_DB_PATH,
    otlp_logs_requested,
    otlp_traces_requested,
    resolve_capture_content,
    resolve_contracts,
    resolve_db_path,
)

ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("span_only", True),
        ("false", False),
        ("no_content", False),
        ("", False),
    ],
)
def test_capture_content_reads_the_standard_variable(
    raw: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, raw)
    assert resolve_capture_content(None) is expected


def test_a_bad_capture_content_value_warns_and_captures_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, "maybe")
    assert resolve_capture_content(None) is False
    assert "'maybe' is not a boolean" in caplog.text


def test_db_path_argument_then_env_then_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert resolve_db_path(tmp_path / "arg.db") == tmp_path / "arg.db"
    monkeypatch.setenv("TALLYSPAN_DB", str(tmp_path / "env.db"))
    assert resolve_db_path() == tmp_path / "env.db"
    monkeypatch.delenv("TALLYSPAN_DB")
    assert resolve_db_path() == DEFAULT_DB_PATH == Path(".tallyspan/tallyspan.db")


def test_otlp_export_is_requested_by_endpoint_or_exporter_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert otlp_traces_requested() is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
    assert otlp_traces_requested() is True
    assert otlp_logs_requested() is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert otlp_traces_requested() is False
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "console,otlp")
    assert otlp_logs_requested() is True


def test_otlp_exporter_selection_decides_over_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")  # as the SDK reads it: the endpoint only says where
    assert otlp_traces_requested() is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console, otlp")
    assert otlp_traces_requested() is True


def test_contracts_argument_then_env_then_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    mapping = {"report": {"language": "ja"}}
    assert resolve_contracts(mapping) is mapping
    assert resolve_contracts(None) is None
    monkeypatch.setenv("TALLYSPAN_CONTRACTS", f" {tmp_path / 'contracts.yaml'} ")
    assert resolve_contracts(None) == tmp_path / "contracts.yaml"
    assert resolve_contracts(mapping) is mapping
