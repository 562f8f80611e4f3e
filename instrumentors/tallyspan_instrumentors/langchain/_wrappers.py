"""The wrappers: every callback manager gets the handler; provider calls inside a chat run are not traced twice.

* ``BaseCallbackManager.__init__``: after LangChain builds any callback manager (configured ones, the
  children of a run, the groups), the handler is added as an inheritable handler, once (``add_handler``
  skips a handler already present). No user code changes.
* ``BaseChatModel._generate_with_cache`` / ``_agenerate_with_cache``: every ``invoke`` / ``ainvoke`` /
  ``generate`` of a chat model (streamed or not) reaches the provider client through them, with the run
  manager of the run the handler opened a ``chat`` span for. Around that call the ``chat`` span is made
  current and the framework-model-call key of ``_calls`` is set, so the OpenAI / Anthropic / Ollama
  wrappers open no second span. The attach and its detach sit in the same frame, so nothing leaks.
* ``BaseChatModel.stream`` / ``astream``: the model starts its run inside the first ``next()``, after
  our frame would have attached anything. The wrapper therefore gives the run a known id (``run_id`` in
  the config, unless the caller set one) and, around each step of the stream (``next()`` or
  ``anext()``), sets the key to a marker that is
  true once the handler holds a span for that id: the provider call is skipped exactly when LangChain's
  span stands for it. (The chat span is not made current on this path; nothing of ours nests under it.)
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from tallyspan.plugin import swallowed
from tallyspan_instrumentors._base import Wrapper
from tallyspan_instrumentors._calls import framework_model_call_context
from tallyspan_instrumentors._wrapt import ObjectProxy
from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler

__all__ = ["async_generate_wrapper", "generate_wrapper", "manager_init_wrapper", "stream_wrapper"]

_logger = logging.getLogger(__name__)


def manager_init_wrapper(handler: TallyspanCallbackHandler) -> Wrapper:
    """Wrap ``BaseCallbackManager.__init__`` so every manager carries ``handler``, inheritably."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        result = wrapped(*args, **kwargs)
        try:
            instance.add_handler(handler, inherit=True)
        except Exception:  # a manager we cannot extend still works, untraced
            swallowed(_logger, "langchain.manager", "tallyspan could not add its LangChain callback handler")
        return result

    return wrapper


class _RunSpanMarker:
    """Truthy once the handler holds a span for ``run_id``: read when the provider call starts."""

    __slots__ = ("handler", "run_id")

    def __init__(self, handler: TallyspanCallbackHandler, run_id: uuid.UUID) -> None:
        self.handler = handler
        self.run_id = run_id

    def __bool__(self) -> bool:
        return self.handler.span_of(self.run_id) is not None


def _model_call_context(
    handler: TallyspanCallbackHandler, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """The context for the provider call of a chat run: our span current, provider spans off; or None."""
    try:
        # _generate_with_cache(self, messages, stop=None, run_manager=None, **kwargs)
        run_manager = kwargs.get("run_manager", args[2] if len(args) > 2 else None)
        run_id = getattr(run_manager, "run_id", None)
        span = handler.span_of(run_id) if isinstance(run_id, uuid.UUID) else None
        if span is None:
            return None
        return framework_model_call_context(True, trace.set_span_in_context(span))
    except Exception:  # the call then runs as if we were not here (a provider span may appear)
        swallowed(
            _logger, "langchain.model_context", "tallyspan could not find the span of a LangChain model call"
        )
        return None


class _Attached:
    """``context`` current inside the block (nothing changes for None): attached and detached in one frame."""

    __slots__ = ("context", "token")

    def __init__(self, context: otel_context.Context | None) -> None:
        self.context = context
        self.token: object = None

    def __enter__(self) -> None:
        if self.context is not None:
            self.token = otel_context.attach(self.context)

    def __exit__(self, *exc_info: object) -> None:
        if self.token is not None:
            otel_context.detach(self.token)  # type: ignore[arg-type]  # the token attach() gave


def generate_wrapper(handler: TallyspanCallbackHandler) -> Wrapper:
    """Wrap ``BaseChatModel._generate_with_cache``: the chat span is current around the provider call."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        with _Attached(_model_call_context(handler, args, kwargs)):
            return wrapped(*args, **kwargs)

    return wrapper


def async_generate_wrapper(handler: TallyspanCallbackHandler) -> Wrapper:
    """Wrap ``BaseChatModel._agenerate_with_cache``, the async twin of :func:`generate_wrapper`."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        async def run() -> Any:
            with _Attached(_model_call_context(handler, args, kwargs)):
                return await wrapped(*args, **kwargs)

        return run()

    return wrapper


def _with_run_id(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], uuid.UUID]:
    """``stream(input, config=None, ...)`` arguments with a run id in the config (the caller's if set)."""
    positional_config = len(args) > 1
    config = args[1] if positional_config else kwargs.get("config")
    config = dict(config) if isinstance(config, Mapping) else {}
    run_id = config.get("run_id")
    if not isinstance(run_id, uuid.UUID):
        run_id = uuid.uuid4()
        config["run_id"] = run_id
    if positional_config:
        args = (args[0], config, *args[2:])
    else:
        kwargs = {**kwargs, "config": config}
    return args, kwargs, run_id


def stream_wrapper(handler: TallyspanCallbackHandler) -> Wrapper:
    """Wrap ``BaseChatModel.stream`` / ``astream``: provider spans are skipped while LangChain's chat span stands."""

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if not handler.enabled:
            return wrapped(*args, **kwargs)
        try:
            args, kwargs, run_id = _with_run_id(args, kwargs)
            context = framework_model_call_context(_RunSpanMarker(handler, run_id))
        except Exception:  # unusual arguments: stream untouched
            swallowed(_logger, "langchain.stream", "tallyspan could not prepare a LangChain stream")
            return wrapped(*args, **kwargs)
        return _MarkedStream(wrapped(*args, **kwargs), context)

    return wrapper


class _MarkedStream(ObjectProxy):
    """A chat model's stream (sync or async) whose every step runs in the marked context."""

    def __init__(self, stream: Any, context: otel_context.Context) -> None:
        super().__init__(stream)
        self._self_context = context

    def __iter__(self) -> _MarkedStream:
        return self

    def __next__(self) -> Any:
        with _Attached(self._self_context):
            return next(self.__wrapped__)

    def __aiter__(self) -> _MarkedStream:
        return self

    async def __anext__(self) -> Any:
        with _Attached(self._self_context):
            return await self.__wrapped__.__anext__()
