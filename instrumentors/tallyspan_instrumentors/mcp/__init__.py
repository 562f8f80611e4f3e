"""MCP instrumentation: ``tools/call`` as ``execute_tool`` spans, trace context carried in ``params._meta``.

Usage::

    from tallyspan_instrumentors.mcp import MCPInstrumentor
    MCPInstrumentor().instrument(tracer_provider=provider)
"""

from tallyspan_instrumentors.mcp._instrumentor import MCPInstrumentor

__all__ = ["MCPInstrumentor"]
