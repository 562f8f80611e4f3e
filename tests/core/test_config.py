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


def test_the_spool_sits_beside_the_store_or_where_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tallyspan._config import DEFAULT_SPOOL_PATH, ENV_SPOOL, resolve_spool_path

    monkeypatch.delenv(ENV_SPOOL, raising=False)
    assert resolve_spool_path(tmp_path / "app.db") == tmp_path / "app.spool.db"
    assert resolve_spool_path(None) == DEFAULT_SPOOL_PATH  # no store: the documented default folder
    monkeypatch.setenv(ENV_SPOOL, str(tmp_path / "elsewhere.db"))
    assert resolve_spool_path(tmp_path / "app.db") == tmp_path / "elsewhere.db"
    monkeypatch.setenv(ENV_SPOOL, "off")
    assert resolve_spool_path(tmp_path / "app.db") is None


@pytest.mark.parametrize("raw", ["-1", "0", "lots", "inf", "9" * 40])
def test_a_bad_export_setting_warns_and_keeps_the_default(
    raw: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tallyspan import _config

    monkeypatch.setattr(_config, "_warned", set())
    monkeypatch.setenv(_config.ENV_SPOOL_MAX_BYTES, raw)
    monkeypatch.setenv(_config.ENV_SHUTDOWN_TIMEOUT, raw)
    assert _config.export_settings(None).spool_max_bytes == _config.DEFAULT_SPOOL_MAX_BYTES
    assert _config.resolve_shutdown_timeout() == _config.DEFAULT_SHUTDOWN_TIMEOUT_S
    assert f"{_config.ENV_SPOOL_MAX_BYTES}=" in caplog.text
    assert f"{_config.ENV_SHUTDOWN_TIMEOUT}=" in caplog.text


def test_export_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tallyspan import _config

    monkeypatch.setenv(_config.ENV_SPOOL_MAX_AGE, "60")
    monkeypatch.setenv(_config.ENV_EXPORT_TIMEOUT, "0.5")
    monkeypatch.setenv(_config.ENV_RETRY_MAX, "2")
    monkeypatch.setenv(_config.ENV_OTLP_QUEUE_SIZE, "10")
    settings = _config.export_settings(None)
    assert (
        settings.spool_max_age_s,
        settings.export_timeout_s,
        settings.retry_max_s,
        settings.queue_size,
    ) == (
        60.0,
        0.5,
        2.0,
        10,
    )


def test_the_shutdown_budget_starts_once_and_only_runs_down() -> None:
    from tallyspan._config import ShutdownBudget

    budget = ShutdownBudget(0.2)
    assert not budget.started
    deadline = budget.start()
    assert budget.start() == deadline
    assert 0 < budget.remaining() <= 0.2
    assert ShutdownBudget(0).remaining_millis() == 0
