"""The ledger's plugin boundary: ``LedgerSink`` and the records the sinks receive.

The agent-side ``claim()`` reads the running state (whether content is captured), so it lives in the
runtime (``tallyspan._claim``); ``tallyspan.ledger`` gives both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tallyspan._books._ledger import Reconciliation

__all__ = ["LedgerEntry", "LedgerRecord", "LedgerSink"]


@dataclass(frozen=True)
class LedgerEntry:
    """One entry of either column, as the sinks export it (ids are OpenTelemetry ints)."""

    trace_id: int
    run_span_id: int
    side: str
    """``observed`` or ``claimed``."""
    seq: int
    call_id: str | None
    tool_name: str | None
    outcome: str | None
    summary: str
    span_id: int | None
    """The span the entry came from (the tool span, the model span that requested the log call...)."""
    time_unix_nano: int
    malformed: str | None = None


@dataclass(frozen=True)
class LedgerRecord:
    """A reconciled run, as the sinks export it."""

    trace_id: int
    run_span_id: int
    run_name: str
    reconciliation: Reconciliation
    observed_count: int
    claimed_count: int
    time_unix_nano: int


@runtime_checkable
class LedgerSink(Protocol):
    """Where the ledger processor writes each run's entries and reconciliation.

    Methods are called on the processor's worker thread. They report failure by returning False and
    never raise (the processor still guards them, logging once and counting).

    With content capture off, a sink gets the agent's claimed tool names and call ids only where they
    name something observed in the run (else ``unobserved``), and no summary. A sink that writes only
    to the user's own disk, as the local store does, may say so with the class attribute
    ``keeps_claimed_identifiers = True``: it then gets the claimed tool names and call ids shaped as
    identifiers as the agent wrote them (and the reconciliation over them), still no summary.
    """

    def export_entries(self, entries: Sequence[LedgerEntry]) -> bool:
        """Write the entries of one run (both columns, in ``seq`` order)."""
        ...

    def export_reconciliation(self, record: LedgerRecord) -> bool:
        """Write the reconciliation of one run, after its entries."""
        ...

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Push out anything buffered; True if done in time."""
        ...

    def shutdown(self) -> None:
        """Flush and release resources; later calls are no-ops."""
        ...
