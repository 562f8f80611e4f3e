"""Ending ``execute_tool`` spans: the observed side of the ledger, one way for every tool span.

``@tallyspan.tool`` and every tool-running instrumentor (LangChain, MCP, the OpenAI Agents SDK) end their
tool spans here. Each carries ``tallyspan.tool.outcome`` (succeeded / failed / rejected) and, when it did
not succeed, ``error.type`` and status ERROR. Arguments and result reach the ledger through the
ContentBuffer (:class:`~tallyspan._content.ToolContent`) and become span attributes only when content
capture is on.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from tallyspan import semconv
from tallyspan._content import ToolContent, content_buffer
from tallyspan._selfstats import swallowed

__all__ = ["end_tool_span", "json_text"]

_logger = logging.getLogger(__name__)


def json_text(value: Any) -> str:
    """``value`` as text for a span attribute: text as it is, else JSON (non-JSON values as ``str``)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # circular or otherwise unserialisable: its text still says something
        return str(value)


def end_tool_span(
    span: Span,
    *,
    capture_content: bool,
    error_type: str | None = None,
    rejected: bool = False,
    description: str | None = None,
    arguments: Any = None,
    result: Any = None,
) -> None:
    """Record the outcome and content of a tool execution, then end its span (never raises).

    Args:
        span: the ``execute_tool`` span, still open.
        capture_content: export arguments and result as span attributes.
        error_type: ``error.type`` of a tool that did not succeed (an exception class, ``tool_error``, a
            JSON-RPC code); None when it succeeded.
        rejected: with ``error_type``, a policy or permission refusal (outcome ``rejected``, not ``failed``).
        description: a short, content-free status description (default: ``error_type``).
        arguments: the tool's arguments (a mapping or the raw text), for the ledger and opt-in capture.
        result: what the tool returned, for the ledger and opt-in capture.
    """
    try:
        if error_type is None:
            span.set_attribute(semconv.TOOL_OUTCOME, semconv.OUTCOME_SUCCEEDED)
        else:
            outcome = semconv.OUTCOME_REJECTED if rejected else semconv.OUTCOME_FAILED
            span.set_attribute(semconv.TOOL_OUTCOME, outcome)
            span.set_attribute(semconv.ERROR_TYPE, error_type)
            # The type only, by default: an exception message may carry content not opted in for export.
            span.set_status(Status(StatusCode.ERROR, description or error_type))
        if capture_content:
            if arguments is not None:
                span.set_attribute(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, json_text(arguments))
            if result is not None:
                span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, json_text(result))
        buffer = content_buffer()
        if buffer.active:
            buffer.put(span.get_span_context().span_id, ToolContent(arguments=arguments, result=result))
    except Exception:  # recording a tool's outcome must never break the tool call; the span still ends
        swallowed(_logger, "tool.finish", "tallyspan could not record a tool execution")
    finally:
        span.end()
