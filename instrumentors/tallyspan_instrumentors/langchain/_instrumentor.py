"""``LangChainInstrumentor``: the callback handler in every manager, and the one-span-per-model-call wrappers."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Final

import wrapt
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import unwrap

from tallyspan import semconv
from tallyspan._config import resolve_capture_content
from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler
from tallyspan_instrumentors.langchain._patches import (
    Wrapper,
    astream_wrapper,
    async_generate_wrapper,
    generate_wrapper,
    manager_init_wrapper,
    stream_wrapper,
)

__all__ = ["LangChainInstrumentor"]

_INSTRUMENTS: Final = ("langchain-core >= 0.3",)

_CHAT_MODELS: Final = "langchain_core.language_models.chat_models"
#: (module, "Class.method", wrapper factory): the one table ``_instrument`` and ``_uninstrument`` share.
_WRAPPED: Final[tuple[tuple[str, str, Callable[[TallyspanCallbackHandler], Wrapper]], ...]] = (
    ("langchain_core.callbacks.base", "BaseCallbackManager.__init__", manager_init_wrapper),
    (_CHAT_MODELS, "BaseChatModel._generate_with_cache", generate_wrapper),
    (_CHAT_MODELS, "BaseChatModel._agenerate_with_cache", async_generate_wrapper),
    (_CHAT_MODELS, "BaseChatModel.stream", stream_wrapper),
    (_CHAT_MODELS, "BaseChatModel.astream", astream_wrapper),
)


class LangChainInstrumentor(BaseInstrumentor):
    """Traces LangChain / LangGraph runs: chat models, tools, agents and graphs (see the package docstring).

    Keyword args of ``instrument()``: ``tracer_provider``, ``capture_content`` (messages and tool
    arguments as span attributes; default from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    """

    _handler: TallyspanCallbackHandler | None = None

    @property
    def handler(self) -> TallyspanCallbackHandler | None:
        """The handler every callback manager receives while instrumented, else None."""
        return self._handler

    def instrumentation_dependencies(self) -> Collection[str]:
        """The ``langchain-core`` versions this instrumentor supports."""
        return _INSTRUMENTS

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, tracer_provider=kwargs.get("tracer_provider")
        )
        handler = TallyspanCallbackHandler(
            tracer, capture_content=resolve_capture_content(kwargs.get("capture_content"))
        )
        self._handler = handler
        for module, name, factory in _WRAPPED:
            wrapt.wrap_function_wrapper(module, name, factory(handler))

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._handler is not None:
            # Managers built while instrumented keep the handler; it goes quiet instead.
            self._handler.enabled = False
            self._handler = None
        for module, name, _factory in _WRAPPED:
            owner, method = name.split(".")
            unwrap(f"{module}.{owner}", method)
