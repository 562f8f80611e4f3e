"""Spans around wrapped calls: model calls (:class:`GenAICall`), tool calls (:class:`ToolCall`), one shape.

Every wrapper follows one shape (:func:`run_sync` / :func:`run_async`): start the call's span (guarded),
run the wrapped call alone in its ``try`` so its result and exceptions pass through untouched, then hand
the result to a ``finish`` callback that runs in its own guard. :func:`model_call_wrapper` and
:func:`tool_call_wrapper` make the wrapt wrapper of a table entry from a ``start`` and a ``finish``.

One span per model call, whoever else instruments it: a framework instrumentor of ours marks the context
(:func:`framework_model_call_context`), and another instrumentation's span for the same call, current
when our wrapper runs, is *joined* (:func:`start_genai_call`): we add the stage and what it lacks, hand
the output to the checks under its span id, and leave its end, status and content policy to its owner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from tallyspan import current_stage, semconv
from tallyspan.plugin import ModelContent, content_buffer, swallowed
from tallyspan.plugin.instrumentors import end_tool_span
from tallyspan_instrumentors._base import Wrapper, WrapperState
from tallyspan_instrumentors._parts import messages_json

__all__ = [
    "Extraction",
    "GenAICall",
    "SpanCall",
    "ToolCall",
    "error_type",
    "framework_model_call_active",
    "framework_model_call_context",
    "model_call_wrapper",
    "run_async",
    "run_sync",
    "start_genai_call",
    "tool_call_wrapper",
]

_logger = logging.getLogger(__name__)


def error_type(exc: BaseException) -> str:
    """The ``error.type`` of a failure: the HTTP status code when the provider answered one, else the
    exception's qualified class name (the GenAI conventions allow both; ``500`` is their example)."""
    status = getattr(exc, "status_code", None)
    # Below 400 the status is the stream's (an error event inside a 200 SSE body), not the error's.
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        return str(status)
    return type(exc).__qualname__


class SpanCall(Protocol):
    """A started span that :func:`run_sync` / :func:`run_async` end exactly once."""

    @property
    def span(self) -> Span:
        """The span, current while the wrapped call runs."""

    def fail(self, exc: BaseException) -> None:
        """End the span as failed by ``exc`` (the wrapped call raised it); never raises."""

    def finish_unread(self) -> None:
        """End the span without what the result says (reading it failed); never raises."""


C = TypeVar("C", bound=SpanCall)


# --- model calls ---------------------------------------------------------------------------------------


@dataclass
class Extraction:
    """What a provider module read from a response: span attributes, content for the checks, messages."""

    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    content: ModelContent | None = None
    output_messages: list[dict[str, Any]] | None = None
    """The GenAI output messages, exported only when content capture is on."""


