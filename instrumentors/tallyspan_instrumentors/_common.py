"""Helpers every tallyspan instrumentor shares: GenAI spans, errors, content, stream proxies.

An instrumentor's wrapper follows one shape (see ``run_sync`` / ``run_async``): start a
:class:`GenAICall` (guarded), run the wrapped call alone in its ``try`` so its result and exceptions pass
through untouched, then hand the result to a ``finish`` callback that runs in its own guard. Streams are
wrapped in :class:`SyncStreamProxy` / :class:`AsyncStreamProxy`, which end the span exactly once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from tallyspan import current_stage, semconv
from tallyspan.plugin import ModelContent, content_buffer, swallowed

__all__ = [
    "AsyncGeneratorProxy",
    "AsyncStreamProxy",
    "Extraction",
    "GenAICall",
    "StreamAccumulator",
    "SyncGeneratorProxy",
    "SyncStreamProxy",
    "error_type",
    "finalize_if_proxy",
    "framework_model_call_active",
    "framework_model_call_context",
    "messages_json",
    "output_message",
    "parse_arguments",
    "run_async",
    "run_sync",
    "server_attributes",
    "start_genai_call",
    "str_or_none",
    "text_part",
    "tool_call_part",
    "tool_call_response_part",
]

_logger = logging.getLogger(__name__)

#: OpenAI-style finish reasons mapped to the GenAI conventions' output-message finish_reason values.
_FINISH_REASON_TO_GENAI = {"tool_calls": "tool_call", "function_call": "tool_call", "max_tokens": "length"}


# --- span start and end ------------------------------------------------------------------------------


@dataclass
class Extraction:
    """What a provider module read from a response: span attributes, content for the checks, messages."""

    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    content: ModelContent | None = None
    output_messages: list[dict[str, Any]] | None = None
    """The GenAI output messages, exported only when content capture is on."""


class GenAICall:
    """One model call's span, from start to its single end."""

    __slots__ = ("capture_content", "ended", "prompt", "span", "started_at")

    def __init__(self, span: Span, *, capture_content: bool, prompt: str | None) -> None:
        self.span = span
        self.capture_content = capture_content
        self.prompt = prompt
        self.started_at = time.monotonic()
        self.ended = False

    def fail(self, exc: BaseException, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        """Mark the span failed with ``error.type`` and status ERROR, then end it (never raises)."""
        if self.ended:
            return
        self.ended = True
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
        try:
            if extraction is not None:
                self.span.set_attributes(extraction.attributes)
                if self.capture_content and extraction.output_messages is not None:
                    self.span.set_attribute(
                        semconv.GEN_AI_OUTPUT_MESSAGES, messages_json(extraction.output_messages)
                    )
                # A span the sampler dropped never reaches a processor: its content would stay buffered.
                if extraction.content is not None and self.span.is_recording():
                    buffer = content_buffer()
                    if buffer.active:
                        buffer.put(self.span.get_span_context().span_id, extraction.content)
        except Exception:  # a bad response must not break the app; the span still ends
            swallowed(_logger, "span.finish", "tallyspan could not record a model response")
        finally:
            self._end()

    def _end(self) -> None:
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
    span = tracer.start_span(
        semconv.span_name(operation, model), kind=SpanKind.CLIENT, attributes=span_attributes
    )
    return GenAICall(span, capture_content=capture_content, prompt=prompt)


def error_type(exc: BaseException) -> str:
    """The ``error.type`` of a failure: the HTTP status code when the provider answered one, else the
    exception's qualified class name (the GenAI conventions allow both; ``500`` is their example)."""
    status = getattr(exc, "status_code", None)
    # Below 400 the status is the stream's (an error event inside a 200 SSE body), not the error's.
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        return str(status)
    return type(exc).__qualname__


# --- one span per model call: a framework's span stands for the provider call it wraps -----------------

_FRAMEWORK_MODEL_CALL_KEY = otel_context.create_key("tallyspan-framework-model-call")


def framework_model_call_context(
    marker: object = True, context: otel_context.Context | None = None
) -> otel_context.Context:
    """A context in which provider wrappers (``run_sync`` / ``run_async``) open no span of their own.

    A framework instrumentor (LangChain) attaches it around the provider client call its own ``chat`` span
    already records, so the call appears once. ``marker`` is truthy while that span stands; it may be an
    object whose ``__bool__`` answers when the provider call starts.
    """
    return otel_context.set_value(_FRAMEWORK_MODEL_CALL_KEY, marker, context)


def framework_model_call_active() -> bool:
    """True inside a model call a framework instrumentor already records as a span."""
    return bool(otel_context.get_value(_FRAMEWORK_MODEL_CALL_KEY))


# --- the wrapper shape ----------------------------------------------------------------------------------

Starter = Callable[[], "GenAICall | None"]
Finisher = Callable[[GenAICall, Any], Any]


def _start_guarded(start: Starter) -> GenAICall | None:
    try:
        return start()
    except Exception:  # never let a request we cannot read stop the app's call; it runs untraced
        swallowed(_logger, "span.start", "tallyspan could not start a model-call span")
        return None


def _finish_guarded(call: GenAICall, finish: Finisher, result: Any) -> Any:
    try:
        return finish(call, result)
    except Exception:  # the app gets its result whatever our extraction thinks of it
        swallowed(_logger, "span.extract", "tallyspan could not read a model response")
        call.finish(None)
        return result


def run_sync(
    wrapped: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    start: Starter,
    finish: Finisher,
) -> Any:
    """Run a sync wrapped call inside a model span; ``finish`` returns the result (or a stream proxy)."""
    if not is_instrumentation_enabled() or framework_model_call_active():
        return wrapped(*args, **kwargs)
    call = _start_guarded(start)
    if call is None:
        return wrapped(*args, **kwargs)
    token = otel_context.attach(trace.set_span_in_context(call.span))
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        call.fail(exc)
        raise
    finally:
        otel_context.detach(token)
    return _finish_guarded(call, finish, result)


async def run_async(
    wrapped: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    start: Starter,
    finish: Finisher,
) -> Any:
    """The async twin of :func:`run_sync`."""
    if not is_instrumentation_enabled() or framework_model_call_active():
        return await wrapped(*args, **kwargs)
    call = _start_guarded(start)
    if call is None:
        return await wrapped(*args, **kwargs)
    token = otel_context.attach(trace.set_span_in_context(call.span))
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        call.fail(exc)
        raise
    finally:
        otel_context.detach(token)
    return _finish_guarded(call, finish, result)


# --- streams --------------------------------------------------------------------------------------------


class StreamAccumulator(Protocol):
    """Collects a stream's items; a provider module implements one per stream kind."""

    def add(self, item: Any) -> None:
        """Take one chunk or event."""

    def extraction(self, call: GenAICall) -> Extraction:
        """What the items so far say, for the span (also called for streams cut short)."""


class _StreamProxyMixin:
    """The finalize-once logic shared by the sync and async proxies."""

    _self_call: GenAICall
    _self_accumulator: StreamAccumulator | None
    _self_finalized: bool
    _self_first_item_at: float | None

    def _tallyspan_observe(self, item: Any) -> None:
        accumulator = self._self_accumulator
        if accumulator is None:  # the span has ended: later items are the app's alone
            return
        try:
            if self._self_first_item_at is None:
                self._self_first_item_at = time.monotonic()
            accumulator.add(item)
        except Exception:  # a chunk we cannot read still reaches the app
            swallowed(_logger, "stream.chunk", "tallyspan could not read a stream chunk")

    def _tallyspan_finalize(self, error: BaseException | None = None) -> None:
        if self._self_finalized:
            return
        self._self_finalized = True
        call = self._self_call
        accumulator, self._self_accumulator = self._self_accumulator, None
        # Dropped here, not with the proxy: an app keeping its stream object must not keep every chunk.
        try:
            extraction = accumulator.extraction(call) if accumulator is not None else None
            if extraction is not None and self._self_first_item_at is not None:
                extraction.attributes[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = (
                    self._self_first_item_at - call.started_at
                )
        except Exception:  # a stream we cannot summarise still ends its span
            swallowed(_logger, "stream.finish", "tallyspan could not summarise a stream")
            extraction = None
        if error is not None:
            call.fail(error, extraction.attributes if extraction is not None else None)
        else:
            call.finish(extraction)

    def __del__(self) -> None:
        # Abandoned streams (dropped unread) are finalized when collected, so no span is left open.
        try:
            if not getattr(self, "_self_finalized", True):
                self._tallyspan_finalize()
        except Exception:  # nothing may escape __del__; a half-built proxy has nothing to end
            swallowed(_logger, "stream.collect", "tallyspan could not end an abandoned stream's span")


def _exit_error(exc: Any) -> BaseException | None:
    """The exception that ends a ``with`` block early: the stream was cut short, the call failed."""
    return exc if isinstance(exc, BaseException) else None


class _SyncIterationProxy(_StreamProxyMixin, wrapt.ObjectProxy[Any]):
    """Iteration through the proxy: each item is observed, the end of the items ends the span."""

    def __init__(self, stream: Any, call: GenAICall, accumulator: StreamAccumulator) -> None:
        super().__init__(stream)
        self._self_call = call
        self._self_accumulator = accumulator
        self._self_finalized = False
        self._self_first_item_at = None

    def __iter__(self) -> _SyncIterationProxy:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self.__wrapped__)
        except StopIteration:
            self._tallyspan_finalize()
            raise
        except BaseException as exc:
            self._tallyspan_finalize(exc)
            raise
        self._tallyspan_observe(item)
        return item


class SyncStreamProxy(_SyncIterationProxy):
    """Wraps an SDK stream: the app sees the same object, the span ends exactly once."""

    def __enter__(self) -> SyncStreamProxy:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(exc_type, exc, traceback)
        finally:
            self._tallyspan_finalize(_exit_error(exc))

    def close(self) -> None:
        """Close the underlying stream and end the span."""
        try:
            self.__wrapped__.close()
        finally:
            self._tallyspan_finalize()


class SyncGeneratorProxy(_SyncIterationProxy):
    """Wraps a generator of items (ollama's streams): ``close()`` ends the span too.

    A generator is no context manager: ``with`` fails with the TypeError it gives the bare generator
    (wrapt's proxy would forward ``__enter__`` and fail with AttributeError instead).
    """

    def __enter__(self) -> Any:
        raise TypeError(
            f"'{type(self.__wrapped__).__name__}' object does not support the context manager protocol"
        )

    def close(self) -> None:
        """Close the generator and end the span."""
        try:
            self.__wrapped__.close()
        finally:
            self._tallyspan_finalize()


class _AsyncIterationProxy(_StreamProxyMixin, wrapt.ObjectProxy[Any]):
    """The async twin of :class:`_SyncIterationProxy`."""

    def __init__(self, stream: Any, call: GenAICall, accumulator: StreamAccumulator) -> None:
        super().__init__(stream)
        self._self_call = call
        self._self_accumulator = accumulator
        self._self_finalized = False
        self._self_first_item_at = None

    def __aiter__(self) -> _AsyncIterationProxy:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._tallyspan_finalize()
            raise
        except BaseException as exc:
            self._tallyspan_finalize(exc)
            raise
        self._tallyspan_observe(item)
        return item


class AsyncStreamProxy(_AsyncIterationProxy):
    """The async twin of :class:`SyncStreamProxy`."""

    async def __aenter__(self) -> AsyncStreamProxy:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, traceback)
        finally:
            self._tallyspan_finalize(_exit_error(exc))

    async def close(self) -> None:
        """Close the underlying stream and end the span."""
        try:
            await self.__wrapped__.close()
        finally:
            self._tallyspan_finalize()


