"""``OllamaInstrumentor``: ``chat`` and ``generate`` of ``Client`` and ``AsyncClient``, and the module functions.

The module-level ``ollama.chat`` / ``ollama.generate`` are methods bound to a default client when
``ollama`` is imported, possibly before our wrapper is on the class: they are bound again once it is (and
again when it is removed), so they go through the class wrapper and a call is never traced twice.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Final

from tallyspan_instrumentors._base import TallyspanInstrumentor, WrapEntry, WrapperState
from tallyspan_instrumentors._post_import import PatchSet
from tallyspan_instrumentors.ollama._wrappers import call

__all__ = ["OllamaInstrumentor"]

#: (module, "Class.method", wrapper factory): what instrument() wraps and uninstrument() unwraps.
_WRAPPED: Final[tuple[WrapEntry[WrapperState], ...]] = (
    ("ollama._client", "Client.chat", call(chat=True)),
    ("ollama._client", "Client.generate", call(chat=False)),
    ("ollama._client", "AsyncClient.chat", call(chat=True, is_async=True)),
    ("ollama._client", "AsyncClient.generate", call(chat=False, is_async=True)),
)

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


class OllamaInstrumentor(TallyspanInstrumentor[WrapperState]):
    """Traces Ollama ``chat`` and ``generate`` calls as GenAI spans.

    Keyword arguments of :meth:`instrument`: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (default: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    """

    _instruments = ("ollama >= 0.4",)
    _wrapped = _WRAPPED
    _state_type = WrapperState

    def _on_instrument(self, state: WrapperState, patches: PatchSet) -> None:
        # Runs after the _client hooks: the package finishes importing after its submodule.
        patches.on_import("ollama", _rebind_module_functions)

    def _on_uninstrument(self, state: WrapperState) -> None:
        if "ollama" in sys.modules:
            _rebind_module_functions(sys.modules["ollama"])
