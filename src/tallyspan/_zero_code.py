"""Zero-code: ``opentelemetry-instrument python app.py`` runs the whole chain, configured by the environment.

``opentelemetry-instrument`` (opentelemetry-instrumentation's ``auto_instrumentation``) starts a program
in three steps: the distro's ``configure()``, the configurator (opentelemetry-distro's sets the SDK's
global TracerProvider and its exporters from the ``OTEL_*`` variables), then every
``opentelemetry_instrumentor`` entry point, ours included. A distro or a configurator would have to
compete: only the first one found (or the one ``OTEL_PYTHON_DISTRO`` / ``OTEL_PYTHON_CONFIGURATOR`` names)
runs. So tallyspan registers neither, and hooks in through ``opentelemetry_pre_instrument``, whose entry
points all run, after the configurator and before the instrumentors:

- :func:`instrument_from_environment` calls ``tallyspan.instrument(instrumentors=())``: it adopts the
  provider the configurator set (and its exporters, which then send the checked spans; we add no second
  OTLP trace export), or sets one of its own when there is none, and builds the checks, ledger and store
  chain on it. It instruments no library itself: the instrumentors come next, from their entry points.
- Everything is read from the environment: ``TALLYSPAN_CONTRACTS``, ``TALLYSPAN_DB``,
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, the ``OTEL_EXPORTER_OTLP_*`` variables.
- It never stops the program: a bad contracts file is logged as an error and the chain runs without
  contracts; anything else is swallowed and counted (the app and the other instrumentations go on).
- The app's own ``tallyspan.instrument(...)`` call, if it makes one, replaces this instrumentation.
"""

from __future__ import annotations

import logging

from tallyspan._config import ENV_CONTRACTS
from tallyspan._errors import ConfigError
from tallyspan._instrument import Instrumentation, _lock, instrument
from tallyspan._selfstats import swallowed

__all__ = ["instrument_from_environment"]

_logger = logging.getLogger(__name__)


def instrument_from_environment() -> Instrumentation | None:
    """The ``opentelemetry_pre_instrument`` hook: the tallyspan chain, configured by the environment.

    Returns:
        The active instrumentation, or None when it could not be set up (logged and counted).
    """
    try:
        with _lock:
            try:
                instrumentation = instrument(instrumentors=())
            except ConfigError as exc:  # the message names the file, stage and field: no traceback
                _logger.error(
                    "tallyspan: %s; no model output is checked until %s is fixed", exc, ENV_CONTRACTS
                )
                from tallyspan._contracts import ContractSet

                instrumentation = instrument(contracts=ContractSet(), instrumentors=())
            instrumentation.zero_code = True
            return instrumentation
    except Exception:  # opentelemetry-instrument would skip every instrumentor after us: never raise
        swallowed(_logger, "zero_code", "tallyspan could not set itself up under opentelemetry-instrument")
        return None
