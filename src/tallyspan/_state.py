"""The running state: the settings and tracer provider of the active ``instrument()``, in one place.

``_instrument`` writes it; ``_tracing``, ``_tool`` and ``_claim`` read it through a top-level import
(they used to reach up into ``_instrument`` from inside functions). Reads take no lock: each value is
one reference, replaced whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.trace import TracerProvider

from tallyspan._config import Settings

__all__ = ["RunningState", "active", "capture_content", "set_active"]


@dataclass(frozen=True)
class RunningState:
    """What the active instrumentation resolved: its settings and the provider its chain is on."""

    settings: Settings
    tracer_provider: TracerProvider


_active: RunningState | None = None


def active() -> RunningState | None:
    """The active instrumentation's state, or None when ``instrument()`` has not been called (or undone)."""
    return _active


def set_active(state: RunningState | None) -> None:
    """Called by ``instrument()`` and ``uninstrument()`` only."""
    global _active
    _active = state


def capture_content() -> bool:
    """Whether the active instrumentation exports message content (False when there is none)."""
    state = _active
    return state is not None and state.settings.capture_content
