"""The Anthropic wrappers: ``messages.create`` / ``parse`` / ``stream`` (and ``beta.messages``), sync and async.

``create(stream=True)`` returns the SDK's stream wrapped in a proxy that ends the span once. The
``messages.stream(...)`` manager is wrapped so its span opens on ``__enter__`` (when the request is
made) and the raw event stream inside the ``MessageStream`` is observed by the same proxy, so
``text_stream``, ``get_final_message()`` and ``until_done()`` keep working and still end the span.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import trace

from tallyspan import semconv
from tallyspan.plugin import swallowed
from tallyspan_instrumentors._base import Wrapper, WrapperState
from tallyspan_instrumentors._calls import (
    GenAICall,
    framework_model_call_active,
    is_instrumentation_enabled,
    model_call_wrapper,
    run_async,
    run_sync,
    start_genai_call,
)
from tallyspan_instrumentors._streams import AsyncStreamProxy, SyncStreamProxy, finalize_if_proxy
from tallyspan_instrumentors._wrapt import ObjectProxy
from tallyspan_instrumentors.anthropic._extract import (
    EventAccumulator,
    extraction_of_message,
    request_attributes,
    request_content,
)

__all__ = ["create", "create_async", "native_span", "stream", "stream_async"]

_logger = logging.getLogger(__name__)

#: The header ``with_raw_response`` ("raw") and ``with_streaming_response`` ("stream") add to a request.
_RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"
#: Its value for ``with_raw_response``: "true" where that returns a ``LegacyAPIResponse``, "raw" since 1.x.
_RAW_READ: Final = frozenset({"raw", "true"})


def _start(
    state: WrapperState, instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, stream: bool
) -> GenAICall:
    prompt, content_attributes = request_content(kwargs, capture=state.capture_content)
    model = kwargs.get("model")
    return start_genai_call(
        state.tracer,
        operation=semconv.OPERATION_CHAT,
        model=model if isinstance(model, str) else None,
        attributes=request_attributes(instance, kwargs, stream=stream),
        capture_content=state.capture_content,
        prompt=prompt,
        content_attributes=content_attributes,
    )


def _start_create(
    state: WrapperState, instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> GenAICall:
    return _start(state, instance, args, kwargs, stream=kwargs.get("stream") is True)


def _finish_sync(call: GenAICall, result: Any, kwargs: Mapping[str, Any]) -> Any:
    """The stream proxy, or the message read; the body of a ``with_raw_response`` result too (not streamed)."""
    if _is_raw_response(result):
        headers = kwargs.get("extra_headers")
        read = isinstance(headers, dict) and headers.get(_RAW_RESPONSE_HEADER) in _RAW_READ
        if read and kwargs.get("stream") is not True:
            parsed = result.parse()  # the SDK caches it: the app's own parse() gets the same object
            call.finish(extraction_of_message(call, parsed) if _is_message(parsed) else None)
        else:
            # with_streaming_response or a raw stream: the body is the app's to read, we must not.
            call.finish(None)
        return result
    if _is_stream(result):
        return SyncStreamProxy(result, call, EventAccumulator())
    call.finish(extraction_of_message(call, result) if _is_message(result) else None)
    return result


def _finish_async(call: GenAICall, result: Any, kwargs: Mapping[str, Any]) -> Any:
    if _is_stream(result):
        return AsyncStreamProxy(result, call, EventAccumulator())
    call.finish(extraction_of_message(call, result) if _is_message(result) else None)
    return result


#: What ``with_raw_response`` returns: ``LegacyAPIResponse`` before anthropic 1.x, ``APIResponse`` since.
_RAW_RESPONSE_TYPES: Final = frozenset({"APIResponse", "LegacyAPIResponse"})


def _is_raw_response(result: Any) -> bool:
    return type(result).__name__ in _RAW_RESPONSE_TYPES and callable(getattr(result, "parse", None))


def _is_stream(result: Any) -> bool:
    # The SDK's Stream / AsyncStream; a raw-response wrapper (with_raw_response) is neither.
    return type(result).__name__ in ("Stream", "AsyncStream") and hasattr(result, "response")


def _is_message(result: Any) -> bool:
    return getattr(result, "type", None) == "message" and hasattr(result, "content")


create = model_call_wrapper(_start_create, _finish_sync)
"""Wrap ``Messages.create`` / ``parse``."""
create_async = model_call_wrapper(_start_create, _finish_async, is_async=True)
"""Wrap ``AsyncMessages.create`` / ``parse``."""


# --- messages.stream(): the span opens when the manager is entered -------------------------------------


class _StreamManagerProxy(ObjectProxy):
    """``messages.stream(...)``: the span opens on ``__enter__``, when the request is sent."""

    _stream_proxy_type: type[Any] = SyncStreamProxy

    def __init__(self, manager: Any, start: Callable[[], GenAICall | None]) -> None:
        super().__init__(manager)
        self._self_start = start
        self._self_proxy: Any = None

    def __enter__(self) -> Any:
        return run_sync(self.__wrapped__.__enter__, (), {}, self._self_start, self._observe)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        self._fail_early(exc)
        try:
            return self.__wrapped__.__exit__(exc_type, exc, traceback)
        finally:
            self._end()

    def _observe(self, call: GenAICall, message_stream: Any) -> Any:
        """Swap the MessageStream's raw event stream for our proxy."""
        try:
            proxy = self._stream_proxy_type(message_stream._raw_stream, call, EventAccumulator())
            message_stream._raw_stream = proxy
            self._self_proxy = proxy
        except Exception:  # an SDK whose MessageStream changed shape: end the span, keep the stream
            swallowed(_logger, "anthropic.stream", "tallyspan could not observe an Anthropic MessageStream")
            call.finish(None)
        return message_stream

    def _fail_early(self, exc: Any) -> None:
        # Before the SDK's exit: its close() would end the span as if the stream had simply stopped.
        if isinstance(exc, BaseException):
            finalize_if_proxy(self._self_proxy, exc)

    def _end(self) -> None:
        # The MessageStream's close() ends the span through the proxy; this covers the odd SDK that doesn't.
        finalize_if_proxy(self._self_proxy)


class _AsyncStreamManagerProxy(_StreamManagerProxy):
    """The async twin of :class:`_StreamManagerProxy`."""

    _stream_proxy_type = AsyncStreamProxy

    async def __aenter__(self) -> Any:
        return await run_async(self.__wrapped__.__aenter__, (), {}, self._self_start, self._observe)

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        self._fail_early(exc)
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, traceback)
        finally:
            self._end()


def _stream_manager(proxy_type: type[_StreamManagerProxy]) -> Callable[[WrapperState], Wrapper]:
    def factory(state: WrapperState) -> Wrapper:
        def start(instance: Any, kwargs: Mapping[str, Any]) -> GenAICall | None:
            # At __enter__: unless a framework span already stands for the call by then.
            if not state.enabled or framework_model_call_active():
                return None
            return _start(state, instance, (), kwargs, stream=True)

        def wrapper(
            wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            manager = wrapped(*args, **kwargs)
            if not state.enabled or not is_instrumentation_enabled() or framework_model_call_active():
                return manager
            return proxy_type(manager, functools.partial(start, instance, kwargs))

        return wrapper

    return factory


stream = _stream_manager(_StreamManagerProxy)
"""Wrap ``Messages.stream``."""
stream_async = _stream_manager(_AsyncStreamManagerProxy)
"""Wrap ``AsyncMessages.stream`` (it returns the async manager without awaiting)."""


# --- the SDK's own tracing -------------------------------------------------------------------------------


def native_span(state: WrapperState) -> Wrapper:
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
