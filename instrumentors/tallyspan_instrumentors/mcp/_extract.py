"""Reading MCP ``tools/call`` requests and results, on both sides, per the MCP semantic conventions.

The conventions name MCP spans ``{mcp.method.name} {target}``; we name them ``execute_tool {tool}``
(the GenAI form the conventions call compatible) so the checks, the ledger and every dashboard find MCP
tools like any other tool, and carry ``mcp.method.name=tools/call`` for MCP-aware backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tallyspan import semconv

__all__ = ["is_error_result", "result_text", "tool_attributes"]


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
