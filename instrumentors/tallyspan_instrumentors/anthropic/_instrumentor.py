"""The Anthropic instrumentor: ``messages.create`` / ``parse`` / ``stream`` (and ``beta.messages``), sync and async.

``create(stream=True)`` returns the SDK's stream wrapped in a proxy that ends the span once. The
``messages.stream(...)`` manager is wrapped so its span opens on ``__enter__`` (when the request is
made) and the raw event stream inside the ``MessageStream`` is observed by the same proxy, so
``text_stream``, ``get_final_message()`` and ``until_done()`` keep working and still end the span.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Tracer

from tallyspan import semconv
from tallyspan.plugin import resolve_capture_content, swallowed
from tallyspan_instrumentors._common import (
    AsyncStreamProxy,
    GenAICall,
    SyncStreamProxy,
    _start_guarded,
    finalize_if_proxy,
    framework_model_call_active,
    run_async,
    run_sync,
    start_genai_call,
)
from tallyspan_instrumentors._post_import import PatchSet
from tallyspan_instrumentors.anthropic._extract import (
    EventAccumulator,
    extraction_of_message,
    request_attributes,
    request_content,
)

__all__ = ["AnthropicInstrumentor"]

_logger = logging.getLogger(__name__)

_MODULE = "anthropic.resources.messages.messages"
_BETA_MODULE = "anthropic.resources.beta.messages.messages"
_instruments = ("anthropic >= 0.40",)
#: The header ``with_raw_response`` ("raw") and ``with_streaming_response`` ("stream") add to a request.
_RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"

Factory = Callable[[Tracer, bool], Callable[..., Any]]


def _starter(tracer: Tracer, capture: bool, instance: Any, kwargs: dict[str, Any], *, stream: bool) -> Any:
    def start() -> GenAICall:
        prompt, content_attributes = request_content(kwargs, capture=capture)
        model = kwargs.get("model")
        return start_genai_call(
            tracer,
            operation=semconv.OPERATION_CHAT,
            model=model if isinstance(model, str) else None,
            attributes=request_attributes(instance, kwargs, stream=stream),
            capture_content=capture,
            prompt=prompt,
            content_attributes=content_attributes,
        )

    return start


def _finish_sync(call: GenAICall, result: Any) -> Any:
    if _is_stream(result):
        return SyncStreamProxy(result, call, EventAccumulator())
    call.finish(extraction_of_message(call, result) if _is_message(result) else None)
    return result


def _finisher_sync(kwargs: dict[str, Any]) -> Callable[[GenAICall, Any], Any]:
    """``_finish_sync``, reading the body of a ``with_raw_response`` result (not of a streamed one)."""

    def finish(call: GenAICall, result: Any) -> Any:
        if _is_raw_response(result):
            headers = kwargs.get("extra_headers")
            read = isinstance(headers, dict) and headers.get(_RAW_RESPONSE_HEADER) == "raw"
            if read and kwargs.get("stream") is not True:
                parsed = result.parse()  # the SDK caches it: the app's own parse() gets the same object
                call.finish(extraction_of_message(call, parsed) if _is_message(parsed) else None)
            else:
                # with_streaming_response or a raw stream: the body is the app's to read, we must not.
                call.finish(None)
            return result
        return _finish_sync(call, result)

    return finish


def _is_raw_response(result: Any) -> bool:
    return type(result).__name__ == "APIResponse" and callable(getattr(result, "parse", None))


def _finish_async(call: GenAICall, result: Any) -> Any:
    if _is_stream(result):
        return AsyncStreamProxy(result, call, EventAccumulator())
    call.finish(extraction_of_message(call, result) if _is_message(result) else None)
    return result


def _is_stream(result: Any) -> bool:
    # The SDK's Stream / AsyncStream; a raw-response wrapper (with_raw_response) is neither.
    return type(result).__name__ in ("Stream", "AsyncStream") and hasattr(result, "response")


def _is_message(result: Any) -> bool:
    return getattr(result, "type", None) == "message" and hasattr(result, "content")


def _create(tracer: Tracer, capture: bool) -> Callable[..., Any]:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        stream = kwargs.get("stream") is True
        start = _starter(tracer, capture, instance, kwargs, stream=stream)
        return run_sync(wrapped, args, kwargs, start, _finisher_sync(kwargs))

    return wrapper


def _create_async(tracer: Tracer, capture: bool) -> Callable[..., Any]:
    async def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        stream = kwargs.get("stream") is True
        start = _starter(tracer, capture, instance, kwargs, stream=stream)
        return await run_async(wrapped, args, kwargs, start, _finish_async)

    return wrapper


def _stream(tracer: Tracer, capture: bool) -> Callable[..., Any]:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        manager = wrapped(*args, **kwargs)
        if not is_instrumentation_enabled() or framework_model_call_active():
            return manager
        return _StreamManagerProxy(manager, _starter(tracer, capture, instance, kwargs, stream=True))

    return wrapper


def _stream_async(tracer: Tracer, capture: bool) -> Callable[..., Any]:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        manager = wrapped(*args, **kwargs)
        if not is_instrumentation_enabled() or framework_model_call_active():
            return manager
        return _AsyncStreamManagerProxy(manager, _starter(tracer, capture, instance, kwargs, stream=True))

    return wrapper


def _start_stream_call(start: Callable[[], GenAICall]) -> GenAICall | None:
    """Open the span of a ``messages.stream`` manager, unless suppressed or a framework span stands for it."""
    if not is_instrumentation_enabled() or framework_model_call_active():
        return None
    return _start_guarded(start)


def _observe_raw_stream(message_stream: Any, call: GenAICall, proxy_type: type[Any]) -> Any:
    """Swap the MessageStream's raw event stream for our proxy; returns the proxy (or None)."""
    try:
        proxy = proxy_type(message_stream._raw_stream, call, EventAccumulator())
        message_stream._raw_stream = proxy
        return proxy
    except Exception:  # an SDK whose MessageStream changed shape: end the span, keep the stream
        swallowed(_logger, "anthropic.stream", "tallyspan could not observe an Anthropic MessageStream")
        call.finish(None)
        return None


