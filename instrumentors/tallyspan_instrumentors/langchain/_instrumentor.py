"""``LangChainInstrumentor``: the callback handler in every manager, and the one-span-per-model-call wrappers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tallyspan_instrumentors._base import TallyspanInstrumentor, WrapEntry, Wrapper, WrapperState

if TYPE_CHECKING:  # langchain_core is imported only once the app has imported it
    from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler

__all__ = ["LangChainInstrumentor"]


@dataclass
class _LangChainState(WrapperState):
    """The wrappers' state, with the one handler every callback manager receives (made on first use)."""

    created_handler: TallyspanCallbackHandler | None = None

    def handler(self) -> TallyspanCallbackHandler:
        """The handler, made the first time a wrapper needs it (it subclasses langchain_core's)."""
        if self.created_handler is None:
            from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler

            self.created_handler = TallyspanCallbackHandler(self.tracer, capture_content=self.capture_content)
        return self.created_handler


def _around_handler(name: str) -> Callable[[_LangChainState], Wrapper]:
    """The factory of the wrapper ``_wrappers.<name>`` makes around the one handler.

    By name: ``_wrappers`` imports ``langchain_core``, which neither loading this entry point nor
    ``instrument()`` may do; it is imported in the import hook, once the app has imported LangChain.
    """

    def factory(state: _LangChainState) -> Wrapper:
        from tallyspan_instrumentors.langchain import _wrappers

        make: Callable[[TallyspanCallbackHandler], Wrapper] = getattr(_wrappers, name)
        return make(state.handler())

    return factory


_CHAT_MODELS: Final = "langchain_core.language_models.chat_models"

#: (module, "Class.method", wrapper factory): what instrument() wraps and uninstrument() unwraps.
_WRAPPED: Final[tuple[WrapEntry[_LangChainState], ...]] = (
    (
        "langchain_core.callbacks.base",
        "BaseCallbackManager.__init__",
        _around_handler("manager_init_wrapper"),
    ),
    (_CHAT_MODELS, "BaseChatModel._generate_with_cache", _around_handler("generate_wrapper")),
    (_CHAT_MODELS, "BaseChatModel._agenerate_with_cache", _around_handler("async_generate_wrapper")),
    (_CHAT_MODELS, "BaseChatModel.stream", _around_handler("stream_wrapper")),
    (_CHAT_MODELS, "BaseChatModel.astream", _around_handler("stream_wrapper")),
)


class LangChainInstrumentor(TallyspanInstrumentor[_LangChainState]):
    """Traces LangChain / LangGraph runs: chat models, tools, agents and graphs (see the package docstring).

    Keyword args of ``instrument()``: ``tracer_provider``, ``capture_content`` (messages and tool
    arguments as span attributes; default from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    """

    _instruments = ("langchain-core >= 0.3",)
    _wrapped = _WRAPPED
    _state_type = _LangChainState

    @property
    def handler(self) -> TallyspanCallbackHandler | None:
        """The handler every callback manager receives while instrumented, else None."""
        return self._state.created_handler if self._state is not None else None

    def _on_uninstrument(self, state: _LangChainState) -> None:
        if state.created_handler is not None:
            # Managers built while instrumented keep the handler; it goes quiet instead.
            state.created_handler.enabled = False