class AsyncGeneratorProxy(_AsyncIterationProxy):
    """Wraps an async generator of items: ``aclose()`` ends the span too; like it, no context manager."""

    async def __aenter__(self) -> Any:
        raise TypeError(
            f"'{type(self.__wrapped__).__name__}' object does not support the asynchronous context manager protocol"
        )

    async def aclose(self) -> None:
        """Close the generator and end the span."""
        try:
            await self.__wrapped__.aclose()
        finally:
            self._tallyspan_finalize()


def finalize_if_proxy(stream: Any, error: BaseException | None = None) -> None:
    """End the span of ``stream`` if it is one of our proxies (SDK helpers close streams behind them).

    With ``error`` (an exception that left a ``with`` block early), the span is marked failed by it.
    """
    if isinstance(stream, _StreamProxyMixin):
        stream._tallyspan_finalize(error)


# --- content in the GenAI conventions' message format ------------------------------------------------------


def str_or_none(value: Any) -> str | None:
    """``value`` if it is a string, else None: SDKs do not validate bodies, any field may hold any type."""
    return value if isinstance(value, str) else None


def text_part(text: str) -> dict[str, Any]:
    """A ``text`` message part."""
    return {"type": "text", "content": text}


def parse_arguments(arguments: str) -> Any:
    """Tool-call arguments as an object when they are JSON, else the raw text."""
    try:
        return json.loads(arguments)
    except (TypeError, ValueError):
        return arguments


