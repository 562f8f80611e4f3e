"""``MCPInstrumentor``: MCP ``tools/call`` as ``execute_tool`` spans on the client and the in-process server."""

from __future__ import annotations

from typing import Final

from tallyspan_instrumentors._base import TallyspanInstrumentor, WrapEntry, WrapperState
from tallyspan_instrumentors.mcp._wrappers import call_tool, on_request

__all__ = ["MCPInstrumentor"]

#: (module, "Class.method", wrapper factory): what instrument() wraps and uninstrument() unwraps.
_WRAPPED: Final[tuple[WrapEntry[WrapperState], ...]] = (
    ("mcp.client.session", "ClientSession.call_tool", call_tool),
    ("mcp.server.runner", "ServerRunner._on_request", on_request),
)


class MCPInstrumentor(TallyspanInstrumentor[WrapperState]):
    """Traces MCP tool calls: the client's ``call_tool`` and the in-process server's handling of it.

    Keyword args of ``instrument()``: ``tracer_provider``, ``capture_content`` (tool arguments and
    results as span attributes; default from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    """

    _instruments = ("mcp >= 2.0",)
    _wrapped = _WRAPPED
    _state_type = WrapperState
