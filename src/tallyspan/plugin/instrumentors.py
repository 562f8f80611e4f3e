"""What an instrumentor takes from the core, beside :mod:`tallyspan.plugin`: the running state
(:func:`active`, the active instrumentation's settings and provider; :func:`resolve_capture_content`,
the one rule for the ``capture_content`` option), the stage a call runs in (:func:`current_stage`),
whether a library is installed in range (:func:`dependency_conflict`, without importing packaging when
it can tell; :func:`conflict_message`, OpenTelemetry's words when it is not), the one way an
``execute_tool`` span ends (:func:`end_tool_span`: outcome, error, content for the ledger) and
``json.dumps`` with its encoder made once (:func:`json_encoder`).

Light on purpose: an instrumentor imports it at the app's start, and must not pay for the check engine.
"""

from __future__ import annotations

from tallyspan._config import resolve_capture_content
from tallyspan._json_encoding import json_encoder
from tallyspan._requirements import conflict_message, dependency_conflict
from tallyspan._stage import current_stage
from tallyspan._state import active
from tallyspan._tool_spans import end_tool_span

__all__ = [
    "active",
    "conflict_message",
    "current_stage",
    "dependency_conflict",
    "end_tool_span",
    "json_encoder",
    "resolve_capture_content",
]