def tool_call_part(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    """A ``tool_call`` message part (a tool call the model requested)."""
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": parse_arguments(arguments)}


def tool_call_response_part(call_id: str | None, response: Any) -> dict[str, Any]:
    """A ``tool_call_response`` message part (a tool result sent back to the model)."""
    return {"type": "tool_call_response", "id": call_id, "response": response}


def output_message(parts: list[dict[str, Any]], finish_reason: str | None) -> dict[str, Any]:
    """An assistant output message; provider finish reasons are mapped to the conventions' values."""
    message: dict[str, Any] = {"role": "assistant", "parts": parts}
    if finish_reason:  # unknown for a stream cut short
        message["finish_reason"] = _FINISH_REASON_TO_GENAI.get(finish_reason, finish_reason)
    return message


def messages_json(messages: Iterable[Mapping[str, Any]] | list[Any]) -> str:
    """Serialise messages or parts for a span attribute (non-JSON values as their ``str``)."""
    return json.dumps(list(messages), ensure_ascii=False, default=str)


_DEFAULT_PORTS = {"https": 443, "http": 80}


def server_attributes(resource: Any) -> dict[str, AttributeValue]:
    """``server.address`` / ``server.port`` from ``resource._client.base_url`` (an httpx URL).

    The SDK resources of openai and anthropic, and ollama's clients, all keep their HTTP client there.
    """
    url = getattr(getattr(resource, "_client", None), "base_url", None)
    host = getattr(url, "host", None)
    if not isinstance(host, str) or not host:
        return {}
    attributes: dict[str, AttributeValue] = {semconv.SERVER_ADDRESS: host}
    port = getattr(url, "port", None)
    if not isinstance(port, int):
        port = _DEFAULT_PORTS.get(str(getattr(url, "scheme", "")))
    if isinstance(port, int):
        attributes[semconv.SERVER_PORT] = port
    return attributes
