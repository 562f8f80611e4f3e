"""Span start and end for MCP ``tools/call``, on both sides, per the MCP semantic conventions.

The conventions name MCP spans ``{mcp.method.name} {target}``; we name them ``execute_tool {tool}``
(the GenAI form the conventions call compatible) so the checks, the ledger and every dashboard find MCP
tools like any other tool, and carry ``mcp.method.name=tools/call`` for MCP-aware backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span

from tallyspan import semconv
from tallyspan_instrumentors._common import error_type
from tallyspan_instrumentors._tool_span import end_tool_span

__all__ = ["fail_from_exception", "finish_from_result", "is_error_result", "result_text", "tool_attributes"]


def tool_attributes(name: str, protocol_version: Any = None, session_id: Any = None) -> dict[str, Any]:
    """The attributes an MCP tool-call span starts with."""
    attributes: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: name,
        semconv.MCP_METHOD_NAME: semconv.MCP_METHOD_TOOLS_CALL,
    }
    if isinstance(protocol_version, str) and protocol_version:
        attributes[semconv.MCP_PROTOCOL_VERSION] = protocol_version
    if isinstance(session_id, str) and session_id:
        attributes[semconv.MCP_SESSION_ID] = session_id
    return attributes


def _field(result: Any, *names: str) -> Any:
    """A field of a CallToolResult model or of its wire dict (``is_error`` / ``isError``)."""
    for name in names:
        if isinstance(result, Mapping):
            if name in result:
                return result[name]
        elif hasattr(result, name):
            return getattr(result, name)
    return None


def result_text(result: Any) -> Any:
    """What a tool returned, for the ledger: its structured content, else its text blocks joined."""
    structured = _field(result, "structured_content", "structuredContent")
    if structured is not None:
        return structured
    blocks = _field(result, "content")
    if not isinstance(blocks, list):
        return None
    texts = []
    for block in blocks:
        text = block.get("text") if isinstance(block, Mapping) else getattr(block, "text", None)
        if isinstance(text, str):
            texts.append(text)
    return "\n".join(texts)


def is_error_result(result: Any) -> bool:
    """Whether a CallToolResult (model or wire dict) says the tool failed (``isError``)."""
    return _field(result, "is_error", "isError") is True


def finish_from_result(span: Span, result: Any, arguments: Any, *, capture_content: bool) -> None:
    """End a tool span from the call's result: ``isError`` true means the tool failed."""
    failed = is_error_result(result)
    end_tool_span(
        span,
        failed=failed,
        error_type=semconv.ERROR_TYPE_TOOL_ERROR if failed else None,
        arguments=arguments,
        result=result_text(result),
        capture_content=capture_content,
    )


def fail_from_exception(span: Span, exc: BaseException, arguments: Any, *, capture_content: bool) -> None:
    """End a tool span whose call raised: the JSON-RPC error code when there is one, else the class."""
    code = getattr(getattr(exc, "error", None), "code", None)
    kind = str(code) if isinstance(code, int) and not isinstance(code, bool) else error_type(exc)
    end_tool_span(span, failed=True, error_type=kind, arguments=arguments, capture_content=capture_content)
