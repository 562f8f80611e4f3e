"""OTLP export: the span processor of the ``otlp`` link of ``instrument()``'s chain, and the OTLP
exporters by protocol.

Usage::

    from tallyspan_exporters import otlp_component
    link = otlp_component((), settings)   # an OTLPSpanProcessor over the SDK's OTLPSpanExporter, or None

``tallyspan.instrument()`` finds ``otlp_component`` (``_components``, which imports this module only
when traces go out over OTLP) through the ``otlp`` entry point of ``tallyspan.components``, like every
other link; the ledger's log records go through
``OTLPLedgerSink`` (``_ledger_logs``), which takes its exporter from here too. Which signals go out,
and over which protocol, is configuration the core resolves (``Settings.otlp_*``): it also drops a gRPC
signal whose exporter (the ``tallyspan[grpc]`` extra) is not installed, with one warning.

The exporters are OpenTelemetry's own. Each is made with a timeout (``TALLYSPAN_EXPORT_TIMEOUT_S``, 5 s,
unless ``OTEL_EXPORTER_OTLP[_TRACES|_LOGS]_TIMEOUT`` says otherwise) that bounds one export, its own
retries included; over HTTP it gets a session that notes what each request met (the status, a refused
connection, a timeout, ``Retry-After``), so failures are counted by cause and the spool's retries wait
as long as the backend asks, and that makes an unreachable backend fail the export at once (the
exporter's own retries would sleep through the shutdown budget; the spool retries instead). Within one
export the session also sends no retry before the ``Retry-After`` of the answer it follows: the exporters
before the shared OTLP client (1.39, for one) retry a 503 after their own backoff of about a second
whatever the backend asked; the session ends such an export instead (``RetryHeldError``).
Delivery itself (spool, retries, counted losses) is ``_delivery.Outbox``.

OTLP partial success (a 2xx whose ``Export*ServiceResponse`` says ``rejected_spans`` or
``rejected_log_records``) is read here, not from the exporters: both answer a bare SUCCESS and drop the
response (the HTTP exporter keeps only the status, ``_OTLPHTTPClient.export``; the gRPC one discards
what ``Export`` returns). So the observed HTTP session parses the body of each 2xx answer it receives,
and over gRPC the exporter's stub is wrapped (``_ObservedStub``) to see the response message; both
report the rejected count and the backend's message in the ``Attempt`` the outbox reads.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import time
from collections.abc import Mapping, Sequence
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Any, Final, cast

import requests
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import StatusCode

from tallyspan import semconv
from tallyspan.plugin import ConfigError, ShutdownBudget
from tallyspan.plugin.exporters import GRPC_INSTALL_HINT, ExportSettings, OTLPProtocol
from tallyspan_exporters._codec import decode_span, encode_span
from tallyspan_exporters._delivery import Attempt, Codec, Outbox, RetryHeldError
from tallyspan_exporters._spool import Spool, shared_spool

__all__ = [
    "BackendUnreachableError",
    "GrpcObserver",
    "OTLPSpanProcessor",
    "ObservedSession",
    "carries_verdict",
    "observed_session",
    "open_spool",
    "otlp_log_exporter",
    "otlp_span_exporter",
]


#: (module, class) of each signal's exporter, by protocol.
_SPAN_EXPORTERS: Final = {
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
}
_LOG_EXPORTERS: Final = {
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "OTLPLogExporter"),
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http._log_exporter", "OTLPLogExporter"),
}
#: The exporters' own timeout variables: when the user set one, it wins over ours.
_TIMEOUT_ENV: Final = {
    "traces": ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
    "logs": ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
}
#: A credential provider hands the HTTP exporter a session of its own: then we do not give it ours.
_CREDENTIAL_ENV: Final = {
    "traces": (
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
    ),
    "logs": (
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_LOGS_CREDENTIAL_PROVIDER",
    ),
}


def _retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return max(0.0, when.timestamp() - time.time())
    return max(0.0, seconds) if math.isfinite(seconds) else None


_LARGEST_ANSWER: Final = 1 << 20
"""The largest answer body read for a partial success; a larger one is not an OTLP response."""


def partial_success(signal: str, body: bytes | object) -> tuple[int, str]:
    """What a 2xx answer's ``Export*ServiceResponse`` says was rejected: (count, the backend's message).
    (0, "") for an empty, oversized or unreadable body: the backend accepted everything."""
    if signal == "traces":
        response: Any = ExportTraceServiceResponse()
    else:
        response = ExportLogsServiceResponse()
    if isinstance(body, (bytes, bytearray)):
        if not body or len(body) > _LARGEST_ANSWER:
            return 0, ""
        try:
            response.ParseFromString(bytes(body))
        except Exception:  # protobuf's DecodeError: not an OTLP answer
            return 0, ""
    elif type(body) is type(response):
        response = body
    else:
        return 0, ""
    if not response.HasField("partial_success"):
        return 0, ""
    partial = response.partial_success
    rejected = partial.rejected_spans if signal == "traces" else partial.rejected_log_records
    return max(0, int(rejected)), str(partial.error_message)


class BackendUnreachableError(Exception):
    """The backend could not be reached (refused, reset, timed out): raised by :class:`ObservedSession`
    in place of the ``requests`` error, so the exporter gives up at once instead of sleeping through
    retries of its own; the spool retries, on its own schedule, and a shutdown never waits for them."""


class ObservedSession(requests.Session):
    """A ``requests`` session that notes what its last request met: the OTLP/HTTP exporter is given one,
    so a failed export is counted by cause and the spool honours the backend's ``Retry-After``.

    A connection that fails is reported to the exporter as :class:`BackendUnreachableError`, which it does
    not retry; a request sooner than the ``Retry-After`` of the answer before it in the same export is not
    sent (:class:`RetryHeldError`). Used by one sender thread at a time (each exporter has its own outbox).
    """

    def __init__(self, signal: str = "traces") -> None:
        super().__init__()
        self._signal = signal
        self._attempt = Attempt()
        self._held_until = 0.0

    def reset(self) -> None:
        """Forget the last request (before an export)."""
        self._attempt = Attempt()
        self._held_until = 0.0

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        if time.monotonic() < self._held_until:  # the exporter's own retry, sooner than the backend asked
            raise RetryHeldError(f"the backend asked to wait: {self._attempt.retry_after_s} s")
        response = self._observed_send(request, **kwargs)
        if self._attempt.retry_after_s is not None:
            self._held_until = time.monotonic() + self._attempt.retry_after_s
        return response

    def last(self) -> Attempt:
        """What the last request met, or an empty ``Attempt`` when none was made since :meth:`reset`."""
        return self._attempt

    def _observed_send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        try:
            response = super().send(request, **kwargs)
        except requests.exceptions.Timeout as error:
            self._attempt = Attempt("timeout")
            raise BackendUnreachableError(f"timed out: {error}") from error
        except requests.exceptions.ConnectionError as error:
            self._attempt = Attempt("connection")
            raise BackendUnreachableError(f"connection failed: {error}") from error
        except Exception:
            self._attempt = Attempt("failed")
            raise
        status = response.status_code
        rejected, message = 0, ""
        if 200 <= status < 300:
            try:  # the exporter reads only the status: a partial success is seen here or never
                rejected, message = partial_success(self._signal, response.content)
            except Exception:  # a body we cannot read says nothing was rejected
                rejected, message = 0, ""
        self._attempt = Attempt(
            f"http_{status}",
            _retry_after(response.headers.get("retry-after")) if status in (429, 503) else None,
            rejected,
            message,
        )
        return response


class GrpcObserver:
    """What the gRPC exporter's last ``Export`` call met, for the outbox: the partial success of its
    answer, or a failure (counted as ``failed``: the exporter does not show us the status)."""

    def __init__(self, signal: str) -> None:
        self._signal = signal
        self._attempt = Attempt("failed")

    def reset(self) -> None:
        self._attempt = Attempt("failed")  # no call made (the exporter shut down): a failure, as before

    def last(self) -> Attempt:
        return self._attempt

    def answered(self, response: object) -> None:
        try:
            rejected, message = partial_success(self._signal, response)
        except Exception:
            rejected, message = 0, ""
        self._attempt = Attempt("grpc_ok", None, rejected, message)

    def install(self, exporter: object) -> None:
        """Wrap ``exporter``'s stub, and the stub it makes again when it reconnects, so each ``Export``
        is seen. An exporter without the attributes we know (another SDK version) is left alone."""
        stub_class = getattr(exporter, "_stub", None)
        client = getattr(exporter, "_client", None)
        if stub_class is None or client is None or not hasattr(client, "Export"):
            return
        exporter._stub = functools.partial(_ObservedStub.made, stub_class, self)  # type: ignore[attr-defined]
        exporter._client = _ObservedStub(client, self)  # type: ignore[attr-defined]


class _ObservedStub:
    """A gRPC export stub whose ``Export`` hands its answer to a :class:`GrpcObserver`."""

    def __init__(self, stub: Any, observer: GrpcObserver) -> None:
        self._stub = stub
        self._observer = observer

    @classmethod
    def made(cls, stub_class: Any, observer: GrpcObserver, channel: Any) -> _ObservedStub:
        return cls(stub_class(channel), observer)

    def Export(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        response = self._stub.Export(*args, **kwargs)
        self._observer.answered(response)
        return response


Observer = ObservedSession | GrpcObserver
"""What sees an exporter's requests: the HTTP session, or the gRPC observer."""


