"""The OpenAI wrappers: one model-call shape for chat, Responses and embeddings, and the stream helpers.

Routing in the SDK, checked against its source: ``chat.completions.stream()`` and ``responses.stream()``
call ``create(stream=True)``, so they are covered by the ``create`` wrappers (one span) and get our stream
proxy as their raw stream; their ``close()`` closes the HTTP response behind the proxy, so those ``close``
methods are wrapped too, to end the span at ``with`` exit. ``parse()`` posts directly, so it is wrapped on
its own. ``with_raw_response`` binds the (wrapped) methods and adds a header, so the wrapper sees the
SDK's raw response object, reads the parsed body from it (the SDK caches the parse) and returns it as is.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tallyspan import semconv
from tallyspan.plugin import swallowed
from tallyspan_instrumentors._base import Wrapper, WrapperState
from tallyspan_instrumentors._calls import Extraction, GenAICall, model_call_wrapper, start_genai_call
from tallyspan_instrumentors._streams import (
    AsyncStreamProxy,
    StreamAccumulator,
    SyncStreamProxy,
    finalize_if_proxy,
)

if TYPE_CHECKING:
    from tallyspan_instrumentors.openai._extract_shared import Request

__all__ = [
    "CHAT",
    "EMBEDDINGS",
    "RESPONSES",
    "Operation",
    "async_helper_close",
    "async_manager_exit",
    "call",
    "helper_close",
    "manager_exit",
    "operation",
]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Operation:
    """How one kind of call is read: its request, its response, and its stream (if it has one)."""

    read_request: Callable[..., Request]
    extract: Callable[[Any, GenAICall], Extraction]
    accumulator: Callable[[], StreamAccumulator] | None


#: The kinds of call the wrap table names. Each kind's reading (its ``_extract_*`` module, about 3 ms
#: for the three) is imported with its first call, not with the instrumentor: an app pays for it only
#: once it calls the SDK, and only for the kinds it calls.
CHAT: Final = "chat"
RESPONSES: Final = "responses"
EMBEDDINGS: Final = "embeddings"


@functools.cache
def operation(kind: str) -> Operation:
    """How a call of ``kind`` (:data:`CHAT`, :data:`RESPONSES` or :data:`EMBEDDINGS`) is read."""
    if kind == CHAT:
        from tallyspan_instrumentors.openai._extract_chat import (
            ChatStreamAccumulator,
            chat_request,
            extract_chat_completion,
        )

        return Operation(chat_request, extract_chat_completion, ChatStreamAccumulator)
    if kind == RESPONSES:
        from tallyspan_instrumentors.openai._extract_responses import (
            ResponsesStreamAccumulator,
            extract_response,
            responses_request,
        )

        return Operation(responses_request, extract_response, ResponsesStreamAccumulator)
    if kind == EMBEDDINGS:
        from tallyspan_instrumentors.openai._extract_embeddings import embeddings_request, extract_embeddings

        return Operation(embeddings_request, extract_embeddings, None)
    raise ValueError(f"no OpenAI operation {kind!r}")


def call(kind: str, *, is_async: bool = False) -> Callable[[WrapperState], Wrapper]:
    """The wrapper factory of an SDK method making one call of ``kind``."""
    return model_call_wrapper(
        functools.partial(_start, kind), functools.partial(_finish, kind), is_async=is_async
    )


def _start(
    kind: str, state: WrapperState, resource: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> GenAICall:
    request = operation(kind).read_request(resource, kwargs, capture_content=state.capture_content)
    return start_genai_call(
        state.tracer,
        operation=str(request.attributes[semconv.GEN_AI_OPERATION_NAME]),
        model=request.model,
        attributes=request.attributes,
        capture_content=state.capture_content,
        prompt=request.prompt,
        content_attributes=request.content_attributes,
    )


@functools.cache
def _sdk_types() -> tuple[type[Any], type[Any], type[Any], tuple[type[Any], ...]]:
    """The SDK's stream and raw-response classes (imported on the first call: the SDK is loaded by then)."""
    import openai
    from openai._legacy_response import LegacyAPIResponse
    from openai._response import APIResponse, AsyncAPIResponse

    return openai.Stream, openai.AsyncStream, LegacyAPIResponse, (APIResponse, AsyncAPIResponse)


def _finish(kind: str, call: GenAICall, result: Any, kwargs: Mapping[str, Any]) -> Any:
    stream, async_stream, legacy_response, api_responses = _sdk_types()
    reading = operation(kind)
    if reading.accumulator is not None:
        if isinstance(result, stream):
            return SyncStreamProxy(result, call, reading.accumulator())
        if isinstance(result, async_stream):
            return AsyncStreamProxy(result, call, reading.accumulator())
    if isinstance(result, legacy_response):
        if getattr(result, "_stream", False):
            # The app parses the stream itself later; the span covers the request only.
            call.finish(None)
        else:
            call.finish(reading.extract(result.parse(), call))  # parse() is cached by the SDK
        return result
    if isinstance(result, api_responses):
        # with_streaming_response: the body is the app's to read; reading it here would consume it.
        call.finish(None)
        return result
    call.finish(reading.extract(result, call))
    return result


# --- the SDK's stream helpers ----------------------------------------------------------------------------


def _end_raw_stream(helper_stream: Any) -> None:
    try:
        finalize_if_proxy(getattr(helper_stream, "_raw_stream", None))
    except Exception:  # closing the app's stream matters more than our span
        swallowed(_logger, "stream.helper_close", "tallyspan could not end a helper stream's span")


def helper_close(state: WrapperState) -> Wrapper:
    """Wrap a helper stream's ``close()``: it closes the HTTP response behind our proxy, so end its span."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            return wrapped(*args, **kwargs)
        finally:
            _end_raw_stream(instance)

    return wrapper


def async_helper_close(state: WrapperState) -> Wrapper:
    """The async twin of :func:`helper_close`."""

    async def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _end_raw_stream(instance)

    return wrapper


def _fail_on_early_exit(manager: Any, args: tuple[Any, ...]) -> None:
    """A helper's ``with`` block left by an exception: the stream was cut short, its span fails with it.

    Done before the manager's exit, whose close() would end the span as if the stream had simply stopped.
    """
    try:
        error = args[1] if len(args) > 1 else None
        if not isinstance(error, BaseException):
            return
        state = vars(manager)
        for cls in type(manager).__mro__:  # the helper stream is the manager's private ``__stream``
            helper_stream = state.get(f"_{cls.__name__}__stream")
            if helper_stream is not None:
                finalize_if_proxy(getattr(helper_stream, "_raw_stream", None), error)
                return
    except Exception:  # the app's exception goes on whatever we make of it
        swallowed(_logger, "stream.helper_exit", "tallyspan could not mark a helper stream's span failed")


def manager_exit(state: WrapperState) -> Wrapper:
    """Wrap a stream manager's ``__exit__``: an exception leaving the ``with`` block fails the span."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        _fail_on_early_exit(instance, args)
        return wrapped(*args, **kwargs)

    return wrapper


def async_manager_exit(state: WrapperState) -> Wrapper:
    """The async twin of :func:`manager_exit` (``__aexit__``)."""

    async def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        _fail_on_early_exit(instance, args)
        return await wrapped(*args, **kwargs)

    return wrapper
