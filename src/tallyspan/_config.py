"""Configuration: keyword argument, then environment variable, then documented default.

A bad environment value is logged and the default used; a bad argument raises ``ConfigError``.
Every environment variable we read is a constant here, but one: ``TALLYSPAN_NO_EXTENSIONS``, which the
check engine asks ``tallyspan._extensions`` about when it loads (the engine knows no configuration).

Configuration knows no contract and no ledger type: it imports only the top's leaf modules, and what
``instrument()`` makes of it (``Settings``, with the loaded contracts and the ledger's sinks) is in
``tallyspan._state``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from tallyspan._errors import ConfigError
from tallyspan._fork import renew_lock_after_fork

__all__ = [
    "DEFAULT_DB_PATH",
    "DEFAULT_EXPORT_TIMEOUT_S",
    "DEFAULT_OTLP_PROTOCOL",
    "DEFAULT_OTLP_QUEUE_SIZE",
    "DEFAULT_RETRY_MAX_S",
    "DEFAULT_SHUTDOWN_TIMEOUT_S",
    "DEFAULT_SPOOL_MAX_AGE_S",
    "DEFAULT_SPOOL_MAX_BYTES",
    "DEFAULT_SPOOL_PATH",
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
    "ENV_EXPORT_TIMEOUT",
    "ENV_OTLP_QUEUE_SIZE",
    "ENV_RETRY_MAX",
    "ENV_SERVICE_NAME",
    "ENV_SHUTDOWN_TIMEOUT",
    "ENV_SPOOL",
    "ENV_SPOOL_MAX_AGE",
    "ENV_SPOOL_MAX_BYTES",
    "GRPC_INSTALL_HINT",
    "LOCAL_WRITE_GRACE_S",
    "ExportSettings",
    "OTLPProtocol",
    "ShutdownBudget",
    "export_settings",
    "otlp_logs_protocol",
    "otlp_logs_requested",
    "otlp_traces_protocol",
    "otlp_traces_requested",
    "resolve_capture_content",
    "resolve_contracts",
    "resolve_contracts_max_bytes",
    "resolve_db_path",
    "resolve_shutdown_timeout",
    "resolve_spool_path",
    "store_problem",
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
"""Largest contracts file read, in bytes; default 1 MiB (``tallyspan._contract._contract_files.MAX_FILE_BYTES``).
A larger file is refused unread."""

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

ENV_SPOOL = "TALLYSPAN_SPOOL"
"""Path of the OTLP spool, the SQLite file where ledger records and spans with a verdict wait until the
backend accepts them; ``off`` keeps them in memory only. Default: beside the store
(``tallyspan.db`` -> ``tallyspan.spool.db``), or ``./.tallyspan/tallyspan.spool.db`` without a store."""

ENV_SPOOL_MAX_BYTES = "TALLYSPAN_SPOOL_MAX_BYTES"
"""Largest size of the spool's records together, in bytes; default 64 MiB. The oldest records beyond it
are evicted and counted (``dropped.otlp.<signal>.spool_full``)."""

ENV_SPOOL_MAX_AGE = "TALLYSPAN_SPOOL_MAX_AGE_S"
"""Seconds a record may wait in the spool; default 7 days. Older ones are evicted and counted
(``dropped.otlp.<signal>.spool_expired``)."""

ENV_EXPORT_TIMEOUT = "TALLYSPAN_EXPORT_TIMEOUT_S"
"""Seconds one OTLP export may take, the OpenTelemetry exporter's own retries included; default 5.
``OTEL_EXPORTER_OTLP[_TRACES|_LOGS]_TIMEOUT``, when set, wins (it is the exporter's own setting)."""

ENV_RETRY_MAX = "TALLYSPAN_EXPORT_RETRY_MAX_S"
"""Longest wait between two export attempts while the backend is down (the wait doubles from 0.5 s up
to it); default 30. A ``Retry-After`` from the backend is honoured up to 10 minutes."""

ENV_SHUTDOWN_TIMEOUT = "TALLYSPAN_SHUTDOWN_TIMEOUT_S"
"""The shutdown budget: seconds ``uninstrument()``, the provider's shutdown and interpreter exit spend
on tallyspan altogether; default 3. What is not delivered by then stays in the spool for the next start."""

ENV_OTLP_QUEUE_SIZE = "TALLYSPAN_OTLP_QUEUE_SIZE"
"""Spans without a verdict kept in memory for OTLP export while the backend is slow or down; default
2048. Beyond it the oldest are dropped and counted (``dropped.otlp.traces.queue_full``)."""

DEFAULT_DB_PATH = Path(".tallyspan") / "tallyspan.db"
DEFAULT_SPOOL_PATH = DEFAULT_DB_PATH.with_suffix(".spool.db")
"""The spool without a store (``store=None``): where the default store's spool would be; with a store,
the spool sits beside it."""
DEFAULT_SPOOL_MAX_BYTES: Final = 64 << 20
DEFAULT_SPOOL_MAX_AGE_S: Final = 7 * 86400.0
DEFAULT_EXPORT_TIMEOUT_S: Final = 5.0
"""Half the OpenTelemetry exporters' own default (10 s): one export should not hold a sender longer."""
DEFAULT_RETRY_MAX_S: Final = 30.0
DEFAULT_SHUTDOWN_TIMEOUT_S: Final = 3.0
LOCAL_WRITE_GRACE_S: Final = 1.0
"""How long writes to the local disk (the store, the spool) may go on past the shutdown budget, all of
them together: a backend that took the whole budget must not cost the records kept here."""
DEFAULT_OTLP_QUEUE_SIZE: Final = 2048
_SPOOL_OFF: Final = frozenset({"off", "none", "false", "0"})

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


def store_problem(db_path: Path) -> str | None:
    """Why the store at ``db_path`` cannot be written, or None when nothing says it cannot.

    Asked of the file system without creating anything (no folder, no database, no ``sqlite3``): the
    nearest folder that exists must be a folder we may write in (SQLite keeps its journal beside the
    database), and a database already there a file we may write.
    """
    if os.fspath(db_path) == ":memory:":
        return None
    try:
        if db_path.exists():
            if db_path.is_dir():
                return f"{db_path} is a directory"
            if not os.access(db_path, os.W_OK):
                return f"{db_path} is not writable"
        folder = db_path.absolute().parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            return f"{folder} is not a directory"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{folder} is not writable"
    except OSError as exc:  # e.g. a folder on the way we may not even look into
        return f"{exc.strerror or exc}"
    return None


def resolve_spool_path(db_path: Path | None) -> Path | None:
    """Path of the OTLP spool: ``TALLYSPAN_SPOOL`` (``off``: None), else beside the store, else the default."""
    raw = os.environ.get(ENV_SPOOL, "").strip()
    if raw:
        return None if raw.lower() in _SPOOL_OFF else Path(raw)
    if db_path is None or os.fspath(db_path) == ":memory:":
        return DEFAULT_SPOOL_PATH
    return db_path.with_name(f"{db_path.stem}.spool{db_path.suffix or '.db'}")


def _positive_env(name: str, default: float, kind: type[int] | type[float]) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw) if len(raw) < 30 else -1
    except ValueError:
        value = -1
    if not value > 0 or value == float("inf"):
        warn_once((name, raw), "%s=%r is not a positive number; using %s", name, raw[:40], default)
        return default
    return value


