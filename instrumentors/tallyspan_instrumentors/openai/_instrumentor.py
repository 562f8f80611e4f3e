"""``OpenAIInstrumentor``: one table of wrapped SDK methods feeds both instrument and uninstrument.

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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import (
    BaseInstrumentor,
)
from opentelemetry.trace import Tracer

import tallyspan
from tallyspan import semconv
from tallyspan.plugin import resolve_capture_content, swallowed
from tallyspan_instrumentors._common import (
    AsyncStreamProxy,
    Extraction,
    GenAICall,
    StreamAccumulator,
    SyncStreamProxy,
    finalize_if_proxy,
    run_async,
    run_sync,
    start_genai_call,
)
from tallyspan_instrumentors._post_import import PatchSet
from tallyspan_instrumentors.openai._chat import (
    ChatRequest,
    ChatStreamAccumulator,
    chat_request,
    extract_chat_completion,
)
from tallyspan_instrumentors.openai._embeddings import embeddings_request, extract_embeddings
from tallyspan_instrumentors.openai._responses import (
    ResponsesStreamAccumulator,
    extract_response,
    responses_request,
)

__all__ = ["OpenAIInstrumentor"]

_logger = logging.getLogger(__name__)

_instruments: Final = ("openai >= 1.40",)


@dataclass(frozen=True)
class _Operation:
    """How one kind of call is read: its request, its response, and its stream (if it has one)."""

    read_request: Callable[..., ChatRequest]
    extract: Callable[[Any, GenAICall], Extraction]
    accumulator: Callable[[], StreamAccumulator] | None


_CHAT = _Operation(chat_request, extract_chat_completion, ChatStreamAccumulator)
_RESPONSES = _Operation(responses_request, extract_response, ResponsesStreamAccumulator)
_EMBEDDINGS = _Operation(embeddings_request, extract_embeddings, None)

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
WrapperFactory = Callable[[Tracer, bool], Wrapper]


def _starter(
    operation: _Operation, tracer: Tracer, capture: bool, resource: Any, kwargs: Mapping[str, Any]
) -> Callable[[], GenAICall]:
    def start() -> GenAICall:
        request = operation.read_request(resource, kwargs, capture_content=capture)
        return start_genai_call(
            tracer,
            operation=str(request.attributes[semconv.GEN_AI_OPERATION_NAME]),
            model=request.model,
            attributes=request.attributes,
            capture_content=capture,
            prompt=request.prompt,
            content_attributes=request.content_attributes,
        )

    return start


def _finisher(operation: _Operation) -> Callable[[GenAICall, Any], Any]:
    import openai
    from openai._legacy_response import LegacyAPIResponse
    from openai._response import APIResponse, AsyncAPIResponse

    def finish(call: GenAICall, result: Any) -> Any:
        if operation.accumulator is not None:
            if isinstance(result, openai.Stream):
                return SyncStreamProxy(result, call, operation.accumulator())
            if isinstance(result, openai.AsyncStream):
                return AsyncStreamProxy(result, call, operation.accumulator())
        if isinstance(result, LegacyAPIResponse):
            if getattr(result, "_stream", False):
                # The app parses the stream itself later; the span covers the request only.
                call.finish(None)
            else:
                call.finish(operation.extract(result.parse(), call))  # parse() is cached by the SDK
            return result
        if isinstance(result, (APIResponse, AsyncAPIResponse)):
            # with_streaming_response: the body is the app's to read; reading it here would consume it.
            call.finish(None)
            return result
        call.finish(operation.extract(result, call))
        return result

    return finish


def _sync_call(operation: _Operation) -> WrapperFactory:
    def factory(tracer: Tracer, capture: bool) -> Wrapper:
        finish = _finisher(operation)

        def wrapper(
            wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            return run_sync(
                wrapped, args, kwargs, _starter(operation, tracer, capture, instance, kwargs), finish
            )

        return wrapper

    return factory


def _async_call(operation: _Operation) -> WrapperFactory:
    def factory(tracer: Tracer, capture: bool) -> Wrapper:
        finish = _finisher(operation)

        async def wrapper(
            wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            return await run_async(
                wrapped, args, kwargs, _starter(operation, tracer, capture, instance, kwargs), finish
            )

        return wrapper

    return factory


def _end_raw_stream(helper_stream: Any) -> None:
    try:
        finalize_if_proxy(getattr(helper_stream, "_raw_stream", None))
    except Exception:  # closing the app's stream matters more than our span
        swallowed(_logger, "stream.helper_close", "tallyspan could not end a helper stream's span")


def _sync_helper_close(tracer: Tracer, capture: bool) -> Wrapper:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            return wrapped(*args, **kwargs)
        finally:
            _end_raw_stream(instance)

    return wrapper


def _async_helper_close(tracer: Tracer, capture: bool) -> Wrapper:
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


def _sync_manager_exit(tracer: Tracer, capture: bool) -> Wrapper:
    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        _fail_on_early_exit(instance, args)
        return wrapped(*args, **kwargs)

    return wrapper


def _async_manager_exit(tracer: Tracer, capture: bool) -> Wrapper:
    async def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        _fail_on_early_exit(instance, args)
        return await wrapped(*args, **kwargs)

    return wrapper


_CHAT_MODULE = "openai.resources.chat"
_RESPONSES_MODULE = "openai.resources.responses"
_EMBEDDINGS_MODULE = "openai.resources.embeddings"
# Older SDKs kept parse() under client.beta.chat.completions (untested here: the pinned SDK has none).
_BETA_CHAT_MODULE = "openai.resources.beta.chat"
_CHAT_HELPERS = "openai.lib.streaming.chat"
_RESPONSE_HELPERS = "openai.lib.streaming.responses"

#: (module, "Class.method", wrapper factory): what instrument() wraps and uninstrument() unwraps.
_WRAPPED: Final[tuple[tuple[str, str, WrapperFactory], ...]] = (
    (_CHAT_MODULE, "Completions.create", _sync_call(_CHAT)),
    (_CHAT_MODULE, "AsyncCompletions.create", _async_call(_CHAT)),
    (_CHAT_MODULE, "Completions.parse", _sync_call(_CHAT)),
    (_CHAT_MODULE, "AsyncCompletions.parse", _async_call(_CHAT)),
    (_BETA_CHAT_MODULE, "Completions.parse", _sync_call(_CHAT)),
    (_BETA_CHAT_MODULE, "AsyncCompletions.parse", _async_call(_CHAT)),
    (_RESPONSES_MODULE, "Responses.create", _sync_call(_RESPONSES)),
    (_RESPONSES_MODULE, "AsyncResponses.create", _async_call(_RESPONSES)),
    (_RESPONSES_MODULE, "Responses.parse", _sync_call(_RESPONSES)),
    (_RESPONSES_MODULE, "AsyncResponses.parse", _async_call(_RESPONSES)),
    (_EMBEDDINGS_MODULE, "Embeddings.create", _sync_call(_EMBEDDINGS)),
    (_EMBEDDINGS_MODULE, "AsyncEmbeddings.create", _async_call(_EMBEDDINGS)),
    (_CHAT_HELPERS, "ChatCompletionStream.close", _sync_helper_close),
    (_CHAT_HELPERS, "AsyncChatCompletionStream.close", _async_helper_close),
    (_RESPONSE_HELPERS, "ResponseStream.close", _sync_helper_close),
    (_RESPONSE_HELPERS, "AsyncResponseStream.close", _async_helper_close),
    (_CHAT_HELPERS, "ChatCompletionStreamManager.__exit__", _sync_manager_exit),
    (_CHAT_HELPERS, "AsyncChatCompletionStreamManager.__aexit__", _async_manager_exit),
    (_RESPONSE_HELPERS, "ResponseStreamManager.__exit__", _sync_manager_exit),
    (_RESPONSE_HELPERS, "AsyncResponseStreamManager.__aexit__", _async_manager_exit),
)


class OpenAIInstrumentor(BaseInstrumentor):
    """Emits a GenAI span per OpenAI chat, Responses and embeddings call.

    ``instrument()`` keyword arguments: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (export message content as span attributes; default: the
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` environment variable, else off).
    """

    _patches: PatchSet | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The ``openai`` versions this instrumentor supports."""
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        capture = kwargs.get("capture_content")
        capture_content = resolve_capture_content(capture if isinstance(capture, bool) else None)
        tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE,
            tallyspan.__version__,
            tracer_provider=kwargs.get("tracer_provider"),
        )
        # Patched when the app imports openai, so instrument() never pays that import itself.
        # Older SDKs lack some of these (Responses arrived in 1.66); a missing target is skipped.
        self._patches = PatchSet()
        for module, name, factory in _WRAPPED:
            self._patches.add_built_on_import(
                module, name, functools.partial(factory, tracer, capture_content)
            )

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._patches is not None:
            self._patches.undo()
            self._patches = None
