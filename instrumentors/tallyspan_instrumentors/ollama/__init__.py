"""Instrumentation for the ``ollama`` package: ``chat`` and ``generate``, sync, async and streaming.

Usage (``tallyspan.instrument()`` does this for you)::

    from tallyspan_instrumentors.ollama import OllamaInstrumentor
    OllamaInstrumentor().instrument(tracer_provider=provider, capture_content=False)
"""

from tallyspan_instrumentors.ollama._instrumentor import OllamaInstrumentor

__all__ = ["OllamaInstrumentor"]
