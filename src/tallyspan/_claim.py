"""``tallyspan.ledger.claim()``: the agent says what it did, as an event on the current span.

``claim()`` records one entry of the agent's column as a ``tallyspan.ledger.claim`` event on the
current span; the ledger processor reads it when that span ends, so the claim travels the ordinary
span pipeline and keeps its place in time (the event's timestamp orders it among the tool calls).

Part of the runtime, not of the ledger's books (``tallyspan._books``): what it exports depends on the
active instrumentation (``capture_content``, from ``tallyspan._state``).
"""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan._books._ledger import normalize_outcome
from tallyspan._selfstats import count, swallowed
from tallyspan._state import capture_content

__all__ = ["claim"]

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