class ShutdownBudget:
    """One deadline for everything tallyspan does while shutting down (``TALLYSPAN_SHUTDOWN_TIMEOUT_S``).

    The first link to shut down (or the exit hook) starts the clock; every link after it spends what is
    left, so the chain's shutdown takes the budget altogether, not once per link. Thread-safe enough:
    the deadline is one float, set once.
    """

    def __init__(self, seconds: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> None:
        self.seconds = max(0.0, seconds)
        self._deadline: float | None = None

    def start(self) -> float:
        """Start the clock (once) and return the deadline, in ``time.monotonic()`` seconds."""
        if self._deadline is None:
            self._deadline = time.monotonic() + self.seconds
        return self._deadline

    @property
    def started(self) -> bool:
        """Whether shutting down has begun."""
        return self._deadline is not None

    def remaining(self) -> float:
        """Seconds left (starting the clock if it has not started); never negative."""
        return max(0.0, self.start() - time.monotonic())

    def remaining_millis(self) -> int:
        """:meth:`remaining` in whole milliseconds."""
        return int(self.remaining() * 1000)

    def local_remaining(self) -> float:
        """Seconds left for writes to the local disk: the budget and ``LOCAL_WRITE_GRACE_S`` after it."""
        return max(0.0, self.start() + LOCAL_WRITE_GRACE_S - time.monotonic())

    def local_remaining_millis(self) -> int:
        """:meth:`local_remaining` in whole milliseconds."""
        return int(self.local_remaining() * 1000)


@dataclass(frozen=True)
class ExportSettings:
    """How OTLP export copes with a slow or failing backend (see the ``TALLYSPAN_*`` variables above)."""

    spool_path: Path | None = None
    """The spool file; None keeps the records that wait for the backend in memory only."""
    spool_max_bytes: int = DEFAULT_SPOOL_MAX_BYTES
    spool_max_age_s: float = DEFAULT_SPOOL_MAX_AGE_S
    export_timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S
    retry_max_s: float = DEFAULT_RETRY_MAX_S
    queue_size: int = DEFAULT_OTLP_QUEUE_SIZE


def export_settings(db_path: Path | None) -> ExportSettings:
    """The ``TALLYSPAN_*`` export settings from the environment (a bad value warns once and defaults)."""
    return ExportSettings(
        spool_path=resolve_spool_path(db_path),
        spool_max_bytes=int(_positive_env(ENV_SPOOL_MAX_BYTES, DEFAULT_SPOOL_MAX_BYTES, int)),
        spool_max_age_s=_positive_env(ENV_SPOOL_MAX_AGE, DEFAULT_SPOOL_MAX_AGE_S, float),
        export_timeout_s=_positive_env(ENV_EXPORT_TIMEOUT, DEFAULT_EXPORT_TIMEOUT_S, float),
        retry_max_s=_positive_env(ENV_RETRY_MAX, DEFAULT_RETRY_MAX_S, float),
        queue_size=int(_positive_env(ENV_OTLP_QUEUE_SIZE, DEFAULT_OTLP_QUEUE_SIZE, int)),
    )


def resolve_shutdown_timeout() -> float:
    """The shutdown budget in seconds: ``TALLYSPAN_SHUTDOWN_TIMEOUT_S``, else 3."""
    return _positive_env(ENV_SHUTDOWN_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT_S, float)


def resolve_contracts_max_bytes(default: int) -> int:
    """Largest contracts file read: ``TALLYSPAN_CONTRACTS_MAX_BYTES`` if valid, else ``default`` (the
    contracts' own bound, 1 MiB: the caller passes it, configuration knows no contract)."""
    raw = os.environ.get(ENV_CONTRACTS_MAX_BYTES, "").strip()
    if not raw:
        return default
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
            default,
        )
        return default
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
