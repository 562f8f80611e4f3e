"""Instrumentation for the ``openai`` package: chat completions, Responses, embeddings.

Usage (``tallyspan.instrument()`` does this for you)::

    from tallyspan_instrumentors.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument(tracer_provider=provider, capture_content=False)
"""

from tallyspan_instrumentors.openai._instrumentor import OpenAIInstrumentor

__all__ = ["OpenAIInstrumentor"]
