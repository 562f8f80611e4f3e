"""The Ollama instrumentor: ``chat`` (``chat {model}``) and ``generate`` (``text_completion {model}``).

Both ``Client`` and ``AsyncClient`` methods are wrapped, and so are the module-level ``ollama.chat`` /
``ollama.generate``: those are methods bound to a default client when ``ollama`` is imported, so a
wrapper on the class never sees them. ``stream=True`` returns a generator (sync) or an async generator
(async) of parts; it is wrapped in a proxy that ends the span once: exhausted, failed, closed
(``close()`` / ``aclose()``) or garbage-collected.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection
from typing import Any

import wrapt
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.trace import Tracer

from tallyspan import semconv
from tallyspan._config import resolve_capture_content
from tallyspan_instrumentors._common import (
    AsyncStreamProxy,
    GenAICall,
    SyncStreamProxy,
    finalize_if_proxy,
    run_async,
    run_sync,
    start_genai_call,
)
from tallyspan_instrumentors.ollama._extract import (
    OllamaReply,
    PartAccumulator,
    call_arguments,
    reply_extraction,
    request_attributes,
    request_content,
)

__all__ = ["OllamaInstrumentor"]

_instruments = ("ollama >= 0.4",)

Factory = Callable[[Tracer, bool], Callable[..., Any]]


class _AsyncGeneratorProxy(AsyncStreamProxy):
    """An async generator of parts: ``aclose()`` (its close) ends the span too."""

    async def aclose(self) -> None:
        """Close the generator and end the span."""
        try:
            await self.__wrapped__.aclose()
        finally:
            finalize_if_proxy(self)


def _starter(
    tracer: Tracer, capture: bool, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, chat: bool
) -> Callable[[], GenAICall]:
    def start() -> GenAICall:
        arguments = call_arguments(args, kwargs, chat=chat)
        prompt, content_attributes = request_content(arguments, chat=chat)
        operation = semconv.OPERATION_CHAT if chat else semconv.OPERATION_TEXT_COMPLETION
        model = arguments.get("model")
        return start_genai_call(
            tracer,
            operation=operation,
            model=model if isinstance(model, str) and model else None,
            attributes=request_attributes(instance, arguments, operation=operation),
            capture_content=capture,
            prompt=prompt,
            content_attributes=content_attributes,
        )

    return start


def _finish(call: GenAICall, result: Any) -> Any:
    # A generator (sync) or async generator of parts when streaming, else one response object.
    if hasattr(result, "__anext__"):
        return _AsyncGeneratorProxy(result, call, PartAccumulator())
    if hasattr(result, "__next__"):
        return SyncStreamProxy(result, call, PartAccumulator())
    reply = OllamaReply()
    reply.add(result)
    call.finish(reply_extraction(call, reply))
    return result


def _factory(*, chat: bool, is_async: bool) -> Factory:
    def factory(tracer: Tracer, capture: bool) -> Callable[..., Any]:
        if is_async:

            async def async_wrapper(
                wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> Any:
                start = _starter(tracer, capture, instance, args, kwargs, chat=chat)
                return await run_async(wrapped, args, kwargs, start, _finish)

            return async_wrapper

        def wrapper(
            wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            start = _starter(tracer, capture, instance, args, kwargs, chat=chat)
            return run_sync(wrapped, args, kwargs, start, _finish)

        return wrapper

    return factory


#: (module, attribute path, wrapper factory): read by both _instrument and _uninstrument.
_WRAPPED: tuple[tuple[str, str, Factory], ...] = (
    ("ollama._client", "Client.chat", _factory(chat=True, is_async=False)),
    ("ollama._client", "Client.generate", _factory(chat=False, is_async=False)),
    ("ollama._client", "AsyncClient.chat", _factory(chat=True, is_async=True)),
    ("ollama._client", "AsyncClient.generate", _factory(chat=False, is_async=True)),
    # Bound to the default client at import, so the class wrappers above do not reach them.
    ("ollama", "chat", _factory(chat=True, is_async=False)),
    ("ollama", "generate", _factory(chat=False, is_async=False)),
)


class OllamaInstrumentor(BaseInstrumentor):
    """Traces Ollama ``chat`` and ``generate`` calls as GenAI spans.

    Keyword arguments of :meth:`instrument`: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (default: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """The package versions this instrumentor supports."""
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        from tallyspan import __version__

        tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, __version__, tracer_provider=kwargs.get("tracer_provider")
        )
        capture = resolve_capture_content(kwargs.get("capture_content"))
        for module, name, factory in _WRAPPED:
            wrapt.wrap_function_wrapper(module, name, factory(tracer, capture))

    def _uninstrument(self, **kwargs: Any) -> None:
        for module, name, _ in _WRAPPED:
            owner: Any = importlib.import_module(module)
            *path, attribute = name.split(".")
            for part in path:
                owner = getattr(owner, part)
            unwrap(owner, attribute)
