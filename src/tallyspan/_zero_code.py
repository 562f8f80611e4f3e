"""Zero-code: ``opentelemetry-instrument python app.py`` runs the whole chain, configured by the environment.

``opentelemetry-instrument`` (opentelemetry-instrumentation's ``auto_instrumentation``) starts a program
in three steps: the distro's ``configure()``, the configurator (opentelemetry-distro's sets the SDK's
global TracerProvider and its exporters from the ``OTEL_*`` variables), then every
``opentelemetry_instrumentor`` entry point, ours included. A distro or a configurator would have to
compete: only the first one found (or the one ``OTEL_PYTHON_DISTRO`` / ``OTEL_PYTHON_CONFIGURATOR`` names)
runs. So tallyspan registers neither, and hooks in through ``opentelemetry_pre_instrument``, whose entry
points all run, after the configurator and before the instrumentors.

:func:`instrument_from_environment` calls ``tallyspan.instrument(instrumentors=())``, which builds the
checks, ledger and store chain on the global TracerProvider and instruments no library (the
instrumentors come next, from their entry points, so nothing is instrumented twice). When is that?

- A configurator set the provider up: at once. Its processors are adopted, but for its OTLP span
  exporter, which has sent nothing yet: tallyspan's own OTLP export takes its place (the same
  ``OTEL_EXPORTER_OTLP_*`` variables; one export path, whose retries and exit stay within the shutdown
  budget, where the SDK's held the exit for tens of seconds with no backend running).
- Nobody has yet: at the first span any instrumentation starts. Until then every tracer handed out is
  OpenTelemetry's ``ProxyTracer``, which finds the real tracer on its first span; we hook that moment.
  By then an app that sets its own provider in code (``trace.set_tracer_provider``, Phoenix's
  ``register()``) has done so, and we adopt it; otherwise we set ours. Setting ours at once would make
  OpenTelemetry refuse the app's, and its exporter would receive nothing.

opentelemetry-distro's ``configure()`` runs first and writes its own defaults into the environment
(``os.environ.setdefault``): OTLP for every signal, over gRPC. The README's zero-code set-up must work the
same with and without it, so the variables among these that the program's environment did not set at
start (Linux shows it in ``/proc/self/environ``; elsewhere each is taken as the app's) are unset again
before tallyspan reads them: its traces and ledger logs go over OTLP when the app's environment asks, by
``http/protobuf`` unless it says ``grpc``, as without the distro. The meter and logger providers the
configurator made from those defaults stay (tallyspan's counters and other instrumentations' events go
through them), but their shutdown at exit runs within tallyspan's shutdown budget: with no collector on
127.0.0.1:4317, their gRPC retries held the exit for seconds each.

Everything is read from the environment: ``TALLYSPAN_CONTRACTS``, ``TALLYSPAN_DB``,
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, the ``OTEL_EXPORTER_OTLP_*`` variables. It never
stops the program: a bad contracts file is logged as an error and the chain runs without contracts;
anything else is swallowed and counted. The app's own ``tallyspan.instrument(...)`` call, if it makes
one, replaces this instrumentation (or, before the first span, takes its place).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk.trace import TracerProvider

from tallyspan._adopt import remove
from tallyspan._config import (
    ENV_CONTRACTS,
    ENV_EXPORTER_OTLP_PROTOCOL,
    ENV_LOGS_EXPORTER,
    ENV_TRACES_EXPORTER,
    ShutdownBudget,
)
from tallyspan._errors import ConfigError
from tallyspan._fork import start_thread
from tallyspan._instrument import Instrumentation, _flush_at_exit, _lock, instrument, instrumentation
from tallyspan._selfstats import count, swallowed

__all__ = ["instrument_from_environment"]

_logger = logging.getLogger(__name__)

#: ``ProxyTracer._tracer`` as OpenTelemetry defines it, while we wait for the first span (else None).
_waiting: property | None = None

#: Which metrics exporter the SDK's configurator sets up (tallyspan itself never reads it).
_ENV_METRICS_EXPORTER: Final = "OTEL_METRICS_EXPORTER"
#: The defaults opentelemetry-distro's ``configure()`` writes into ``os.environ``.
_DISTRO_DEFAULTS: Final[Mapping[str, str]] = {
    ENV_TRACES_EXPORTER: "otlp",
    _ENV_METRICS_EXPORTER: "otlp",
    ENV_LOGS_EXPORTER: "otlp",
    ENV_EXPORTER_OTLP_PROTOCOL: "grpc",
}
#: The module of opentelemetry-distro's distro: imported when ``opentelemetry-instrument`` configured it.
_DISTRO_MODULE: Final = "opentelemetry.distro"
#: Where the SDK's OTLP span exporters (HTTP and gRPC) live.
_OTLP_EXPORTER_MODULES: Final = "opentelemetry.exporter.otlp."
#: Where the SDK's providers keep the ``shutdown`` they registered with ``atexit`` (meter, logger).
_ATEXIT_ATTRIBUTES: Final = ("_atexit_handler", "_at_exit_handler")
#: The environment the process started with, as Linux keeps it (``os.environ`` changes leave it alone).
_START_ENVIRONMENT: Final = "/proc/self/environ"


def instrument_from_environment() -> Instrumentation | None:
    """The ``opentelemetry_pre_instrument`` hook: the tallyspan chain, configured by the environment.

    Returns:
        The active instrumentation; None when it waits for the first span (no provider is set up yet)
        or could not be set up (logged and counted).
    """
    try:
        with _lock:
            unset = _unset_distro_defaults()
            provider = trace.get_tracer_provider()
            if isinstance(provider, TracerProvider):
                _drop_otlp_export(provider)
                active = _instrument()
                _bound_exit(_providers_of(unset), active.settings.shutdown_budget)
                return active
            if not _wait_for_first_span():
                return _instrument()
            return None
    except Exception:  # opentelemetry-instrument would skip every instrumentor after us: never raise
        swallowed(_logger, "zero_code", "tallyspan could not set itself up under opentelemetry-instrument")
        return None


def _environment_at_start(path: str = _START_ENVIRONMENT) -> set[str] | None:
    """The names of the variables the process started with; None where the platform does not say."""
    try:
        with open(path, "rb") as environ:
            raw = environ.read()
    except OSError:
        return None
    return {entry.split(b"=", 1)[0].decode("utf-8", "replace") for entry in raw.split(b"\0") if entry}


def _unset_distro_defaults() -> tuple[str, ...]:
    """Unset what opentelemetry-distro wrote into the environment and the program's did not have.

    Returns:
        The names unset (none when the distro did not run, or where the starting environment is unknown).
    """
    if _DISTRO_MODULE not in sys.modules:
        return ()
    started_with = _environment_at_start()
    if started_with is None:
        return ()
    unset = tuple(
        name
        for name, value in _DISTRO_DEFAULTS.items()
        if name not in started_with and os.environ.get(name) == value
    )
    for name in unset:
        del os.environ[name]
    if unset:
        _logger.debug("tallyspan: opentelemetry-distro's defaults %s are not the app's: unset", unset)
    return unset


def _providers_of(unset: tuple[str, ...]) -> list[Any]:
    """The global meter and logger providers the configurator made from the distro's defaults alone."""
    providers: list[Any] = []
    if _ENV_METRICS_EXPORTER in unset:
        providers.append(metrics.get_meter_provider())
    if ENV_LOGS_EXPORTER in unset:
        providers.append(_logs.get_logger_provider())
    return providers