class GenAICall:
    """One model call's span, from start to its single end.

    A *joined* call records into another instrumentation's span (see :func:`start_genai_call`): it only
    adds what that span lacks and hands the output to the checks; the span's owner ends it.
    """

    __slots__ = ("capture_content", "ended", "joined", "prompt", "span", "started_at")

    def __init__(
        self, span: Span, *, capture_content: bool, prompt: str | None, joined: bool = False
    ) -> None:
        self.span = span
        self.capture_content = capture_content
        self.prompt = prompt
        self.joined = joined
        self.started_at = time.monotonic()
        self.ended = False

    def fail(self, exc: BaseException, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        """Mark the span failed with ``error.type`` and status ERROR, then end it (never raises)."""
        if self.ended:
            return
        self.ended = True
        if self.joined:  # the owner's wrapper sees the same exception and records it on its own span
            return
        try:
            if attributes:
                self.span.set_attributes(attributes)
            kind = error_type(exc)
            self.span.set_attribute(semconv.ERROR_TYPE, kind)
            # The type only: exception messages may quote request content or a masked key.
            self.span.set_status(Status(StatusCode.ERROR, kind))
        except Exception:  # our bookkeeping must not replace the app's own exception
            swallowed(_logger, "span.fail", "tallyspan could not record a failed model call")
        finally:
            self._end()

    def finish(self, extraction: Extraction | None) -> None:
        """Set the response attributes, hand content to the ContentBuffer, end the span (never raises)."""
        if self.ended:
            return
        self.ended = True
        if self.joined and not self.span.is_recording():
            return  # its owner ended it first (a stream closed on their side): too late to add anything
        try:
            if extraction is not None:
                attributes = dict(extraction.attributes)
                if self.capture_content and extraction.output_messages is not None:
                    attributes[semconv.GEN_AI_OUTPUT_MESSAGES] = messages_json(extraction.output_messages)
                if self.joined:
                    _set_missing(self.span, attributes)
                else:
                    self.span.set_attributes(attributes)
                # A span the sampler dropped never reaches a processor: its content would stay buffered.
                if extraction.content is not None and self.span.is_recording():
                    buffer = content_buffer()
                    if buffer.active:
                        buffer.put(self.span.get_span_context().span_id, extraction.content)
        except Exception:  # a bad response must not break the app; the span still ends
            swallowed(_logger, "span.finish", "tallyspan could not record a model response")
        finally:
            self._end()

    def finish_unread(self) -> None:
        """End the span with the request's attributes only."""
        self.finish(None)

    def _end(self) -> None:
        if self.joined:
            return
        try:
            self.span.end()
        except Exception:  # a span processor that raises in on_end must not reach the app's call or stream
            swallowed(_logger, "span.end", "a span processor failed while a model-call span ended")


def start_genai_call(
    tracer: Tracer,
    *,
    operation: str,
    model: str | None,
    attributes: Mapping[str, AttributeValue],
    capture_content: bool,
    prompt: str | None = None,
    content_attributes: Mapping[str, str] | None = None,
) -> GenAICall:
    """Start a CLIENT span ``{operation} {model}`` carrying the current ``tallyspan.stage``.

    When the current span is another instrumentation's span of the same operation (its wrapper runs just
    outside ours: OpenTelemetry's openai-v2, OpenLLMetry), that span stands for this call: no second span
    is opened; the returned call is *joined* to it and adds only the attributes it lacks.

    With content capture off the span gets an empty ``output.value``: Arize Phoenix fills a missing one
    in from ``gen_ai.response.id`` and ``.model``, which its Output panel then shows as if it were the
    model's answer.

    Args:
        tracer: the instrumentor's tracer.
        operation: a ``gen_ai.operation.name`` value.
        model: the requested model, for the span name.
        attributes: request attributes (``gen_ai.*``, ``server.*``).
        capture_content: whether ``content_attributes`` are exported.
        prompt: the last user message, handed to the checks with the output.
        content_attributes: ``gen_ai.input.messages`` and the like, set only when capturing.

    Returns:
        The started call; end it with :meth:`GenAICall.finish` or :meth:`GenAICall.fail`.
    """
    span_attributes = dict(attributes)
    stage = current_stage()
    if stage is not None:
        span_attributes[semconv.STAGE] = stage.name
        if stage.enqueued_at is not None:
            span_attributes[semconv.ENQUEUED_AT] = stage.enqueued_at
    if capture_content and content_attributes:
        span_attributes.update(content_attributes)
    if not capture_content:
        span_attributes[semconv.OPENINFERENCE_OUTPUT_VALUE] = ""
    foreign = _foreign_model_span(operation)
    if foreign is not None:
        _set_missing(foreign, span_attributes)
        return GenAICall(foreign, capture_content=capture_content, prompt=prompt, joined=True)
    span = tracer.start_span(
        semconv.span_name(operation, model), kind=SpanKind.CLIENT, attributes=span_attributes
    )
    return GenAICall(span, capture_content=capture_content, prompt=prompt)


def _foreign_model_span(operation: str) -> Span | None:
    """The current span if another instrumentation opened it for this very call, else None.

    Its wrapper sits just outside ours (``_post_import`` puts ours beneath), so a recording span of the
    same operation from another instrumentation scope, current now, is this call's: it says so by its
    ``gen_ai.operation.name``, or, before it has attributes (OpenTelemetry's util-genai sets them all at
    the end), by a CLIENT span named by the GenAI conventions, ``{operation} {model}``.
    """
    span = trace.get_current_span()
    if not span.is_recording():
        return None
    scope = getattr(span, "instrumentation_scope", None)
    attributes = getattr(span, "attributes", None)
    if scope is None or scope.name == semconv.INSTRUMENTATION_SCOPE or not isinstance(attributes, Mapping):
        return None
    declared = attributes.get(semconv.GEN_AI_OPERATION_NAME)
    if declared is not None:
        return span if declared == operation else None
    name = getattr(span, "name", None)
    named = isinstance(name, str) and (name == operation or name.startswith(f"{operation} "))
    return span if named and getattr(span, "kind", None) is SpanKind.CLIENT else None


def _set_missing(span: Span, attributes: Mapping[str, AttributeValue]) -> None:
    """Set on another instrumentation's span the attributes it does not have; never overwrite its own."""
    present = getattr(span, "attributes", None) or {}
    missing = {key: value for key, value in attributes.items() if key not in present}
    if missing:
        span.set_attributes(missing)


# --- one span per model call: a framework's span stands for the provider call it wraps -----------------

_FRAMEWORK_MODEL_CALL_KEY = otel_context.create_key("tallyspan-framework-model-call")


def framework_model_call_context(
    marker: object = True, context: otel_context.Context | None = None
) -> otel_context.Context:
    """A context in which provider wrappers (:func:`model_call_wrapper`) open no span of their own.

    A framework instrumentor (LangChain) attaches it around the provider client call its own ``chat`` span
    already records, so the call appears once. ``marker`` is truthy while that span stands; it may be an
    object whose ``__bool__`` answers when the provider call starts.
    """
    return otel_context.set_value(_FRAMEWORK_MODEL_CALL_KEY, marker, context)


def framework_model_call_active() -> bool:
    """True inside a model call a framework instrumentor already records as a span."""
    return bool(otel_context.get_value(_FRAMEWORK_MODEL_CALL_KEY))


# --- tool calls -----------------------------------------------------------------------------------------


class ToolCall:
    """One tool execution's span, from start to its single end (by the core's ``end_tool_span``)."""

    __slots__ = ("arguments", "capture_content", "ended", "span")

    def __init__(self, span: Span, *, arguments: Any, capture_content: bool) -> None:
        self.span = span
        self.arguments = arguments
        self.capture_content = capture_content
        self.ended = False

    def error_type_of(self, exc: BaseException) -> str:
        """``error.type`` of an exception the call raised (a subclass may know better than the class)."""
        return error_type(exc)

    def fail(self, exc: BaseException) -> None:
        """End the span as failed by the exception the call raised."""
        self.finish(error_type=self.error_type_of(exc))

    def finish(self, result: Any = None, *, error_type: str | None = None) -> None:
        """End the span with the tool's result; ``error_type`` when the result says the tool failed."""
        if self.ended:
            return
        self.ended = True
        end_tool_span(
            self.span,
            capture_content=self.capture_content,
            error_type=error_type,
            arguments=self.arguments,
            result=result,
        )

    def finish_unread(self) -> None:
        """End the span as succeeded, without a result."""
        self.finish()


# --- the wrapper shape ----------------------------------------------------------------------------------

#: The second key OpenTelemetry's ``suppress_instrumentation()`` sets and ``is_instrumentation_enabled()``
#: reads (``_SUPPRESS_INSTRUMENTATION_KEY_PLAIN`` of ``opentelemetry.instrumentation.utils``).
_SUPPRESS_PLAIN_KEY = "suppress_instrumentation"


def is_instrumentation_enabled() -> bool:
    """OpenTelemetry's ``is_instrumentation_enabled()``, read from the same two context keys without
    importing its utils module, whose propagators (read from the environment) cost about 3 ms at start."""
    return not (
        otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY)
        or otel_context.get_value(_SUPPRESS_PLAIN_KEY)
    )


