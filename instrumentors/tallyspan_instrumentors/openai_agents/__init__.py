"""OpenAI Agents SDK instrumentation: agent runs, tools and model calls as GenAI spans.

Usage::

    from tallyspan_instrumentors.openai_agents import OpenAIAgentsInstrumentor
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
"""

from tallyspan_instrumentors.openai_agents._instrumentor import OpenAIAgentsInstrumentor
from tallyspan_instrumentors.openai_agents._processor import TallyspanTracingProcessor

__all__ = ["OpenAIAgentsInstrumentor", "TallyspanTracingProcessor"]
