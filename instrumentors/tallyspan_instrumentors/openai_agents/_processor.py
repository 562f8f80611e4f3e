"""The tracing processor that turns the Agents SDK's spans into GenAI OpenTelemetry spans.

Mapping (latest GenAI conventions):

* SDK traces (one per ``Runner.run``, or the user's ``agents.trace(...)``) become
  ``invoke_workflow {name}``, so the agents of one run (handoffs) share one OTel trace.
* ``agent`` spans become ``invoke_agent {agent}`` (INTERNAL: the agent runs in process), the run spans
  the ledger reconciles.
* ``function`` spans become ``execute_tool {tool}`` with ``gen_ai.tool.call.id`` (read from the SDK's
  ``ToolContext``, see ``_instrumentor``) and ``tallyspan.tool.outcome``: failed when the SDK attached an
  error to the span (the tool raised, even when the SDK turned the error into a message for the model).
* ``generation`` / ``response`` spans become ``chat {model}`` **only when nothing instruments the OpenAI
  client method the model calls**. When it is instrumented (our OpenAI instrumentor, or another OTel one),
  that instrumentation already records the call, with more detail (response id, finish reasons, the
  request), so a second span would count the call twice and run the checks twice: we record none, and
  the client's span becomes a child of the agent span (the OTel context follows the SDK's current span).
  Models that do not use the OpenAI client (LiteLLM, any-llm) are always recorded here.
* ``handoff`` spans become a ``tallyspan.agent.handoff`` event on the agent span: the GenAI conventions
  define no handoff operation, and the next agent's own ``invoke_agent`` span follows anyway.
* Other spans (task, turn, guardrail, custom, MCP listing) get no span of their own; their children attach
  to the nearest span that has one.

Parents come from the SDK's span ids, never from whatever context is current when a span ends.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from tallyspan import semconv
from tallyspan.plugin import count, swallowed
from tallyspan.plugin.instrumentors import end_tool_span
from tallyspan_instrumentors._calls import GenAICall, is_instrumentation_enabled, start_genai_call
from tallyspan_instrumentors._parts import messages_json, parse_arguments
from tallyspan_instrumentors.openai_agents._extract import (
    chat_input_messages,
    generation_extraction,
    last_user_text,
    response_extraction,
)

__all__ = ["TallyspanTracingProcessor"]

_logger = logging.getLogger(__name__)

#: Open SDK spans we track; more means spans that never end (bounded, drops counted).
_MAX_OPEN_SPANS: Final = 10_000
#: What ``wrapt.wrap_function_wrapper`` leaves on a class (wrapt 2 splits it from ``ObjectProxy``).
_PROXY_TYPE: Final[type] = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)
#: ``error.type`` when the SDK reports an error without an exception class (the conventions' fallback).
_ERROR_OTHER: Final = "_OTHER"


@dataclass
class _Entry:
    """One SDK span: our span (None when it gets none) and the context its children start in."""

    kind: str
    context: otel_context.Context
    span: Span | None = None
    call: GenAICall | None = None
    tool_arguments: Any = None
    attach_tokens: list[Any] = field(default_factory=list)


def _openai_method_instrumented(module: str, owner: str) -> bool:
    """True when ``owner.create`` of the openai SDK is wrapped by an instrumentation (wrapt proxy)."""
    try:
        imported = __import__(module, fromlist=[owner])
        method = inspect.getattr_static(getattr(imported, owner), "create")
    except (ImportError, AttributeError):
        return False
    return isinstance(method, _PROXY_TYPE)


def _model_call_recorded_elsewhere(data: Any) -> bool:
    """Whether another instrumentation records the model call behind this generation/response span."""
    if data.type == "response":
        return _openai_method_instrumented("openai.resources.responses", "AsyncResponses")
    config = getattr(data, "model_config", None) or {}
    if isinstance(config, dict) and config.get("model_impl"):
        return False  # LiteLLM / any-llm: not the OpenAI client
    return _openai_method_instrumented("openai.resources.chat", "AsyncCompletions")


def _trace_key(trace_id: str) -> str:
    """Traces and spans share the entry map; SDK span ids never start with this prefix."""
    return f"trace:{trace_id}"


def _error_message(error: Any) -> str:
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else "error"


class TallyspanTracingProcessor:
    """An ``agents.tracing.TracingProcessor`` that records the SDK's spans as GenAI OTel spans.

    It never raises into the SDK: every hook is guarded, and ``enabled = False`` turns it into a no-op.
    """

    def __init__(self, tracer: Tracer, *, capture_content: bool) -> None:
        self._tracer = tracer
        self._capture_content = capture_content
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.enabled = True

    # --- TracingProcessor ------------------------------------------------------------------------------

    def on_trace_start(self, trace: Any) -> None:
        """Start the ``invoke_workflow {name}`` span of an SDK trace (guarded)."""
        if not self.enabled or not is_instrumentation_enabled():
            return
        try:
            name = getattr(trace, "name", None) or "workflow"
            parent = otel_context.get_current()
            span = self._start_span(
                semconv.OPERATION_INVOKE_WORKFLOW, name, parent, {semconv.GEN_AI_WORKFLOW_NAME: name}
            )
            entry = _Entry(kind="trace", context=trace_api.set_span_in_context(span, parent), span=span)
            self._remember(_trace_key(trace.trace_id), entry)
        except Exception:  # the agent run must go on even if we cannot record it
            swallowed(_logger, "openai_agents.trace_start", "tallyspan could not start an Agents SDK trace")

    def on_trace_end(self, trace: Any) -> None:
        """End the workflow span of an SDK trace (guarded)."""
        with self._lock:
            entry = self._entries.pop(_trace_key(getattr(trace, "trace_id", "")), None)
        if entry is not None and entry.span is not None:
            entry.span.end()

    def on_span_start(self, span: Any) -> None:
        """Start the OTel span of an SDK span (guarded)."""
        if not self.enabled:
            return
        try:
            self._start(span)
        except Exception:  # the agent run must go on even if we cannot record this span
            swallowed(_logger, "openai_agents.span_start", "tallyspan could not start an Agents SDK span")

    def on_span_end(self, span: Any) -> None:
        """End the OTel span of an SDK span (guarded)."""
        with self._lock:
            entry = self._entries.pop(span.span_id, None)
        if entry is None:
            return
        try:
            self._end(span, entry)
        except Exception:  # the agent run must go on even if we cannot record this span
            swallowed(_logger, "openai_agents.span_end", "tallyspan could not end an Agents SDK span")
            if entry.span is not None and entry.span.is_recording():
                entry.span.end()

    def shutdown(self) -> None:
        """Nothing to flush: spans go to the tracer provider's processors as they end."""

    def force_flush(self) -> None:
        """See :meth:`shutdown`."""

    def close(self) -> None:
        """Stop recording and end every span still open (uninstrumented mid-run: the SDK will not call us)."""
        self.enabled = False
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in reversed(entries):  # children (started later) before their parents
            if entry.span is not None and entry.span.is_recording():
                entry.span.end()

    # --- hooks for the instrumentor's wrappers ----------------------------------------------------------

    def context_for(self, span: Any) -> otel_context.Context | None:
        """The OTel context to make current while the SDK makes ``span`` current (None: not ours)."""
        if span is None or not self.enabled:
            return None
        with self._lock:
            entry = self._entries.get(getattr(span, "span_id", None) or "")
        return entry.context if entry is not None else None

    def note_tool_context(self, span: Any, tool_call_id: Any, tool_arguments: Any) -> None:
        """The SDK built the ToolContext of the tool call ``span`` records: keep its call id and arguments."""
        with self._lock:
            entry = self._entries.get(getattr(span, "span_id", None) or "")
        if entry is None or entry.kind != "function" or entry.span is None:
            return
        if isinstance(tool_call_id, str) and tool_call_id:
            entry.span.set_attribute(semconv.GEN_AI_TOOL_CALL_ID, tool_call_id)
        if isinstance(tool_arguments, str):
            entry.tool_arguments = parse_arguments(tool_arguments)

    # --- mapping ----------------------------------------------------------------------------------------

    def context_for_trace(self, trace: Any) -> otel_context.Context | None:
        """The OTel context to make current while the SDK makes ``trace`` current (None: not ours)."""
        if trace is None or not self.enabled:
            return None
        with self._lock:
            entry = self._entries.get(_trace_key(getattr(trace, "trace_id", None) or ""))
        return entry.context if entry is not None else None

    def _parent_context(self, span: Any) -> otel_context.Context:
        """The context of the SDK parent span, else of the SDK trace, else the current one."""
        with self._lock:
            parent = self._entries.get(span.parent_id) if span.parent_id else None
            if parent is None:
                parent = self._entries.get(_trace_key(span.trace_id))
        return parent.context if parent is not None else otel_context.get_current()

    def _remember(self, key: str, entry: _Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > _MAX_OPEN_SPANS:
                self._entries.popitem(last=False)
                count("dropped.openai_agents_open_spans")

    def _start(self, span: Any) -> None:
        data = span.span_data
        kind = data.type
        parent = self._parent_context(span)
        entry = _Entry(kind=kind, context=parent)
        if is_instrumentation_enabled():
            if kind == "agent":
                entry.span = self._start_span(
                    semconv.OPERATION_INVOKE_AGENT, data.name, parent, {semconv.GEN_AI_AGENT_NAME: data.name}
                )
            elif kind == "function":
                entry.span = self._start_span(
                    semconv.OPERATION_EXECUTE_TOOL,
                    data.name,
                    parent,
                    {semconv.GEN_AI_TOOL_NAME: data.name, semconv.GEN_AI_TOOL_TYPE: "function"},
                )
            elif kind in ("generation", "response") and not _model_call_recorded_elsewhere(data):
                entry.call = self._start_model_call(data, parent)
                entry.span = entry.call.span
        if entry.span is not None:
            entry.context = trace_api.set_span_in_context(entry.span, parent)
        self._remember(span.span_id, entry)

    def _start_span(
        self, operation: str, target: str, parent: otel_context.Context, attributes: dict[str, Any]
    ) -> Span:
        return self._tracer.start_span(
            semconv.span_name(operation, target),
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={semconv.GEN_AI_OPERATION_NAME: operation, **attributes},
        )

    def _start_model_call(self, data: Any, parent: otel_context.Context) -> GenAICall:
        model = getattr(data, "model", None) if data.type == "generation" else None
        attributes: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
            semconv.GEN_AI_PROVIDER_NAME: semconv.PROVIDER_OPENAI,
        }
        config = getattr(data, "model_config", None) or {}
        if isinstance(config, dict) and config.get("model_impl"):
            del attributes[semconv.GEN_AI_PROVIDER_NAME]  # LiteLLM and the like: the provider is unknown here
        if isinstance(model, str) and model:
            attributes[semconv.GEN_AI_REQUEST_MODEL] = model
        # start_genai_call parents on the current context (and reads the current stage): make it ours.
        token = otel_context.attach(parent)
        try:
            return start_genai_call(
                self._tracer,
                operation=semconv.OPERATION_CHAT,
                model=model if isinstance(model, str) else None,
                attributes=attributes,
                capture_content=self._capture_content,
            )
        finally:
            otel_context.detach(token)

    def _end(self, span: Any, entry: _Entry) -> None:
        data = span.span_data
        error = span.error
        if entry.kind == "handoff":
            owner = trace_api.get_current_span(entry.context)
            if owner.is_recording():
                owner.add_event(
                    semconv.EVENT_AGENT_HANDOFF,
                    {
                        semconv.HANDOFF_FROM_AGENT: data.from_agent or "",
                        semconv.HANDOFF_TO_AGENT: data.to_agent or "",
                    },
                )
            return
        if entry.call is not None:
            self._end_model_call(data, entry.call, error)
            return
        if entry.span is None:
            return
        if entry.kind == "function":
            self._end_tool(data, entry.span, entry.tool_arguments, error)
            return
        if error is not None:
            entry.span.set_attribute(semconv.ERROR_TYPE, _ERROR_OTHER)
            entry.span.set_status(Status(StatusCode.ERROR, _error_message(error)))
        entry.span.end()

    def _end_tool(self, data: Any, span: Span, arguments: Any, error: Any) -> None:
        attributes = getattr(span, "attributes", None) or {}
        # An MCP call inside the tool may already have marked it failed (isError); keep that.
        failed = error is not None or attributes.get(semconv.TOOL_OUTCOME) == semconv.OUTCOME_FAILED
        if arguments is None and isinstance(data.input, str):
            arguments = parse_arguments(data.input)
        end_tool_span(
            span,
            error_type=(attributes.get(semconv.ERROR_TYPE) or semconv.ERROR_TYPE_TOOL_ERROR)
            if failed
            else None,
            description=_error_message(error) if error is not None else None,
            arguments=arguments,
            result=data.output,
            capture_content=self._capture_content,
        )

    def _end_model_call(self, data: Any, call: GenAICall, error: Any) -> None:
        prompt = last_user_text(data.input)
        if data.type == "response":
            extraction, model = response_extraction(data.response, data.usage, prompt)
            if model:
                call.span.update_name(semconv.span_name(semconv.OPERATION_CHAT, model))
        else:
            extraction = generation_extraction(data.output, data.usage, prompt)
            inputs = chat_input_messages(data.input) if self._capture_content else None
            if inputs is not None:  # the input is known only now (the SDK fills it during the call)
                call.span.set_attribute(semconv.GEN_AI_INPUT_MESSAGES, messages_json(inputs))
        if error is not None:
            call.span.set_attribute(semconv.ERROR_TYPE, _ERROR_OTHER)
            call.span.set_status(Status(StatusCode.ERROR, _error_message(error)))
        call.finish(extraction)
