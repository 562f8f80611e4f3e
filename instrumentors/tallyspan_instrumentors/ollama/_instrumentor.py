"""The Ollama instrumentor: ``chat`` (``chat {model}``) and ``generate`` (``text_completion {model}``).

Both ``Client`` and ``AsyncClient`` methods are wrapped. The module-level ``ollama.chat`` /
``ollama.generate`` are methods bound to a default client when ``ollama`` is imported, possibly
before our wrapper is on the class: they are bound again once it is (and again when it is removed),
so they go through the class wrapper and a call is never traced twice.

``stream=True`` returns a generator (sync) or an async generator (async) of parts; it is wrapped in
a proxy that ends the span once: exhausted, failed, closed (``close()`` / ``aclose()``) or collected.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

import wrapt
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.trace import Tracer

from tallyspan import semconv
from tallyspan.plugin import resolve_capture_content
from tallyspan_instrumentors._common import (
    AsyncGeneratorProxy,
    GenAICall,
    SyncGeneratorProxy,
    run_async,
    run_sync,
    start_genai_call,
)
from tallyspan_instrumentors._post_import import PatchSet
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


def _starter(
    tracer: Tracer, capture: bool, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, chat: bool
) -> Callable[[], GenAICall]:
    def start() -> GenAICall:
        arguments = call_arguments(args, kwargs, chat=chat)
        prompt, content_attributes = request_content(arguments, chat=chat, capture=capture)
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
        return AsyncGeneratorProxy(result, call, PartAccumulator())
    if hasattr(result, "__next__"):
        return SyncGeneratorProxy(result, call, PartAccumulator())
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


#: The module-level functions of ollama: methods of its default client ``ollama._client``.
_MODULE_FUNCTIONS = ("chat", "generate")


def _rebind_module_functions(module: ModuleType) -> None:
    """Bind ``ollama.chat`` / ``ollama.generate`` to the default client again, through the class as it is now."""
    default = getattr(module, "_client", None)
    if default is None:
        return
    for name in _MODULE_FUNCTIONS:
        current = getattr(module, name, None)
        if getattr(current, "__self__", None) is default:  # not replaced by the app: ours to rebind
            setattr(module, name, getattr(default, name))


def _rebind_if_enabled(patches: PatchSet, module: ModuleType) -> None:
    if patches.enabled:
        _rebind_module_functions(module)


#: (module, attribute path, wrapper factory): read by both _instrument and _uninstrument.
_WRAPPED: tuple[tuple[str, str, Factory], ...] = (
    ("ollama._client", "Client.chat", _factory(chat=True, is_async=False)),
    ("ollama._client", "Client.generate", _factory(chat=False, is_async=False)),
    ("ollama._client", "AsyncClient.chat", _factory(chat=True, is_async=True)),
    ("ollama._client", "AsyncClient.generate", _factory(chat=False, is_async=True)),
)


class OllamaInstrumentor(BaseInstrumentor):
    """Traces Ollama ``chat`` and ``generate`` calls as GenAI spans.

    Keyword arguments of :meth:`instrument`: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (default: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
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
        # Patched when the app imports ollama (at once if it has): importing it here costs a second.
        patches = PatchSet()
        for module, name, factory in _WRAPPED:
            patches.add(module, name, factory(tracer, capture))
        # Runs after the _client hooks: the package finishes importing after its submodule.
        wrapt.register_post_import_hook(functools.partial(_rebind_if_enabled, patches), "ollama")
        self._patches = patches

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._patches is not None:
            self._patches.undo()
            self._patches = None
            if "ollama" in sys.modules:
                _rebind_module_functions(sys.modules["ollama"])