def _bound_exit(providers: list[Any], budget: ShutdownBudget) -> bool:
    """Shut the SDK ``providers`` down at exit within ``budget`` instead of at their own pace.

    The SDK registers each provider's ``shutdown`` with ``atexit`` (``_atexit_handler``); that one is
    taken off, and a thread started now (from 3.12 no thread can be started at exit) runs the shutdowns
    when our own exit hook, which waits for it at most what is left of the budget, tells it to. Returns
    whether any provider was taken over.
    """
    handlers = [
        (provider, name)
        for provider in providers
        for name in _ATEXIT_ATTRIBUTES
        if callable(getattr(provider, name, None))
    ]
    if not handlers:
        return False
    exiting = threading.Event()

    def shut_down() -> None:
        exiting.wait()
        for provider, _ in handlers:
            try:
                provider.shutdown()
            except Exception:  # one provider failing must not keep the other from shutting down
                swallowed(_logger, "zero_code", "a provider of the configurator failed to shut down")

    worker = threading.Thread(target=shut_down, name="tallyspan-distro-shutdown", daemon=True)
    if not start_thread(worker):
        return False
    for provider, name in handlers:
        atexit.unregister(getattr(provider, name))
        setattr(provider, name, None)  # what the provider's own shutdown then finds: nothing to unregister

    def at_exit() -> None:
        # Registered after tallyspan's own exit hook, so run before it: flush our chain first (its spans
        # and counters reach these providers), then let them go; the hook finds nothing left to do.
        _flush_at_exit()
        exiting.set()
        worker.join(budget.remaining())
        if worker.is_alive():
            count("errors.zero_code.provider_shutdown_timeout")

    atexit.register(at_exit)
    return True


def _drop_otlp_export(provider: TracerProvider) -> int:
    """Take the configurator's OTLP span processors off the provider and shut them down (no span has been
    made yet: they have nothing to send); tallyspan's own OTLP export replaces them. Returns how many."""
    multi = getattr(provider, "_active_span_processor", None)
    processors = getattr(multi, "_span_processors", ())
    dropped = 0
    for processor in processors if isinstance(processors, tuple) else ():
        exporter = getattr(processor, "span_exporter", None)
        if type(exporter).__module__.startswith(_OTLP_EXPORTER_MODULES) and remove(provider, processor):
            processor.shutdown()
            dropped += 1
    return dropped


def _instrument() -> Instrumentation:
    """``instrument()`` from the environment, marked as such; without contracts if their file is bad."""
    try:
        active = instrument(instrumentors=())
    except ConfigError as exc:  # the message names the file, stage and field: no traceback
        _logger.error("tallyspan: %s; no model output is checked until %s is fixed", exc, ENV_CONTRACTS)
        from tallyspan._contract._contracts import ContractSet

        active = instrument(contracts=ContractSet(), instrumentors=())
    active.zero_code = True
    return active


def _wait_for_first_span() -> bool:
    """Hook the moment a ``ProxyTracer`` finds its real tracer; False if OpenTelemetry's API has changed."""
    global _waiting
    original = vars(trace.ProxyTracer).get("_tracer")
    if not isinstance(original, property) or original.fget is None:
        return False
    getter = original.fget

    def first_span(proxy: Any) -> Any:
        _stop_waiting()
        return getter(proxy)

    _waiting = original
    trace.ProxyTracer._tracer = property(first_span)  # type: ignore[method-assign, assignment]
    return True


def _stop_waiting() -> None:
    """The first span: restore OpenTelemetry's getter, then instrument unless the app already has."""
    global _waiting
    with _lock:
        original, _waiting = _waiting, None
        if original is None:
            return
        trace.ProxyTracer._tracer = original  # type: ignore[method-assign, assignment]
        try:
            if instrumentation() is None:
                _instrument()
        except Exception:  # the app's span goes on untraced by us rather than fail
            swallowed(_logger, "zero_code", "tallyspan could not set itself up at the first span")