def _started(start: Callable[[], C | None]) -> C | None:
    """The call ``start`` opens, unless instrumentation is suppressed; None means the call runs untraced."""
    if not is_instrumentation_enabled():
        return None
    try:
        return start()
    except Exception:  # never let a request we cannot read stop the app's call; it runs untraced
        swallowed(_logger, "span.start", "tallyspan could not start a span")
        return None


class _Current:
    """The call's span is current inside the block; an exception leaving it fails the call, untouched."""

    __slots__ = ("call", "token")

    def __init__(self, call: SpanCall) -> None:
        self.call = call
        self.token = otel_context.attach(trace.set_span_in_context(call.span))

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        try:
            if exc is not None:
                self.call.fail(exc)
        finally:
            otel_context.detach(self.token)


def _finish_guarded(call: C, finish: Callable[[C, Any], Any], result: Any) -> Any:
    try:
        return finish(call, result)
    except Exception:  # the app gets its result whatever our extraction thinks of it
        swallowed(_logger, "span.extract", "tallyspan could not read a call's result")
        call.finish_unread()
        return result


def run_sync(
    wrapped: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    start: Callable[[], C | None],
    finish: Callable[[C, Any], Any],
) -> Any:
    """Run a sync wrapped call inside the span ``start`` opens (None: untraced).

    Only the wrapped call sits inside the span's block: its result and exceptions pass through untouched.
    ``finish`` ends the span from the result, in its own guard, and returns what the app gets (the result
    or a stream proxy). ``start`` may add to ``kwargs`` (the wrapper's own dict) what the call must carry
    (MCP's trace context); the wrapped call is made with them.
    """
    call = _started(start)
    if call is None:
        return wrapped(*args, **kwargs)
    with _Current(call):
        result = wrapped(*args, **kwargs)
    return _finish_guarded(call, finish, result)