class _StreamManagerProxy(wrapt.ObjectProxy[Any]):
    """``messages.stream(...)``: the span opens on ``__enter__``, when the request is sent."""

    def __init__(self, manager: Any, start: Callable[[], GenAICall]) -> None:
        super().__init__(manager)
        self._self_start = start
        self._self_proxy: Any = None

    def __enter__(self) -> Any:
        call = _start_stream_call(self._self_start)
        if call is None:
            return self.__wrapped__.__enter__()
        token = otel_context.attach(trace.set_span_in_context(call.span))
        try:
            message_stream = self.__wrapped__.__enter__()
        except BaseException as exc:
            call.fail(exc)
            raise
        finally:
            otel_context.detach(token)
        self._self_proxy = _observe_raw_stream(message_stream, call, SyncStreamProxy)
        return message_stream

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        # Before the SDK's exit: its close() would end the span as if the stream had simply stopped.
        if isinstance(exc, BaseException):
            finalize_if_proxy(self._self_proxy, exc)
        try:
            return self.__wrapped__.__exit__(exc_type, exc, traceback)
        finally:
            # The MessageStream's close() ends the span through the proxy; this covers the odd SDK that doesn't.
            finalize_if_proxy(self._self_proxy)


class _AsyncStreamManagerProxy(wrapt.ObjectProxy[Any]):
    """The async twin of :class:`_StreamManagerProxy`."""

    def __init__(self, manager: Any, start: Callable[[], GenAICall]) -> None:
        super().__init__(manager)
        self._self_start = start
        self._self_proxy: Any = None

    async def __aenter__(self) -> Any:
        call = _start_stream_call(self._self_start)
        if call is None:
            return await self.__wrapped__.__aenter__()
        token = otel_context.attach(trace.set_span_in_context(call.span))
        try:
            message_stream = await self.__wrapped__.__aenter__()
        except BaseException as exc:
            call.fail(exc)
            raise
        finally:
            otel_context.detach(token)
        self._self_proxy = _observe_raw_stream(message_stream, call, AsyncStreamProxy)
        return message_stream

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        if isinstance(exc, BaseException):
            finalize_if_proxy(self._self_proxy, exc)
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, traceback)
        finally:
            finalize_if_proxy(self._self_proxy)


