"""``TallyspanInstrumentor``: the one ``_instrument`` / ``_uninstrument`` body, driven by a wrap table.

An instrumentor states what it wraps and what is particular to its library; the base does the rest::

    class OllamaInstrumentor(TallyspanInstrumentor[WrapperState]):
        _instruments = ("ollama >= 0.4",)
        _wrapped = (("ollama._client", "Client.chat", call(chat=True)), ...)  # (module, "Class.method", factory)
        _state_type = WrapperState

        def _on_instrument(self, state, patches): ...    # optional hooks: ollama rebinds its module
        def _on_uninstrument(self, state): ...           # functions on import and on undo

``instrument()`` resolves the tracer (from ``tracer_provider``) and ``capture_content`` (the one rule of
:func:`tallyspan.plugin.instrumentors.resolve_capture_content`: a bad argument raises ``ConfigError``, a bad environment
value warns and leaves content off), builds the :class:`WrapperState` every wrapper reads, and patches
each table entry when the app imports its module (:class:`~tallyspan_instrumentors._post_import.PatchSet`).
``uninstrument()`` turns the state off (a library that kept a bound wrapper gets a pass-through) and
unwraps the same table.

The class keeps OpenTelemetry's ``BaseInstrumentor`` protocol (one instance per class, ``instrument``
/ ``uninstrument`` once each, the dependency check, ``skip_dep_check`` and
``raise_exception_on_conflict``) without deriving from it: importing ``BaseInstrumentor`` loads
packaging's parsers and the HTTP/database semantic-convention modules (about 15 ms), which every app
would pay at start for an instrumentor that uses neither. It is registered as a virtual subclass as
soon as that module is imported, so ``isinstance(instrumentor, BaseInstrumentor)`` holds for anyone who
asks; ``opentelemetry-instrument`` only calls ``instrument()`` on what the entry point names.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeVar

import wrapt
from opentelemetry import trace
from opentelemetry.trace import Tracer

from tallyspan import semconv
from tallyspan.plugin import __version__
from tallyspan.plugin.instrumentors import conflict_message, dependency_conflict, resolve_capture_content
from tallyspan_instrumentors._post_import import PatchSet

__all__ = ["TallyspanInstrumentor", "WrapEntry", "Wrapper", "WrapperFactory", "WrapperState"]

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
"""A wrapt wrapper: ``(wrapped, instance, args, kwargs) -> result``."""


@dataclass
class WrapperState:
    """What the wrappers of one instrumentation read.

    ``enabled`` turns false at ``uninstrument()``: a library may keep a wrapper past its unwrap (a bound
    handler it cached), which must then pass calls through untraced.
    """

    tracer: Tracer
    capture_content: bool
    enabled: bool = True


S = TypeVar("S", bound=WrapperState)

WrapperFactory = Callable[[S], Wrapper]
"""Makes the wrapper of one table entry from the instrumentation's state (called on the module's import)."""
WrapEntry = tuple[str, str, WrapperFactory[S]]
"""``(module, "Class.method", wrapper factory)``: one row of an instrumentor's wrap table."""


_I = TypeVar("_I", bound="TallyspanInstrumentor[Any]")
#: The module of OpenTelemetry's ``BaseInstrumentor``, and the logger it logs under (kept for our instrumentors).
_BASE_MODULE = "opentelemetry.instrumentation.instrumentor"
_logger = logging.getLogger(_BASE_MODULE)


