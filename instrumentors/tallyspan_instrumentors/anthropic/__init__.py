"""Instrumentation for the ``anthropic`` package: Messages ``create``, ``parse`` and ``stream``, sync and async.

Usage (``tallyspan.instrument()`` does this for you)::

    from tallyspan_instrumentors.anthropic import AnthropicInstrumentor
    AnthropicInstrumentor().instrument(tracer_provider=provider, capture_content=False)
"""

from tallyspan_instrumentors.anthropic._instrumentor import AnthropicInstrumentor

__all__ = ["AnthropicInstrumentor"]