def _native_span(tracer: Tracer, capture: bool) -> Callable[..., Any]:
    """Recent SDKs trace their own calls: inside a model span of ours, theirs would count the call twice."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if _model_span_stands_for_the_call():
            return None  # the SDK then sends the request without a span of its own
        return wrapped(*args, **kwargs)

    return wrapper


def _model_span_stands_for_the_call() -> bool:
    if framework_model_call_active():
        return True
    try:
        span: Any = trace.get_current_span()
        scope = getattr(span, "instrumentation_scope", None)
        attributes = getattr(span, "attributes", None) or {}
        return (
            span.is_recording()
            and getattr(scope, "name", None) == semconv.INSTRUMENTATION_SCOPE
            and attributes.get(semconv.GEN_AI_OPERATION_NAME) in semconv.MODEL_OPERATIONS
        )
    except Exception:  # unsure: let the SDK trace its call as it would without us
        swallowed(_logger, "anthropic.native_span", "tallyspan could not inspect the current span")
        return False


#: (module, "Class.method", wrapper factory): read by both _instrument and _uninstrument.
_WRAPPED: tuple[tuple[str, str, Factory], ...] = (
    (_MODULE, "Messages.create", _create),
    (_MODULE, "Messages.parse", _create),
    (_MODULE, "Messages.stream", _stream),
    (_MODULE, "AsyncMessages.create", _create_async),
    (_MODULE, "AsyncMessages.parse", _create_async),
    (_MODULE, "AsyncMessages.stream", _stream_async),
    # The beta surface (client.beta.messages) has the same methods, objects and stream events.
    (_BETA_MODULE, "Messages.create", _create),
    (_BETA_MODULE, "Messages.parse", _create),
    (_BETA_MODULE, "Messages.stream", _stream),
    (_BETA_MODULE, "AsyncMessages.create", _create_async),
    (_BETA_MODULE, "AsyncMessages.parse", _create_async),
    (_BETA_MODULE, "AsyncMessages.stream", _stream_async),
)

#: Wrapped only where the installed SDK has it (its own tracing arrived in 2.x).
_OPTIONAL: tuple[tuple[str, str, Factory], ...] = (
    ("anthropic._base_client", "start_api_call_span", _native_span),
)


class AnthropicInstrumentor(BaseInstrumentor):
    """Traces Anthropic Messages calls as GenAI ``chat {model}`` spans.

    Keyword arguments of :meth:`instrument`: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (default: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    The SDK's own call span (``anthropic.messages.create``) is not made inside ours, so each call
    appears once; the SDK's other spans are left alone.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """The package versions this instrumentor supports."""
        return _instruments

    # A class attribute, not set in __init__: BaseInstrumentor is a singleton whose __init__ runs on
    # every construction, which would forget the patches of the running instrumentation.
    _patches: PatchSet | None = None

    def _instrument(self, **kwargs: Any) -> None:
        from tallyspan.plugin import __version__

        tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, __version__, tracer_provider=kwargs.get("tracer_provider")
        )
        capture = resolve_capture_content(kwargs.get("capture_content"))
        # Patched when the app imports anthropic (at once if it has): importing it here costs seconds.
        patches = PatchSet()
        for module, name, factory in (*_WRAPPED, *_OPTIONAL):
            patches.add(module, name, factory(tracer, capture))
        self._patches = patches

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._patches is not None:
            self._patches.undo()
            self._patches = None