class TallyspanInstrumentor(Generic[S]):
    """An OpenTelemetry instrumentor driven by its wrap table, with hooks for what the table cannot say.

    Keyword arguments of :meth:`instrument`: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (export message content as span attributes; default: the
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` environment variable, else off).

    Subclasses set ``_instruments`` (the supported library versions) and ``_wrapped`` (the wrap table),
    and ``_state_type`` when their wrappers need more than :class:`WrapperState`.
    """

    _instruments: tuple[str, ...] = ()
    _wrapped: tuple[WrapEntry[S], ...] = ()
    _state_type: Callable[[Tracer, bool], S]
    # Class attributes, not set in __init__: the instrumentor is a singleton whose __init__ runs on
    # every construction, which would forget the state of the running instrumentation.
    _state: S | None = None
    _patches: PatchSet | None = None
    # BaseInstrumentor's own attributes, under its names (other tools read them).
    _instance: Any = None
    _is_instrumented_by_opentelemetry = False

    def __new__(cls: type[_I], *args: Any, **kwargs: Any) -> _I:
        # One instance per class, as BaseInstrumentor: constructing it again returns the running one.
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        instance: _I = cls._instance
        return instance

    @property
    def is_instrumented_by_opentelemetry(self) -> bool:
        """True between ``instrument()`` and ``uninstrument()``."""
        return self._is_instrumented_by_opentelemetry

    def instrumentation_dependencies(self) -> Collection[str]:
        """The library versions this instrumentor supports."""
        return self._instruments

    def _check_dependency_conflicts(self) -> Any:
        """OpenTelemetry's ``DependencyConflict`` when a supported library is missing or out of range, else None.

        Decided without packaging when the library is installed in range (``dependency_conflict``); the
        conflict itself, which a caller formats or raises, is OpenTelemetry's.
        """
        unmet = dependency_conflict(self.instrumentation_dependencies())
        return None if unmet is None else unmet.conflict()

    def instrument(self, **kwargs: Any) -> Any:
        """Instrument the library, as ``BaseInstrumentor.instrument`` does (``opentelemetry-instrument``
        calls it without arguments); once only, and not when the library is missing or out of range."""
        if self._is_instrumented_by_opentelemetry:
            _logger.warning("Attempting to instrument while already instrumented")
            return None
        skip_dep_check = kwargs.pop("skip_dep_check", False)
        raise_exception_on_conflict = kwargs.pop("raise_exception_on_conflict", False)
        if not skip_dep_check:
            conflict = self._check_dependency_conflicts()
            if conflict:
                if raise_exception_on_conflict:  # opentelemetry-instrument's loader logs it
                    from opentelemetry.instrumentation.dependencies import DependencyConflictError

                    raise DependencyConflictError(conflict)
                _logger.error(conflict_message(conflict, type(self).__name__))
                return None
        # BaseInstrumentor also reads OTEL_SEMCONV_STABILITY_OPT_IN here, for the HTTP and database
        # conventions of the instrumentations that follow it; ours emit the GenAI names either way.
        self._instrument(**kwargs)
        self._is_instrumented_by_opentelemetry = True
        return None

    def uninstrument(self, **kwargs: Any) -> Any:
        """Undo :meth:`instrument` (a warning when not instrumented), as ``BaseInstrumentor.uninstrument``."""
        if self._is_instrumented_by_opentelemetry:
            self._uninstrument(**kwargs)
            self._is_instrumented_by_opentelemetry = False
            return None
        _logger.warning("Attempting to uninstrument while already uninstrumented")
        return None

    @property
    def capture_content(self) -> bool | None:
        """Whether the running instrumentation exports content; None when not instrumented."""
        return self._state.capture_content if self._state is not None else None

    def _instrument(self, **kwargs: Any) -> None:
        # Resolved first: a bad argument raises before anything is patched.
        capture_content = resolve_capture_content(kwargs.get("capture_content"))
        tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, __version__, tracer_provider=kwargs.get("tracer_provider")
        )
        state = self._state_type(tracer, capture_content)
        # Patched when the app imports the library (at once if it has): importing it here costs seconds.
        patches = PatchSet()
        for module, path, factory in self._wrapped:
            patches.add(module, path, functools.partial(factory, state))
        self._on_instrument(state, patches)
        self._state, self._patches = state, patches

    def _uninstrument(self, **kwargs: Any) -> None:
        state, patches = self._state, self._patches
        self._state = self._patches = None
        if state is not None:
            state.enabled = False
        if patches is not None:
            patches.undo()
        if state is not None:
            self._on_uninstrument(state)

    def _on_instrument(self, state: S, patches: PatchSet) -> None:
        """Hook: what the table cannot say (``patches.on_import`` for work on the library's import)."""

    def _on_uninstrument(self, state: S) -> None:
        """Hook: undo what :meth:`_on_instrument` did (the table is already unwrapped)."""


def _register_as_base_instrumentor(module: ModuleType) -> None:
    module.BaseInstrumentor.register(TallyspanInstrumentor)


# At once if the module is imported already, else when it is: never imported for this alone.
wrapt.register_post_import_hook(_register_as_base_instrumentor, _BASE_MODULE)