def _configured(names: Sequence[str]) -> bool:
    return any(os.environ.get(name, "").strip() for name in names)


def _exporter(
    signal: str,
    protocol: str,
    exporters: Mapping[str, tuple[str, str]],
    timeout_s: float | None,
    session: Observer | None,
) -> object:
    """A new exporter of ``signal`` over ``protocol``, configured by the ``OTEL_EXPORTER_OTLP_*`` variables."""
    if protocol not in exporters:
        raise ConfigError(f"protocol must be 'grpc' or 'http/protobuf', not {protocol!r}")
    module_name, class_name = exporters[protocol]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if protocol != "grpc":
            raise
        raise ConfigError(
            f"OTLP {signal} over gRPC need opentelemetry-exporter-otlp-proto-grpc: {GRPC_INSTALL_HINT}"
        ) from error
    arguments: dict[str, Any] = {}
    if timeout_s is not None and not _configured(_TIMEOUT_ENV[signal]):
        arguments["timeout"] = timeout_s
    if isinstance(session, ObservedSession) and protocol != "grpc":
        arguments["session"] = session
    exporter = getattr(module, class_name)(**arguments)
    if isinstance(session, GrpcObserver) and protocol == "grpc":
        session.install(exporter)
    return cast(object, exporter)


def observed_session(signal: str, protocol: OTLPProtocol) -> Observer | None:
    """What sees the exporter of ``signal``'s requests: a session for the HTTP exporter, a
    :class:`GrpcObserver` over gRPC; None when a credential provider
    (``OTEL_PYTHON_EXPORTER_OTLP_HTTP_*CREDENTIAL_PROVIDER``) gives the HTTP exporter its own session."""
    if protocol == "grpc":
        return GrpcObserver(signal)
    if _configured(_CREDENTIAL_ENV[signal]):
        return None
    return ObservedSession(signal)


