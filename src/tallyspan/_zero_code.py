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

- A configurator set the provider up: at once. Its processors are adopted (its exporters send the checked
  spans; we add no second OTLP trace export).
- Nobody has yet: at the first span any instrumentation starts. Until then every tracer handed out is
  OpenTelemetry's ``ProxyTracer``, which finds the real tracer on its first span; we hook that moment.
  By then an app that sets its own provider in code (``trace.set_tracer_provider``, Phoenix's
  ``register()``) has done so, and we adopt it; otherwise we set ours. Setting ours at once would make
  OpenTelemetry refuse the app's, and its exporter would receive nothing.

Everything is read from the environment: ``TALLYSPAN_CONTRACTS``, ``TALLYSPAN_DB``,
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, the ``OTEL_EXPORTER_OTLP_*`` variables. It never
stops the program: a bad contracts file is logged as an error and the chain runs without contracts;
anything else is swallowed and counted. The app's own ``tallyspan.instrument(...)`` call, if it makes
one, replaces this instrumentation (or, before the first span, takes its place).
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from tallyspan._config import ENV_CONTRACTS
from tallyspan._errors import ConfigError
from tallyspan._instrument import Instrumentation, _lock, instrument, instrumentation
from tallyspan._selfstats import swallowed

__all__ = ["instrument_from_environment"]

_logger = logging.getLogger(__name__)

#: ``ProxyTracer._tracer`` as OpenTelemetry defines it, while we wait for the first span (else None).
_waiting: property | None = None


def instrument_from_environment() -> Instrumentation | None:
    """The ``opentelemetry_pre_instrument`` hook: the tallyspan chain, configured by the environment.

    Returns:
        The active instrumentation; None when it waits for the first span (no provider is set up yet)
        or could not be set up (logged and counted).
    """
    try:
        with _lock:
            if isinstance(trace.get_tracer_provider(), TracerProvider) or not _wait_for_first_span():
                return _instrument()
            return None
    except Exception:  # opentelemetry-instrument would skip every instrumentor after us: never raise
        swallowed(_logger, "zero_code", "tallyspan could not set itself up under opentelemetry-instrument")
        return None


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
