"""Configuration: keyword argument, then environment variable, then documented default.

A bad environment value is logged and the default used; a bad argument raises ``ConfigError``.
Every environment variable we read is a constant here.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from tallyspan._errors import ConfigError
from tallyspan._fork import renew_lock_after_fork

if TYPE_CHECKING:  # types only: loading the settings must not import the check engine or the ledger
    from tallyspan._contracts import ContractSet
    from tallyspan._ledger_api import LedgerSink

__all__ = [
    "DEFAULT_CONTRACTS_MAX_BYTES",
    "DEFAULT_DB_PATH",
    "DEFAULT_OTLP_PROTOCOL",
    "ENV_CAPTURE_MESSAGE_CONTENT",
    "ENV_CONTRACTS",
    "ENV_CONTRACTS_MAX_BYTES",
    "ENV_DB",
    "ENV_EXPORTER_OTLP_ENDPOINT",
    "ENV_EXPORTER_OTLP_LOGS_ENDPOINT",
    "ENV_EXPORTER_OTLP_LOGS_PROTOCOL",
    "ENV_EXPORTER_OTLP_PROTOCOL",
    "ENV_EXPORTER_OTLP_TRACES_ENDPOINT",
    "ENV_EXPORTER_OTLP_TRACES_PROTOCOL",
    "ENV_SERVICE_NAME",
    "GRPC_INSTALL_HINT",
    "OTLPProtocol",
    "Settings",
    "otlp_logs_protocol",
    "otlp_logs_requested",
    "otlp_traces_protocol",
    "otlp_traces_requested",
    "resolve_capture_content",
    "resolve_contracts",
    "resolve_contracts_max_bytes",
    "resolve_db_path",
    "warn_once",
]

_logger = logging.getLogger(__name__)

ENV_CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""``true`` exports message content (prompts, outputs, tool arguments) as span attributes.

The OpenTelemetry GenAI instrumentations also accept ``span_only``, ``event_only`` and
``span_and_event``; tallyspan exports content on spans for any of them except ``no_content``."""

ENV_DB = "TALLYSPAN_DB"
"""Path of the embedded SQLite store; default ``./.tallyspan/tallyspan.db``."""

ENV_CONTRACTS = "TALLYSPAN_CONTRACTS"
"""Path of the contracts file (YAML or TOML) used when ``instrument()`` is given no ``contracts``: how
``opentelemetry-instrument python app.py`` (zero-code) gets its contracts, and what ``tallyspan doctor``
reads. Unset: no contracts, only the checks that need none (timeouts, process errors) and the ledger."""

ENV_CONTRACTS_MAX_BYTES = "TALLYSPAN_CONTRACTS_MAX_BYTES"
"""Largest contracts file read, in bytes; default 1 MiB. A larger file is refused unread."""

ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
ENV_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_EXPORTER_OTLP_LOGS_ENDPOINT = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
ENV_TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
"""The trace exporters to use (``otlp``, ``console``, ``none``, comma-separated); when set, it alone
decides whether traces go out over OTLP (an endpoint variable only configures where to)."""
ENV_LOGS_EXPORTER = "OTEL_LOGS_EXPORTER"
"""The log exporters, as ``OTEL_TRACES_EXPORTER``: whether the ledger records go out over OTLP."""
ENV_EXPORTER_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
"""The OTLP transport of every signal: ``grpc``, ``http/protobuf`` (default) or ``http/json``."""
ENV_EXPORTER_OTLP_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
"""The OTLP transport of traces; wins over ``OTEL_EXPORTER_OTLP_PROTOCOL``."""
ENV_EXPORTER_OTLP_LOGS_PROTOCOL = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"
"""The OTLP transport of logs (the ledger records); wins over ``OTEL_EXPORTER_OTLP_PROTOCOL``."""

DEFAULT_DB_PATH = Path(".tallyspan") / "tallyspan.db"
DEFAULT_CONTRACTS_MAX_BYTES: Final = 1 << 20
"""1 MiB: a contracts file is a few kilobytes; parsing 1 MiB of YAML takes about a second."""

OTLPProtocol = Literal["grpc", "http/protobuf"]
"""The OTLP transports the Python exporters implement (``http/json`` is not one of them)."""
DEFAULT_OTLP_PROTOCOL: Final[OTLPProtocol] = "http/protobuf"
"""The default of the OpenTelemetry specification."""
GRPC_INSTALL_HINT: Final = "pip install 'tallyspan[grpc]'"
"""What to run when OTLP over gRPC is asked for and its exporter is not installed."""

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


def resolve_contracts(argument: Any) -> Any:
    """The contracts to load: the argument if given, else the file ``TALLYSPAN_CONTRACTS`` names, else None."""
    if argument is not None:
        return argument
    raw = os.environ.get(ENV_CONTRACTS, "").strip()
    return Path(raw) if raw else None


def resolve_db_path(argument: str | os.PathLike[str] | None = None) -> Path:
    """Path of the embedded store: the argument if given, else ``TALLYSPAN_DB``, else the default."""
    if argument is not None:
        return Path(argument)
    raw = os.environ.get(ENV_DB, "").strip()
    return Path(raw) if raw else DEFAULT_DB_PATH


