"""Ending ``execute_tool`` spans: the observed side of the ledger, shared by the tool-running instrumentors.

Every tool span carries ``gen_ai.tool.name``, the call id when the framework has one, and
``tallyspan.tool.outcome`` (succeeded / failed). Arguments and result reach the ledger through the
ContentBuffer (:class:`~tallyspan._content.ToolContent`) and become span attributes only when content
capture is on.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from tallyspan import semconv
from tallyspan.plugin import ToolContent, content_buffer, swallowed

__all__ = ["end_tool_span", "json_text"]

_logger = logging.getLogger(__name__)


def json_text(value: Any) -> str:
    """``value`` as JSON text for a span attribute (text stays as it is; non-JSON values as ``str``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def end_tool_span(
    span: Span,
    *,
    failed: bool,
    error_type: str | None = None,
    description: str | None = None,
    arguments: Any = None,
    result: Any = None,
    capture_content: bool,
) -> None:
    """Record the outcome and content of a tool execution, then end its span (never raises).

    Args:
        span: the ``execute_tool`` span, still open.
        failed: the tool raised or returned an error result.
        error_type: ``error.type`` when it failed (an exception class, ``tool_error``, a JSON-RPC code).
        description: a short, content-free status description.
        arguments: the tool's arguments (a mapping or the raw text), for the ledger and opt-in capture.
        result: what the tool returned, for the ledger and opt-in capture.
        capture_content: export arguments and result as span attributes.
    """
    try:
        span.set_attribute(
            semconv.TOOL_OUTCOME, semconv.OUTCOME_FAILED if failed else semconv.OUTCOME_SUCCEEDED
        )
        if failed:
            kind = error_type or "error"
            span.set_attribute(semconv.ERROR_TYPE, kind)
            span.set_status(Status(StatusCode.ERROR, description or kind))
        if capture_content:
            if arguments is not None:
                span.set_attribute(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, json_text(arguments))
            if result is not None:
                span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, json_text(result))
        buffer = content_buffer()
        if buffer.active:
            buffer.put(span.get_span_context().span_id, ToolContent(arguments=arguments, result=result))
    except Exception:  # recording a tool's outcome must never break the tool call; the span still ends
        swallowed(_logger, "tool_span.end", "tallyspan could not record a tool execution")
    finally:
        span.end()
