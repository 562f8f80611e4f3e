"""The Agents SDK wrappers: the OTel context follows the SDK's current span, and tool calls get their id.

* ``Scope.set_current_span`` / ``reset_current_span`` (and ``..._trace``): while the SDK makes one of its
  spans (or traces) current, the OTel context is that span's, so what runs inside (an OpenAI client
  call, an MCP call, the app's own spans) nests under the agent or tool span. The SDK sets and resets
  in the same context, so the attach/detach pairs match by construction.
* ``ToolContext.from_agent_context``: the SDK's function spans do not carry the tool-call id, but it
  builds the tool's context, with the id, inside the span: we read it there (the ledger pairs by it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry import context as otel_context

from tallyspan.plugin import swallowed
from tallyspan_instrumentors._base import Wrapper, WrapperState
from tallyspan_instrumentors.openai_agents._processor import TallyspanTracingProcessor

__all__ = ["AgentsState", "reset_current", "set_current_span", "set_current_trace", "tool_context"]

_logger = logging.getLogger(__name__)

#: OTel contexts attached for SDK spans the SDK has not reset yet.
_MAX_PENDING_TOKENS: Final = 10_000


@dataclass
class AgentsState(WrapperState):
    """The wrappers' state: the tracing processor, and the OTel contexts attached for the SDK's spans."""

    processor: TallyspanTracingProcessor = field(init=False)
    tokens: dict[int, tuple[Any, object]] = field(default_factory=dict)
    """``id(SDK token) -> (SDK token, OTel token)`` (contextvars tokens are not hashable)."""

    def __post_init__(self) -> None:
        self.processor = TallyspanTracingProcessor(self.tracer, capture_content=self.capture_content)


def _set_current(
    state: AgentsState, context_for: Callable[[Any], otel_context.Context | None], argument: str
) -> Wrapper:
    tokens = state.tokens

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        token = wrapped(*args, **kwargs)
        try:
            context = context_for(args[0] if args else kwargs.get(argument))
            if context is not None:
                # Keyed by id, with the token kept alive beside it.
                tokens[id(token)] = (token, otel_context.attach(context))
                while len(tokens) > _MAX_PENDING_TOKENS:  # the SDK never reset some spans: forget them
                    tokens.pop(next(iter(tokens)))
        except Exception:  # the SDK's own bookkeeping must go on; nested spans just lose their parent
            swallowed(_logger, "openai_agents.scope", "tallyspan could not follow the Agents SDK's span")
        return token

    return wrapper


def set_current_span(state: AgentsState) -> Wrapper:
    """Wrap ``Scope.set_current_span``: the OTel context of our span for it becomes current."""
    return _set_current(state, state.processor.context_for, "span")


def set_current_trace(state: AgentsState) -> Wrapper:
    """Wrap ``Scope.set_current_trace``: the OTel context of our workflow span becomes current."""
    return _set_current(state, state.processor.context_for_trace, "trace")


def reset_current(state: AgentsState) -> Wrapper:
    """Wrap ``Scope.reset_current_span`` / ``reset_current_trace``: detach what the matching set attached."""
    tokens = state.tokens

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        token = args[0] if args else kwargs.get("token")
        pending = tokens.pop(id(token), None)
        try:
            return wrapped(*args, **kwargs)
        finally:
            if pending is not None and pending[0] is token:
                otel_context.detach(pending[1])  # type: ignore[arg-type]  # an OTel token, stored above

    return wrapper


def tool_context(state: AgentsState) -> Wrapper:
    """Wrap ``ToolContext.from_agent_context``: hand the tool call's id and arguments to the processor."""
    processor = state.processor

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        built = wrapped(*args, **kwargs)
        try:
            from agents.tracing import get_current_span

            processor.note_tool_context(
                get_current_span(),
                getattr(built, "tool_call_id", None),
                getattr(built, "tool_arguments", None),
            )
        except Exception:  # the tool still runs; its span only lacks the call id
            swallowed(_logger, "openai_agents.tool_context", "tallyspan could not read a tool call id")
        return built

    return wrapper
