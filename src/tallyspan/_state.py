"""The running state: the settings and tracer provider of the active ``instrument()``, in one place.

``Settings`` is everything ``instrument()`` resolved: the configuration (``tallyspan._config``) with the
loaded contracts and the ledger's sinks, which configuration itself does not know.

``_instrument`` writes it; ``_tracing``, ``_tool`` and ``_claim`` read it through a top-level import
(they used to reach up into ``_instrument`` from inside functions). Reads take no lock: each value is
one reference, replaced whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from opentelemetry.sdk.trace import TracerProvider

from tallyspan._config import DEFAULT_OTLP_PROTOCOL, ExportSettings, OTLPProtocol, ShutdownBudget
from tallyspan._turns import HandOvers

if TYPE_CHECKING:  # types only: loading the settings must not import the check engine or the ledger
    from tallyspan._books._ledger_api import LedgerSink
    from tallyspan._contract._contracts import ContractSet

__all__ = ["RunningState", "Settings", "active", "capture_content", "set_active"]


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
    export: ExportSettings = field(default_factory=ExportSettings)
    """The spool, its limits, and the timeouts of OTLP export."""
    shutdown_budget: ShutdownBudget = field(default_factory=ShutdownBudget, compare=False, repr=False)
    """The one deadline of this instrumentation's shutdown, shared by every link of its chain."""
    hand_overs: HandOvers = field(default_factory=HandOvers, compare=False, repr=False)
    """The link from the chain's head, on the app's threads, to the consumers fed by our own threads
    (the store's writers): they are handed the GIL at each span once they are due."""


class RunningState(Protocol):
    """What the active instrumentation resolved: its settings and the provider its chain is on. The
    running ``Instrumentation`` is one: it is held here, and only here."""

    @property
    def settings(self) -> Settings: ...

    @property
    def tracer_provider(self) -> TracerProvider: ...


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
