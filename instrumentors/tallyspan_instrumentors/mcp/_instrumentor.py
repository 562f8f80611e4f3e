"""``MCPInstrumentor``: MCP ``tools/call`` as ``execute_tool`` spans on the client and the in-process server."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any, Final

import wrapt
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import unwrap

from tallyspan import semconv
from tallyspan.plugin import resolve_capture_content
from tallyspan_instrumentors.mcp._wrappers import WrapperState, call_tool_wrapper, on_request_wrapper

__all__ = ["MCPInstrumentor"]

_INSTRUMENTS: Final = ("mcp >= 2.0",)

#: (module, "Class.method", wrapper factory): the one table ``_instrument`` and ``_uninstrument`` share.
_WRAPPED: Final[tuple[tuple[str, str, Callable[[WrapperState], Any]], ...]] = (
    ("mcp.client.session", "ClientSession.call_tool", call_tool_wrapper),
    ("mcp.server.runner", "ServerRunner._on_request", on_request_wrapper),
)


def _patch(state: WrapperState, name: str, wrapper: Any, module: ModuleType) -> None:
    if state.enabled:  # a hook of an instrumentation undone before the import is a no-op
        wrapt.wrap_function_wrapper(module, name, wrapper)


class MCPInstrumentor(BaseInstrumentor):
    """Traces MCP tool calls: the client's ``call_tool`` and the in-process server's handling of it.

    Keyword args of ``instrument()``: ``tracer_provider``, ``capture_content`` (tool arguments and
    results as span attributes; default from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    """

    _state: WrapperState | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The ``mcp`` versions this instrumentor supports."""
        return _INSTRUMENTS

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, tracer_provider=kwargs.get("tracer_provider")
        )
        capture_content = kwargs.get("capture_content")
        state = WrapperState(tracer, resolve_capture_content(capture_content))
        self._state = state
        # Patch when the app imports mcp (now, if it already has): importing it ourselves would cost
        # every instrument() seconds in apps that have mcp installed but never use it.
        for module, name, factory in _WRAPPED:
            wrapt.register_post_import_hook(functools.partial(_patch, state, name, factory(state)), module)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._state is not None:
            self._state.enabled = False
            self._state = None
        for module, name, _factory in _WRAPPED:
            owner, method = name.split(".")
            unwrap(f"{module}.{owner}", method)
