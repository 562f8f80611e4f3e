"""``OpenAIAgentsInstrumentor``: our tracing processor added next to the SDK's own, and two small hooks.

* The processor is **added** (``agents.add_trace_processor``): the user's processors and the SDK's own
  export stay. ``uninstrument()`` removes exactly ours and leaves the list as it was otherwise (order and
  identity), including processors the user added in between.
* ``Scope.set_current_span`` / ``reset_current_span`` (and ``..._trace``): while the SDK makes one of its
  spans (or traces) current, the OTel context is that span's, so what runs inside (an OpenAI client
  call, an MCP call, the app's own spans) nests under the agent or tool span. The SDK sets and resets
  in the same context, so the attach/detach pairs match by construction.
* ``ToolContext.from_agent_context``: the SDK's function spans do not carry the tool-call id, but it
  builds the tool's context, with the id, inside the span: we read it there (the ledger pairs by it).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any, Final

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from tallyspan import semconv
from tallyspan.plugin import resolve_capture_content, swallowed
from tallyspan_instrumentors.openai_agents._processor import TallyspanTracingProcessor

__all__ = ["OpenAIAgentsInstrumentor"]

_logger = logging.getLogger(__name__)

_INSTRUMENTS: Final = ("openai-agents >= 0.24",)
#: OTel contexts attached for SDK spans the SDK has not reset yet.
_MAX_PENDING_TOKENS: Final = 10_000

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


def _set_current_wrapper(
    context_for: Callable[[Any], otel_context.Context | None], tokens: dict[Any, Any], argument: str
) -> Wrapper:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        token = wrapped(*args, **kwargs)
        try:
            context = context_for(args[0] if args else kwargs.get(argument))
            if context is not None:
                # contextvars tokens are not hashable: key by id, keep the token alive beside it.
                tokens[id(token)] = (token, otel_context.attach(context))
                while len(tokens) > _MAX_PENDING_TOKENS:  # the SDK never reset some spans: forget them
                    tokens.pop(next(iter(tokens)))
        except Exception:  # the SDK's own bookkeeping must go on; nested spans just lose their parent
            swallowed(_logger, "openai_agents.scope", "tallyspan could not follow the Agents SDK's span")
        return token

    return wrapper


def _reset_current_wrapper(tokens: dict[Any, Any]) -> Wrapper:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        token = args[0] if args else kwargs.get("token")
        pending = tokens.pop(id(token), None)
        try:
            return wrapped(*args, **kwargs)
        finally:
            if pending is not None and pending[0] is token:
                otel_context.detach(pending[1])

    return wrapper


def _tool_context_wrapper(processor: TallyspanTracingProcessor) -> Wrapper:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        tool_context = wrapped(*args, **kwargs)
        try:
            from agents.tracing import get_current_span

            processor.note_tool_context(
                get_current_span(),
                getattr(tool_context, "tool_call_id", None),
                getattr(tool_context, "tool_arguments", None),
            )
        except Exception:  # the tool still runs; its span only lacks the call id
            swallowed(_logger, "openai_agents.tool_context", "tallyspan could not read a tool call id")
        return tool_context

    return wrapper


class OpenAIAgentsInstrumentor(BaseInstrumentor):
    """Records OpenAI Agents SDK runs as ``invoke_agent`` / ``execute_tool`` / ``chat`` spans.

    Keyword args of ``instrument()``: ``tracer_provider``, ``capture_content`` (tool arguments and
    results, model output as span attributes; default from
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).

    Note: ``agents.set_tracing_disabled(True)`` (or ``RunConfig(tracing_disabled=True)``) stops every
    processor, ours included. To stop only the SDK's export to OpenAI, keep tracing on and replace the
    processors (``agents.set_trace_processors([])`` before ``instrument()``) or leave the export without
    an API key.
    """

    _processor: TallyspanTracingProcessor | None = None
    _originals: tuple[tuple[type, str, Any], ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        """The ``openai-agents`` versions this instrumentor supports."""
        return _INSTRUMENTS

    @property
    def processor(self) -> TallyspanTracingProcessor | None:
        """The tracing processor while instrumented, else None."""
        return self._processor

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, tracer_provider=kwargs.get("tracer_provider")
        )
        processor = TallyspanTracingProcessor(
            tracer, capture_content=resolve_capture_content(kwargs.get("capture_content"))
        )
        self._processor = processor
        # Hook in when the app imports the SDK (now, if it already has): importing it ourselves would cost
        # every instrument() seconds in apps that have the SDK installed but never use it.
        wrapt.register_post_import_hook(functools.partial(self._apply, processor), "agents")

    def _apply(self, processor: TallyspanTracingProcessor, module: ModuleType) -> None:
        if not processor.enabled:  # the hook of an instrumentation undone before the import
            return
        import agents.tracing
        from agents.tool_context import ToolContext
        from agents.tracing.scope import Scope

        tokens: dict[Any, Any] = {}
        patches: tuple[tuple[type, str, Wrapper], ...] = (
            (Scope, "set_current_span", _set_current_wrapper(processor.context_for, tokens, "span")),
            (Scope, "reset_current_span", _reset_current_wrapper(tokens)),
            (Scope, "set_current_trace", _set_current_wrapper(processor.context_for_trace, tokens, "trace")),
            (Scope, "reset_current_trace", _reset_current_wrapper(tokens)),
            (ToolContext, "from_agent_context", _tool_context_wrapper(processor)),
        )
        # Keep the raw class attributes (classmethod descriptors) to put back exactly.
        self._originals = tuple((owner, name, owner.__dict__[name]) for owner, name, _ in patches)
        for owner, name, wrapper in patches:
            wrapt.wrap_function_wrapper(owner, name, wrapper)
        # A virtual subclass: the SDK's TracingProcessor is an ABC, and importing it at module level would
        # make this entry point fail to load where the SDK is not installed.
        agents.tracing.TracingProcessor.register(TallyspanTracingProcessor)
        agents.tracing.add_trace_processor(processor)  # type: ignore[arg-type]  # registered just above

    def _uninstrument(self, **kwargs: Any) -> None:
        processor, self._processor = self._processor, None
        if processor is not None:
            processor.close()
        if processor is not None and "agents" in sys.modules:
            import agents.tracing

            provider = agents.tracing.get_trace_provider()
            # The SDK has no public getter for its processors; without it ours stays, disabled (a no-op).
            current = getattr(getattr(provider, "_multi_processor", None), "_processors", None)
            if isinstance(current, tuple) and processor in current:
                agents.tracing.set_trace_processors([p for p in current if p is not processor])
            elif not isinstance(current, tuple):
                _logger.debug(
                    "Agents SDK provider without a processor list: tallyspan's processor left disabled"
                )
        for owner, name, original in self._originals:
            setattr(owner, name, original)
        self._originals = ()