def otlp_span_exporter(
    protocol: OTLPProtocol, *, timeout_s: float | None = None, session: Observer | None = None
) -> SpanExporter:
    """An OTLP span exporter over ``protocol``, configured by the ``OTEL_EXPORTER_OTLP_*`` variables.

    Args:
        protocol: ``http/protobuf`` or ``grpc``.
        timeout_s: the longest one export may take (its own retries included), unless
            ``OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT`` is set; default the exporter's own (10 s).
        session: for HTTP, the session that sends the requests.

    Raises:
        ConfigError: ``grpc`` without its exporter installed, or an unknown protocol.
    """
    return cast(SpanExporter, _exporter("traces", protocol, _SPAN_EXPORTERS, timeout_s, session))


def otlp_log_exporter(
    protocol: OTLPProtocol, *, timeout_s: float | None = None, session: Observer | None = None
) -> LogRecordExporter:
    """An OTLP log record exporter over ``protocol``, configured by the ``OTEL_EXPORTER_OTLP_*`` variables.

    Args:
        protocol: ``http/protobuf`` or ``grpc``.
        timeout_s: the longest one export may take (its own retries included), unless
            ``OTEL_EXPORTER_OTLP[_LOGS]_TIMEOUT`` is set; default the exporter's own (10 s).
        session: for HTTP, the session that sends the requests.

    Raises:
        ConfigError: ``grpc`` without its exporter installed, or an unknown protocol.
    """
    return cast(LogRecordExporter, _exporter("logs", protocol, _LOG_EXPORTERS, timeout_s, session))


