"""``LangChainInstrumentor``: the callback handler in every manager, and the one-span-per-model-call wrappers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from tallyspan import semconv
from tallyspan.plugin import resolve_capture_content
from tallyspan_instrumentors._post_import import PatchSet

if TYPE_CHECKING:  # langchain_core is imported only once instrument() finds it installed
    from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler
    from tallyspan_instrumentors.langchain._patches import Wrapper

__all__ = ["LangChainInstrumentor"]

_INSTRUMENTS: Final = ("langchain-core >= 0.3",)

_CHAT_MODELS: Final = "langchain_core.language_models.chat_models"


#: (module, "Class.method", name of the wrapper factory in ``_patches``). Names, not the factories:
#: ``_patches`` imports ``langchain_core``, which neither loading this entry point nor ``instrument()``
#: may do; the factories are looked up in the import hook, once the app has imported LangChain.
_WRAPPED: Final = (
    ("langchain_core.callbacks.base", "BaseCallbackManager.__init__", "manager_init_wrapper"),
    (_CHAT_MODELS, "BaseChatModel._generate_with_cache", "generate_wrapper"),
    (_CHAT_MODELS, "BaseChatModel._agenerate_with_cache", "async_generate_wrapper"),
    (_CHAT_MODELS, "BaseChatModel.stream", "stream_wrapper"),
    (_CHAT_MODELS, "BaseChatModel.astream", "astream_wrapper"),
)


class LangChainInstrumentor(BaseInstrumentor):
    """Traces LangChain / LangGraph runs: chat models, tools, agents and graphs (see the package docstring).

    Keyword args of ``instrument()``: ``tracer_provider``, ``capture_content`` (messages and tool
    arguments as span attributes; default from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    """

    _handler: TallyspanCallbackHandler | None = None
    _patches: PatchSet | None = None
    _tracer: trace.Tracer | None = None
    _capture_content: bool = False

    @property
    def handler(self) -> TallyspanCallbackHandler | None:
        """The handler every callback manager receives while instrumented, else None."""
        return self._handler

    def instrumentation_dependencies(self) -> Collection[str]:
        """The ``langchain-core`` versions this instrumentor supports."""
        return _INSTRUMENTS

    def _instrument(self, **kwargs: Any) -> None:
        self._tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, tracer_provider=kwargs.get("tracer_provider")
        )
        self._capture_content = resolve_capture_content(kwargs.get("capture_content"))
        self._patches = PatchSet()
        # Patched when the app imports langchain_core (half a second), not by instrument() itself.
        for module, name, factory_name in _WRAPPED:
            self._patches.add_built_on_import(module, name, functools.partial(self._wrapper, factory_name))

    def _wrapper(self, factory_name: str) -> Wrapper:
        """The wrapper ``_patches.<factory_name>`` makes around the one handler (created on first use)."""
        from tallyspan_instrumentors.langchain import _patches

        factory: Callable[[TallyspanCallbackHandler], Wrapper] = getattr(_patches, factory_name)
        if self._handler is None:
            from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler

            tracer = self._tracer or trace.get_tracer(semconv.INSTRUMENTATION_SCOPE)
            self._handler = TallyspanCallbackHandler(tracer, capture_content=self._capture_content)
        return factory(self._handler)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._handler is not None:
            # Managers built while instrumented keep the handler; it goes quiet instead.
            self._handler.enabled = False
            self._handler = None
        if self._patches is not None:
            self._patches.undo()
            self._patches = None
