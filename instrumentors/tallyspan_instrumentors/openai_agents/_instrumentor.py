"""``OpenAIAgentsInstrumentor``: our tracing processor added next to the SDK's own, and the scope wrappers.

The processor is **added** (``agents.add_trace_processor``): the user's processors and the SDK's own
export stay. ``uninstrument()`` removes exactly ours and leaves the list as it was otherwise (order and
identity), including processors the user added in between. The wrappers (``_wrappers``) make the OTel
context follow the SDK's current span and read the tool-call ids.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType
from typing import Final

from tallyspan_instrumentors._base import TallyspanInstrumentor, WrapEntry
from tallyspan_instrumentors._post_import import PatchSet
from tallyspan_instrumentors.openai_agents._processor import TallyspanTracingProcessor
from tallyspan_instrumentors.openai_agents._wrappers import (
    AgentsState,
    reset_current,
    set_current_span,
    set_current_trace,
    tool_context,
)

__all__ = ["OpenAIAgentsInstrumentor"]

_logger = logging.getLogger(__name__)

_SCOPE: Final = "agents.tracing.scope"

#: (module, "Class.method", wrapper factory): what instrument() wraps and uninstrument() unwraps.
_WRAPPED: Final[tuple[WrapEntry[AgentsState], ...]] = (
    (_SCOPE, "Scope.set_current_span", set_current_span),
    (_SCOPE, "Scope.reset_current_span", reset_current),
    (_SCOPE, "Scope.set_current_trace", set_current_trace),
    (_SCOPE, "Scope.reset_current_trace", reset_current),
    ("agents.tool_context", "ToolContext.from_agent_context", tool_context),
)


def _add_processor(processor: TallyspanTracingProcessor, module: ModuleType) -> None:
    import agents.tracing

    # A virtual subclass: the SDK's TracingProcessor is an ABC, and importing it at module level would
    # make this entry point fail to load where the SDK is not installed.
    agents.tracing.TracingProcessor.register(TallyspanTracingProcessor)
    agents.tracing.add_trace_processor(processor)  # type: ignore[arg-type]  # registered just above


def _remove_processor(processor: TallyspanTracingProcessor) -> None:
    import agents.tracing

    provider = agents.tracing.get_trace_provider()
    # The SDK has no public getter for its processors; without it ours stays, disabled (a no-op).
    current = getattr(getattr(provider, "_multi_processor", None), "_processors", None)
    if isinstance(current, tuple) and processor in current:
        agents.tracing.set_trace_processors([p for p in current if p is not processor])
    elif not isinstance(current, tuple):
        _logger.debug("Agents SDK provider without a processor list: tallyspan's processor left disabled")


class OpenAIAgentsInstrumentor(TallyspanInstrumentor[AgentsState]):
    """Records OpenAI Agents SDK runs as ``invoke_agent`` / ``execute_tool`` / ``chat`` spans.

    Keyword args of ``instrument()``: ``tracer_provider``, ``capture_content`` (tool arguments and
    results, model output as span attributes; default from
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).

    Note: ``agents.set_tracing_disabled(True)`` (or ``RunConfig(tracing_disabled=True)``) stops every
    processor, ours included. To stop only the SDK's export to OpenAI, keep tracing on and replace the
    processors (``agents.set_trace_processors([])`` before ``instrument()``) or leave the export without
    an API key.
    """

    _instruments = ("openai-agents >= 0.24",)
    _wrapped = _WRAPPED
    _state_type = AgentsState

    @property
    def processor(self) -> TallyspanTracingProcessor | None:
        """The tracing processor while instrumented, else None."""
        return self._state.processor if self._state is not None else None

    def _on_instrument(self, state: AgentsState, patches: PatchSet) -> None:
        # Added when the app imports the SDK (now, if it already has), after the scope wrappers.
        patches.on_import("agents", lambda module: _add_processor(state.processor, module))

    def _on_uninstrument(self, state: AgentsState) -> None:
        # Uninstrumented mid-run: the SDK will not call us again, so the open spans end now.
        state.processor.close()
        if "agents" in sys.modules:
            _remove_processor(state.processor)
