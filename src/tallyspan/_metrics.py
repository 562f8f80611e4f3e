"""OpenTelemetry metrics of the verdicts and of our own losses, through the app's meter provider.

Recorded on the chain's worker when the checks and the ledger reach a verdict; the instruments come
from the global meter provider (a proxy until the app sets one, and a no-op while it has none), so an
app without metrics pays nothing. The names and attributes are those the collector config
``collector-config/otelcol-violation-metrics.yaml`` derives from the spans, so the Grafana dashboard
reads either source: use one of them, not both, or every violation is counted twice.

- ``tallyspan.violations`` (counter): one per violation, by ``tallyspan.violation.type``,
  ``tallyspan.violation.failure_class`` and ``tallyspan.stage``;
- ``tallyspan.ledger.runs`` / ``tallyspan.ledger.unbalanced_runs`` (counters): reconciled agent runs,
  by ``tallyspan.ledger.balanced``;
- ``tallyspan.dropped`` (observable counter): what we dropped, by ``tallyspan.cause`` (the
  ``dropped.*`` keys of ``tallyspan.stats()``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Counter, Observation

from tallyspan import semconv
from tallyspan._selfstats import stats
from tallyspan._version import __version__

__all__ = ["record_run", "record_violations"]

_DROPPED_PREFIX = "dropped."


class _Instruments:
    def __init__(self) -> None:
        meter = metrics.get_meter(semconv.INSTRUMENTATION_SCOPE, __version__)
        self.violations: Counter = meter.create_counter(
            semconv.METRIC_VIOLATIONS, unit="{violation}", description="Violations tallyspan found."
        )
        self.runs: Counter = meter.create_counter(
            semconv.METRIC_LEDGER_RUNS, unit="{run}", description="Agent runs whose ledger was reconciled."
        )
        self.unbalanced_runs: Counter = meter.create_counter(
            semconv.METRIC_LEDGER_UNBALANCED_RUNS,
            unit="{run}",
            description="Agent runs whose books did not balance.",
        )
        meter.create_observable_counter(
            semconv.METRIC_DROPPED,
            callbacks=[_dropped],
            unit="{item}",
            description="Spans, ledger entries and store rows tallyspan dropped, by cause.",
        )


def _dropped(options: CallbackOptions) -> Iterable[Observation]:
    del options
    return [
        Observation(value, {semconv.METRIC_ATTRIBUTE_CAUSE: key})
        for key, value in stats().items()
        if key.startswith(_DROPPED_PREFIX)
    ]


_instruments: _Instruments | None = None
_lock = threading.Lock()


def _get() -> _Instruments:
    global _instruments
    if _instruments is None:
        with _lock:
            if _instruments is None:
                _instruments = _Instruments()
    return _instruments


def record_violations(violations: Iterable[tuple[str, str]], stage: str | None) -> None:
    """Count each ``(type, failure class)`` of one checked span."""
    counter = _get().violations
    for kind, failure_class in violations:
        attributes = {semconv.VIOLATION_TYPE: kind, semconv.VIOLATION_FAILURE_CLASS: failure_class}
        if stage is not None:
            attributes[semconv.STAGE] = stage
        counter.add(1, attributes)


def record_run(balanced: bool) -> None:
    """Count one reconciled agent run."""
    instruments = _get()
    instruments.runs.add(1, {semconv.LEDGER_BALANCED: balanced})
    if not balanced:
        instruments.unbalanced_runs.add(1, {semconv.LEDGER_BALANCED: False})
