"""The ledger's plugin boundary and the agent-side API: ``claim()``, ``LedgerSink``, the exported records.

``claim()`` records one entry of the agent's column as a ``tallyspan.ledger.claim`` event on the
current span; the ledger processor reads it when that span ends, so the claim travels the ordinary
span pipeline and keeps its place in time (the event's timestamp orders it among the tool calls).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan._books._ledger import Reconciliation, normalize_outcome
from tallyspan._selfstats import count, swallowed
from tallyspan._state import capture_content

__all__ = ["LedgerEntry", "LedgerRecord", "LedgerSink", "claim"]

_logger = logging.getLogger(__name__)

#: Stands for an outcome word outside the vocabulary while content is not captured (it is not one either).
_UNRECOGNISED_OUTCOME = "unrecognised"


def claim(call_id: str | None, tool_name: str, claimed_outcome: str, summary: str = "") -> None:
    """Record that the agent says it called ``tool_name`` (call ``call_id``) with ``claimed_outcome``.

    For agents that log their actions in code or text rather than through the log tool. The claim
    belongs to the run of the current span and is reconciled with the calls observed in it. Values
    are recorded as given; one that does not parse (an unknown outcome) is reported as
    ``malformed_log``, never raised. The summary, and an outcome outside the vocabulary (the agent's
    own words), are kept only when message content is captured; so are a tool name and a call id
    that match no call observed in the run (without capture they are exported as ``unobserved``).

    Args:
        call_id: the id of the tool call the agent reports, or None to pair by tool name.
        tool_name: the tool the agent says it called.
        claimed_outcome: ``succeeded``, ``failed`` or ``rejected`` (or a synonym such as ``error``).
        summary: the agent's own words about the action.
    """
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            count("dropped.ledger_claims")
            return
        capture = capture_content()
        outcome = str(claimed_outcome)
        if not capture and normalize_outcome(claimed_outcome) is None:
            outcome = _UNRECOGNISED_OUTCOME  # still malformed_log, without exporting the agent's words
        attributes: dict[str, AttributeValue] = {
            semconv.LEDGER_TOOL_NAME: str(tool_name),
            semconv.LEDGER_OUTCOME: outcome,
        }
        if call_id is not None:
            attributes[semconv.LEDGER_CALL_ID] = str(call_id)
        if summary and capture:
            attributes[semconv.LEDGER_SUMMARY] = str(summary)
        span.add_event(semconv.EVENT_LEDGER_CLAIM, attributes)
    except Exception:  # recording a claim must never break the agent that makes it
        swallowed(_logger, "ledger.claim", "tallyspan.ledger.claim() failed")


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