def carries_verdict(span: ReadableSpan) -> bool:
    """True for a span whose loss would hide a finding: violated, an unbalanced ledger, or status ERROR."""
    if span.status.status_code is StatusCode.ERROR:
        return True
    attributes = span.attributes or {}
    return (
        attributes.get(semconv.VIOLATED) is True
        or attributes.get(semconv.LEDGER_BALANCED) is False
        or bool(attributes.get(semconv.VIOLATION_TYPES))
    )


def _span_id(span: ReadableSpan) -> str:
    context = span.context
    return "" if context is None else f"{context.trace_id:032x}/{context.span_id:016x}"


SPAN_CODEC: Final = Codec(encode=encode_span, decode=decode_span, record_id=_span_id)


def open_spool(settings: ExportSettings) -> Spool | None:
    """The spool the settings name, or None when it is turned off."""
    if settings.spool_path is None:
        return None
    return shared_spool(
        settings.spool_path, max_bytes=settings.spool_max_bytes, max_age_s=settings.spool_max_age_s
    )


class OTLPSpanProcessor(SpanProcessor):
    """Send the spans it is given to an OTLP backend; the spans with a verdict go through the spool.

    A span that is violated, has an unbalanced ledger or status ERROR is written to the spool before
    it is sent and leaves it only once the backend accepted it, across restarts; a clean span waits in
    memory (at most ``queue_size``; beyond it the oldest is dropped and counted). See ``_delivery``.

    Args:
        exporter: the span exporter (the SDK's ``OTLPSpanExporter`` in ``instrument()``).
        settings: the spool and its limits, the retry limit, the memory queue size.
        budget: the shutdown budget; default its own (``TALLYSPAN_SHUTDOWN_TIMEOUT_S``'s default).
        session: the exporter's observed HTTP session, for failure causes and ``Retry-After``.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        settings: ExportSettings | None = None,
        budget: ShutdownBudget | None = None,
        session: Observer | None = None,
    ) -> None:
        settings = settings or ExportSettings()
        self._outbox: Outbox[ReadableSpan] = Outbox(
            exporter,
            signal="traces",
            codec=SPAN_CODEC,
            spool=open_spool(settings),
            settings=settings,
            budget=budget or ShutdownBudget(),
            attempts=session,
        )

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and not span.context.trace_flags.sampled:
            return  # recorded but not sampled: not exported, like the SDK's own batch processor
        self._outbox.submit(span, durable=carries_verdict(span))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._outbox.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._outbox.shutdown()
