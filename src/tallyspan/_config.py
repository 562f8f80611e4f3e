"""Configuration: keyword argument, then environment variable, then documented default.

A bad environment value is logged and the default used; a bad argument raises ``ConfigError``.
Every environment variable we read is a constant here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tallyspan._errors import ConfigError

__all__ = [
    "DEFAULT_DB_PATH",
    "ENV_CAPTURE_MESSAGE_CONTENT",
    "ENV_DB",
    "ENV_EXPORTER_OTLP_ENDPOINT",
    "ENV_EXPORTER_OTLP_LOGS_ENDPOINT",
    "ENV_EXPORTER_OTLP_TRACES_ENDPOINT",
    "ENV_SERVICE_NAME",
    "Settings",
    "otlp_logs_requested",
    "otlp_traces_requested",
    "resolve_capture_content",
    "resolve_db_path",
]

_logger = logging.getLogger(__name__)

ENV_CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""``true`` exports message content (prompts, outputs, tool arguments) as span attributes.

The OpenTelemetry GenAI instrumentations also accept ``span_only``, ``event_only`` and
``span_and_event``; tallyspan exports content on spans for any of them except ``no_content``."""

ENV_DB = "TALLYSPAN_DB"
"""Path of the embedded SQLite store; default ``./.tallyspan/tallyspan.db``."""

ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
ENV_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_EXPORTER_OTLP_LOGS_ENDPOINT = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
ENV_TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
ENV_LOGS_EXPORTER = "OTEL_LOGS_EXPORTER"

DEFAULT_DB_PATH = Path(".tallyspan") / "tallyspan.db"

_TRUE = {"true", "1", "yes", "on", "span_only", "event_only", "span_and_event"}
_FALSE = {"false", "0", "no", "off", "no_content", ""}


def resolve_capture_content(argument: bool | None) -> bool:
    """Whether message content is exported: the argument if given, else the env var, else False."""
    if argument is not None:
        if not isinstance(argument, bool):
            raise ConfigError(f"capture_content must be a bool or None, not {type(argument).__name__}")
        return argument
    raw = os.environ.get(ENV_CAPTURE_MESSAGE_CONTENT, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw not in _FALSE:
        _logger.warning(
            "%s=%r is not a boolean; message content is not captured", ENV_CAPTURE_MESSAGE_CONTENT, raw
        )
    return False


def resolve_db_path(argument: str | os.PathLike[str] | None = None) -> Path:
    """Path of the embedded store: the argument if given, else ``TALLYSPAN_DB``, else the default."""
    if argument is not None:
        return Path(argument)
    raw = os.environ.get(ENV_DB, "").strip()
    return Path(raw) if raw else DEFAULT_DB_PATH


def _exporter_wanted(selector_env: str, endpoint_envs: tuple[str, ...]) -> bool:
    selector = os.environ.get(selector_env, "").strip().lower()
    if selector == "none":
        return False
    if "otlp" in selector.split(","):
        return True
    return any(os.environ.get(name, "").strip() for name in endpoint_envs)


def otlp_traces_requested() -> bool:
    """True when the standard OTLP variables ask for trace export (an endpoint, or ``OTEL_TRACES_EXPORTER=otlp``)."""
    return _exporter_wanted(
        ENV_TRACES_EXPORTER, (ENV_EXPORTER_OTLP_ENDPOINT, ENV_EXPORTER_OTLP_TRACES_ENDPOINT)
    )


def otlp_logs_requested() -> bool:
    """True when the standard OTLP variables ask for log export (an endpoint, or ``OTEL_LOGS_EXPORTER=otlp``)."""
    return _exporter_wanted(ENV_LOGS_EXPORTER, (ENV_EXPORTER_OTLP_ENDPOINT, ENV_EXPORTER_OTLP_LOGS_ENDPOINT))


@dataclass(frozen=True)
class Settings:
    """Everything ``instrument()`` resolved, handed to each component factory (see ``_instrument``)."""

    capture_content: bool = False
    db_path: Path | None = None
    """The embedded store, or None when the user passed ``store=None``."""
    contracts: Any = None
    """The loaded ``ContractSet``, or None when no contracts were given."""
    service_name: str | None = None
    mark_error_status: bool = True
    """Set status ERROR on violating spans so every backend highlights them."""
    evaluation_events: bool = False
    """Also mirror each check as a ``gen_ai.evaluation.result`` event."""
    ledger_log_tool: str = "log_action"
    """The tool through which the agent logs its own actions."""
    ledger_sinks: tuple[Any, ...] = ()
    """Where the ledger processor writes entries and reconciliations (``tallyspan.ledger.LedgerSink``)."""
    otlp_traces: bool = False
    otlp_logs: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