def resolve_contracts_max_bytes() -> int:
    """Largest contracts file read: ``TALLYSPAN_CONTRACTS_MAX_BYTES`` if valid, else 1 MiB."""
    raw = os.environ.get(ENV_CONTRACTS_MAX_BYTES, "").strip()
    if not raw:
        return DEFAULT_CONTRACTS_MAX_BYTES
    try:
        value = int(raw) if len(raw) < 20 else -1
    except ValueError:
        value = -1
    if value <= 0:
        warn_once(
            (ENV_CONTRACTS_MAX_BYTES, raw),
            "%s=%r is not a positive number of bytes; using %d",
            ENV_CONTRACTS_MAX_BYTES,
            raw[:40],
            DEFAULT_CONTRACTS_MAX_BYTES,
        )
        return DEFAULT_CONTRACTS_MAX_BYTES
    return value


def _exporter_wanted(selector_env: str, endpoint_envs: tuple[str, ...]) -> bool:
    selector = os.environ.get(selector_env, "").strip().lower()
    if selector:  # as in the SDK: the selection decides, an endpoint only says where OTLP goes
        return "otlp" in {name.strip() for name in selector.split(",")}
    return any(os.environ.get(name, "").strip() for name in endpoint_envs)


def otlp_traces_requested() -> bool:
    """True when the standard variables ask for OTLP trace export: ``OTEL_TRACES_EXPORTER`` naming ``otlp``,
    or, when it is unset, an OTLP endpoint."""
    return _exporter_wanted(
        ENV_TRACES_EXPORTER, (ENV_EXPORTER_OTLP_ENDPOINT, ENV_EXPORTER_OTLP_TRACES_ENDPOINT)
    )


def otlp_logs_requested() -> bool:
    """True when the standard variables ask for OTLP log export: ``OTEL_LOGS_EXPORTER`` naming ``otlp``, or,
    when it is unset, an OTLP endpoint."""
    return _exporter_wanted(ENV_LOGS_EXPORTER, (ENV_EXPORTER_OTLP_ENDPOINT, ENV_EXPORTER_OTLP_LOGS_ENDPOINT))


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()
renew_lock_after_fork(sys.modules[__name__], "_warned_lock")


def warn_once(key: tuple[str, str], message: str, *args: object) -> None:
    """Log a configuration warning the first time only: the environment does not change between calls."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    _logger.warning(message, *args)


def _otlp_protocol(signal_env: str) -> OTLPProtocol:
    for name in (signal_env, ENV_EXPORTER_OTLP_PROTOCOL):
        raw = os.environ.get(name, "").strip().lower()
        if raw:
            break
    else:
        return DEFAULT_OTLP_PROTOCOL
    if raw == "grpc":
        return "grpc"
    if raw == "http/protobuf":
        return "http/protobuf"
    if raw == "http/json":
        warn_once(
            (name, raw),
            "%s=http/json: the Python OTLP exporters do not implement OTLP/JSON; exporting http/protobuf",
            name,
        )
    else:
        warn_once(
            (name, raw),
            "%s=%r is not an OTLP protocol (grpc, http/protobuf, http/json); exporting %s",
            name,
            raw,
            DEFAULT_OTLP_PROTOCOL,
        )
    return DEFAULT_OTLP_PROTOCOL


def otlp_traces_protocol() -> OTLPProtocol:
    """The OTLP transport of traces: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``; ``http/json`` or an unknown value warns
    (once) and gives ``http/protobuf``."""
    return _otlp_protocol(ENV_EXPORTER_OTLP_TRACES_PROTOCOL)


def otlp_logs_protocol() -> OTLPProtocol:
    """The OTLP transport of logs: ``OTEL_EXPORTER_OTLP_LOGS_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``; ``http/json`` or an unknown value warns
    (once) and gives ``http/protobuf``."""
    return _otlp_protocol(ENV_EXPORTER_OTLP_LOGS_PROTOCOL)


@dataclass(frozen=True)
class Settings:
    """Everything ``instrument()`` resolved, handed to each component factory (see ``_instrument``)."""

    capture_content: bool = False
    db_path: Path | None = None
    """The embedded store, or None when the user passed ``store=None``."""
    contracts: ContractSet | None = None
    """The loaded contracts, or None when no contracts were given."""
    service_name: str | None = None
    mark_error_status: bool = True
    """Set status ERROR on violating spans so every backend highlights them."""
    evaluation_events: bool = False
    """Also mirror each check as a ``gen_ai.evaluation.result`` event."""
    ledger_log_tool: str = "log_action"
    """The tool through which the agent logs its own actions."""
    ledger_sinks: tuple[LedgerSink, ...] = ()
    """Where the ledger processor writes entries and reconciliations."""
    otlp_traces: bool = False
    otlp_logs: bool = False
    otlp_traces_protocol: OTLPProtocol = DEFAULT_OTLP_PROTOCOL
    otlp_logs_protocol: OTLPProtocol = DEFAULT_OTLP_PROTOCOL
