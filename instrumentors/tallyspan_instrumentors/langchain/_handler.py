"""The callback handler: LangChain runs in, GenAI spans out, parented by LangChain's own run ids.

LangChain reports every run (chain, chat model, tool) with a ``run_id`` and its ``parent_run_id``. The
handler keeps a bounded map ``run_id -> _Run``; a run that opens a span stores it, a run that does not
(an ordinary chain, a graph node) stores the span its children should hang under. A new span's parent is
the span found for its ``parent_run_id``, so no OpenTelemetry context is ever attached by a callback (an
attach in ``on_*_start`` could not be detached when a stream is abandoned, and would leak into the app).
Entries leave the map when their run ends or fails; the map is bounded for runs that never end.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.plugin import count, json_text, swallowed
from tallyspan.plugin.instrumentors import end_tool_span
from tallyspan_instrumentors._calls import (
    Extraction,
    GenAICall,
    error_type,
    is_instrumentation_enabled,
    start_genai_call,
)
from tallyspan_instrumentors._parts import messages_json
from tallyspan_instrumentors.langchain._extract import (
    input_messages,
    model_result,
    provider_name,
    request_attributes,
    request_model,
    tool_result,
)

__all__ = ["DEFAULT_MAX_RUNS", "TallyspanCallbackHandler"]

_logger = logging.getLogger(__name__)

DEFAULT_MAX_RUNS: Final = 10_000
"""Runs tracked at once; beyond it the oldest entry is dropped (counted as ``dropped.langchain_runs``)."""

#: Metadata LangGraph puts on every run of a graph, and ``langchain.agents.create_agent`` on its agent.
_LS_INTEGRATION: Final = "ls_integration"
_LANGGRAPH: Final = "langgraph"
_AGENT_NAME: Final = "lc_agent_name"
#: A stream its consumer closed early ends without anything having failed.
_NOT_FAILURES: Final = frozenset({"GeneratorExit"})
#: The base of LangGraph's control-flow exceptions (GraphInterrupt, ParentCommand).
_BUBBLE_UP: Final = "GraphBubbleUp"
#: The exception a LangGraph handoff tool raises to send its Command to the parent graph.
_HANDOFF: Final = "ParentCommand"


@dataclass
class _Run:
    """One LangChain run: the span it opened (``own``) or the span its children inherit."""

    span: Span | None
    own: bool = False
    agent_name: str | None = None
    model_call: GenAICall | None = None
    tool_arguments: Any = None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class _Started:
    """What LangChain says of a run as it starts: the keywords of every ``on_*_start`` callback."""

    run_id: UUID
    parent_run_id: UUID | None
    metadata: Mapping[str, Any]
    keywords: Mapping[str, Any]
    """All of them: ``name``, ``invocation_params``, ``tool_call_id``, ``inputs``... as LangChain passed them."""

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> _Started:
        """Read the keywords LangChain passed."""
        metadata = kwargs.get("metadata")
        return cls(
            run_id=kwargs["run_id"],
            parent_run_id=kwargs.get("parent_run_id"),
            metadata=metadata if isinstance(metadata, Mapping) else {},
            keywords=kwargs,
        )


class TallyspanCallbackHandler(BaseCallbackHandler):
    """Turns LangChain callbacks into ``chat`` / ``execute_tool`` / ``invoke_agent`` / ``invoke_workflow`` spans.

    Every method is guarded: a failure here is logged once and counted, never raised into LangChain.
    """

    # Inline, so that async runs call us on the event loop in the caller's context (stage, suppression).
    run_inline = True
    raise_error = False

    def __init__(self, tracer: Tracer, *, capture_content: bool, max_runs: int = DEFAULT_MAX_RUNS) -> None:
        super().__init__()
        self._tracer = tracer
        self._capture_content = capture_content
        self._max_runs = max_runs
        self._runs: OrderedDict[UUID, _Run] = OrderedDict()
        self._lock = threading.Lock()
        self.enabled = True
        """False after ``uninstrument()``: managers built before keep this handler, which then does nothing."""

    def _tracing(self) -> bool:
        return self.enabled and is_instrumentation_enabled()

    # --- the run map ------------------------------------------------------------------------------------

    def _remember(self, run_id: UUID, run: _Run) -> None:
        with self._lock:
            self._runs[run_id] = run
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)
                count("dropped.langchain_runs")

    def _forget(self, run_id: UUID) -> _Run | None:
        with self._lock:
            return self._runs.pop(run_id, None)

    def _forget_own(self, run_id: UUID) -> _Run | None:
        """The ended run's record if it opened a span of its own (its span is ours to end)."""
        run = self._forget(run_id)
        return run if run is not None and run.own else None

    def _parent(self, parent_run_id: UUID | None) -> tuple[_Run | None, otel_context.Context | None]:
        """The parent run's record and the context a child span starts in (None: the current context)."""
        if parent_run_id is None:
            return None, None
        with self._lock:
            parent = self._runs.get(parent_run_id)
        if parent is None:
            return None, None
        if parent.span is None:
            return parent, otel_context.Context()  # the run tree has no span above: a new trace
        return parent, trace.set_span_in_context(parent.span)

    def span_of(self, run_id: UUID) -> Span | None:
        """The span a run opened, if it opened one and is still running (for the model-call wrapper)."""
        with self._lock:
            run = self._runs.get(run_id)
        return run.span if run is not None and run.own else None

    def open_runs(self) -> int:
        """How many runs are tracked now (for tests: every run that ended has left the map)."""
        with self._lock:
            return len(self._runs)

    # --- chains: graphs and agents ----------------------------------------------------------------------

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, **kwargs: Any) -> None:
        """Open ``invoke_workflow`` / ``invoke_agent`` for graph and agent runs; track other chains."""
        self._start(
            "chain_start", "a LangChain chain", kwargs, lambda run: self._chain_start(run, serialized)
        )

    def _start(
        self, key: str, what: str, kwargs: Mapping[str, Any], start: Callable[[_Started], None]
    ) -> None:
        """Run ``start`` on what LangChain says of the run, unless tracing is off (never raises)."""
        if not self._tracing():
            return
        try:
            start(_Started.of(kwargs))
        except Exception:  # a run we cannot read is left untraced; LangChain goes on
            swallowed(_logger, f"langchain.{key}", f"tallyspan could not trace {what}")

    def _chain_start(self, run: _Started, serialized: Mapping[str, Any] | None) -> None:
        parent, context = self._parent(run.parent_run_id)
        metadata = run.metadata
        agent_name = metadata.get(_AGENT_NAME)
        agent_name = agent_name if isinstance(agent_name, str) and agent_name else None
        name = run.keywords.get("name")
        run_name = name if isinstance(name, str) and name else (serialized or {}).get("name")
        # The rule (module docstring of the package): a new agent name opens invoke_agent; the root run
        # of a LangGraph graph opens invoke_workflow; every other chain is a pass-through.
        if agent_name is not None and (parent is None or parent.agent_name != agent_name):
            operation, target = semconv.OPERATION_INVOKE_AGENT, agent_name
            attributes: dict[str, AttributeValue] = {semconv.GEN_AI_AGENT_NAME: agent_name}
        elif parent is None and metadata.get(_LS_INTEGRATION) == _LANGGRAPH:
            operation, target = semconv.OPERATION_INVOKE_WORKFLOW, str(run_name or _LANGGRAPH)
            attributes = {semconv.GEN_AI_WORKFLOW_NAME: target}
        else:
            inherited = parent.span if parent is not None else _current_span()
            self._remember(
                run.run_id, _Run(inherited, agent_name=agent_name or (parent.agent_name if parent else None))
            )
            return
        attributes[semconv.GEN_AI_OPERATION_NAME] = operation
        span = self._tracer.start_span(
            semconv.span_name(operation, target),
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._remember(run.run_id, _Run(span, own=True, agent_name=agent_name))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """End the run's span, if it opened one."""
        self._end_plain(run_id, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """End the run's span as failed, if it opened one."""
        self._end_plain(run_id, error)

    def _end_plain(self, run_id: UUID, error: BaseException | None) -> None:
        try:
            run = self._forget_own(run_id)
            if run is None or run.span is None:
                return
            if error is not None and not _bubbles_up(error):
                _mark_failed(run.span, error)
            run.span.end()
        except Exception:  # the chain's own result or error passes on untouched
            swallowed(_logger, "langchain.chain_end", "tallyspan could not end a LangChain chain span")

    # --- model calls -----------------------------------------------------------------------------------

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[Any]], **kwargs: Any
    ) -> Any:
        """Open ``chat {model}`` for a chat model call."""
        self._start(
            "model_start",
            "a LangChain model call",
            kwargs,
            lambda run: self._model_start(
                semconv.OPERATION_CHAT, serialized, messages[0] if messages else [], run
            ),
        )

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], **kwargs: Any) -> Any:
        """Open ``text_completion {model}`` for a (non-chat) LLM call."""
        self._start(
            "model_start",
            "a LangChain model call",
            kwargs,
            lambda run: self._model_start(
                semconv.OPERATION_TEXT_COMPLETION,
                serialized,
                [_PromptMessage(prompts[0])] if prompts else [],
                run,
            ),
        )

    def _model_start(
        self, operation: str, serialized: Mapping[str, Any] | None, messages: Sequence[Any], run: _Started
    ) -> None:
        parent, context = self._parent(run.parent_run_id)
        metadata = run.metadata
        invocation_params = run.keywords.get("invocation_params")
        invocation_params = invocation_params if isinstance(invocation_params, Mapping) else {}
        model = request_model(metadata, invocation_params)
        attributes: dict[str, AttributeValue] = {
            semconv.GEN_AI_OPERATION_NAME: operation,
            semconv.GEN_AI_PROVIDER_NAME: provider_name(serialized, metadata),
        }
        if model:
            attributes[semconv.GEN_AI_REQUEST_MODEL] = model
        attributes.update(request_attributes(metadata, invocation_params))
        chat, system, prompt = input_messages(messages)
        content_attributes: dict[str, str] = {}
        if self._capture_content:
            content_attributes[semconv.GEN_AI_INPUT_MESSAGES] = messages_json(chat)
            if system:
                content_attributes[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = messages_json(system)
        token = otel_context.attach(context) if context is not None else None
        try:  # start_genai_call parents on the current context; this attach lasts only for the start
            call = start_genai_call(
                self._tracer,
                operation=operation,
                model=model,
                attributes=attributes,
                capture_content=self._capture_content,
                prompt=prompt,
                content_attributes=content_attributes,
            )
        finally:
            if token is not None:
                otel_context.detach(token)
        self._remember(
            run.run_id,
            _Run(call.span, own=True, agent_name=parent.agent_name if parent else None, model_call=call),
        )

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Record the response (usage, finish reason, tool calls) and end the model span."""
        call = self._forget_model_call(run_id)
        if call is not None:
            call.finish(_read_response(response, call))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """End the model span as failed (a stream closed by its consumer is not a failure)."""
        call = self._forget_model_call(run_id)
        if call is None:
            return
        if type(error).__name__ in _NOT_FAILURES:
            # What the stream produced before it was closed, when LangChain hands it over.
            response = kwargs.get("response")
            call.finish(_read_response(response, call) if getattr(response, "generations", None) else None)
        else:
            call.fail(error)

    def _forget_model_call(self, run_id: UUID) -> GenAICall | None:
        run = self._forget(run_id)
        return run.model_call if run is not None else None

    # --- tools -----------------------------------------------------------------------------------------

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> Any:
        """Open ``execute_tool {tool}`` with the tool-call id LangChain passes."""
        self._start(
            "tool_start",
            "a LangChain tool call",
            kwargs,
            lambda run: self._tool_start(serialized or {}, input_str, run),
        )

    def _tool_start(self, serialized: Mapping[str, Any], input_str: str, run: _Started) -> None:
        parent, context = self._parent(run.parent_run_id)
        name = serialized.get("name") or run.keywords.get("name") or "tool"
        name = str(name)
        call_id = run.keywords.get("tool_call_id")
        call_id = str(call_id) if call_id else None
        attributes: dict[str, AttributeValue] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL,
            semconv.GEN_AI_TOOL_NAME: name,
            semconv.GEN_AI_TOOL_TYPE: "function",
        }
        description = serialized.get("description")
        if isinstance(description, str) and description:
            attributes[semconv.GEN_AI_TOOL_DESCRIPTION] = description
        if call_id:
            attributes[semconv.GEN_AI_TOOL_CALL_ID] = call_id
        inputs = run.keywords.get("inputs")
        arguments: Any = dict(inputs) if isinstance(inputs, Mapping) else input_str
        if self._capture_content:
            attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = json_text(arguments)
        span = self._tracer.start_span(
            semconv.span_name(semconv.OPERATION_EXECUTE_TOOL, name),
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._remember(
            run.run_id,
            _Run(
                span,
                own=True,
                agent_name=parent.agent_name if parent else None,
                tool_arguments=arguments,
                tool_call_id=call_id,
            ),
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """End the tool span: failed when the tool returned an error ToolMessage, else succeeded."""
        run = self._forget_own(run_id)
        if run is None or run.span is None:
            return
        try:
            result, failed, message_call_id = tool_result(output)
            if run.tool_call_id is None and message_call_id:
                run.span.set_attribute(semconv.GEN_AI_TOOL_CALL_ID, message_call_id)
        except Exception:  # an output we cannot read still ends the span, as a success
            swallowed(_logger, "langchain.tool_end", "tallyspan could not read a LangChain tool result")
            result, failed = None, False
        end_tool_span(
            run.span,
            error_type=semconv.ERROR_TYPE_TOOL_ERROR if failed else None,
            arguments=run.tool_arguments,
            result=result,
            capture_content=self._capture_content,
        )

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """End the tool span as failed (``tallyspan.tool.outcome=failed``, ``error.type``)."""
        run = self._forget_own(run_id)
        if run is None or run.span is None:
            return
        try:
            call_id = kwargs.get("tool_call_id")
            if run.tool_call_id is None and call_id:
                run.span.set_attribute(semconv.GEN_AI_TOOL_CALL_ID, str(call_id))
        except Exception:  # the tool's own exception propagates untouched; the span still ends
            swallowed(_logger, "langchain.tool_error", "tallyspan could not record a LangChain tool error")
        # A handoff tool ends by raising LangGraph's ParentCommand: the call did what it was for.
        handoff = type(error).__name__ == _HANDOFF
        end_tool_span(
            run.span,
            error_type=None if handoff else error_type(error),
            arguments=run.tool_arguments,
            capture_content=self._capture_content,
        )

    # LangGraph hands graph lifecycle events to every handler of its graph callback manager, which our
    # patched BaseCallbackManager.__init__ also reaches; without these LangChain would log an error each time.

    def on_interrupt(self, event: Any) -> None:
        """A graph paused on ``interrupt()``: nothing to record (the graph's run ends normally)."""

    def on_resume(self, event: Any) -> None:
        """A graph resumed from a checkpoint: nothing to record (the resumed run opens its own span)."""


class _PromptMessage:
    """A plain completion prompt seen as a user message, so one reader serves both model kinds."""

    type = "human"

    def __init__(self, content: str) -> None:
        self.content = content


def _read_response(response: Any, call: GenAICall) -> Extraction | None:
    """What an ``LLMResult`` says, for the span; None when we cannot read it (its span still ends)."""
    try:
        return model_result(response, call.prompt)
    except Exception:  # a response we cannot read still ends its span
        swallowed(_logger, "langchain.model_end", "tallyspan could not read a LangChain model response")
        return None


def _current_span() -> Span | None:
    span = trace.get_current_span()
    return span if span.get_span_context().is_valid else None


def _bubbles_up(error: BaseException) -> bool:
    """LangGraph's GraphBubbleUp family (interrupts, handoffs to the parent graph) is control flow, not failure."""
    return any(cls.__name__ == _BUBBLE_UP for cls in type(error).__mro__)


def _mark_failed(span: Span, error: BaseException) -> None:
    kind = error_type(error)
    span.set_attribute(semconv.ERROR_TYPE, kind)
    # The type only: exception messages may quote content.
    span.set_status(Status(StatusCode.ERROR, kind))
