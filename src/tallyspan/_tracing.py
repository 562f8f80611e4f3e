"""The tracer our own spans (``@tallyspan.tool``, ``tallyspan.run``) are made with.

It comes from the provider of the active instrumentation, so our spans go through our chain even when
``instrument()`` was given a private provider; without one, from the global provider.
"""

from __future__ import annotations

import threading

from opentelemetry import trace

from tallyspan import semconv
from tallyspan._state import active
from tallyspan._version import __version__

__all__ = ["tracer"]

_lock = threading.Lock()
_cached: tuple[object, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """Return a tallyspan tracer from the active instrumentation's provider, else the global provider."""
    global _cached
    current = active()
    provider: trace.TracerProvider = (
        current.tracer_provider if current is not None else trace.get_tracer_provider()
    )
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    made = provider.get_tracer(semconv.INSTRUMENTATION_SCOPE, __version__)
    # The global proxy provider hands out proxy tracers that follow a later set_tracer_provider.
    with _lock:
        _cached = (provider, made)
    return made