async def run_async(
    wrapped: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    start: Callable[[], C | None],
    finish: Callable[[C, Any], Any],
) -> Any:
    """The async twin of :func:`run_sync`."""
    call = _started(start)
    if call is None:
        return await wrapped(*args, **kwargs)
    with _Current(call):
        result = await wrapped(*args, **kwargs)
    return _finish_guarded(call, finish, result)


Start = Callable[[WrapperState, Any, tuple[Any, ...], dict[str, Any]], C | None]
"""Reads a call's request and starts its span: ``(state, instance, args, kwargs) -> call`` (None: untraced)."""
Finish = Callable[[C, Any, dict[str, Any]], Any]
"""Ends the span from the result: ``(call, result, kwargs) -> what the app gets`` (the result or a proxy)."""


def model_call_wrapper(
    start: Start[C], finish: Finish[C], *, is_async: bool = False
) -> Callable[[WrapperState], Wrapper]:
    """The wrapper factory of a method that makes one model call: a span a call, in the shape of
    :func:`run_sync`, and none inside a framework's model-call span (which already stands for the call)."""
    return _call_wrapper(start, finish, is_async=is_async, model_call=True)


def tool_call_wrapper(
    start: Start[C], finish: Finish[C], *, is_async: bool = False
) -> Callable[[WrapperState], Wrapper]:
    """The wrapper factory of a method that executes one tool: a span a call, in the shape of :func:`run_sync`."""
    return _call_wrapper(start, finish, is_async=is_async, model_call=False)


def _call_wrapper(
    start: Start[C], finish: Finish[C], *, is_async: bool, model_call: bool
) -> Callable[[WrapperState], Wrapper]:
    def bind(
        state: WrapperState, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Callable[[], C | None], Callable[[C, Any], Any]]:
        def begin() -> C | None:
            if not state.enabled or (model_call and framework_model_call_active()):
                return None
            return start(state, instance, args, kwargs)

        def end(call: C, result: Any) -> Any:
            return finish(call, result, kwargs)

        return begin, end

    def factory(state: WrapperState) -> Wrapper:
        if is_async:

            async def async_wrapper(
                wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> Any:
                return await run_async(wrapped, args, kwargs, *bind(state, instance, args, kwargs))

            return async_wrapper

        def wrapper(
            wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            return run_sync(wrapped, args, kwargs, *bind(state, instance, args, kwargs))

        return wrapper

    return factory
