"""The Ollama wrappers: ``chat`` (``chat {model}``) and ``generate`` (``text_completion {model}``).

``stream=True`` returns a generator (sync) or an async generator (async) of parts; it is wrapped in
a proxy that ends the span once: exhausted, failed, closed (``close()`` / ``aclose()``) or collected.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from tallyspan import semconv
from tallyspan_instrumentors._base import Wrapper, WrapperState
from tallyspan_instrumentors._calls import GenAICall, model_call_wrapper, start_genai_call
from tallyspan_instrumentors._streams import AsyncGeneratorProxy, SyncGeneratorProxy
from tallyspan_instrumentors.ollama._extract import (
    OllamaReply,
    PartAccumulator,
    call_arguments,
    reply_extraction,
    request_attributes,
    request_content,
)

__all__ = ["call"]


def call(*, chat: bool, is_async: bool = False) -> Callable[[WrapperState], Wrapper]:
    """The wrapper factory of a client's ``chat`` (``chat=True``) or ``generate`` method."""
    return model_call_wrapper(functools.partial(_start, chat), _finish, is_async=is_async)


def _start(
    chat: bool, state: WrapperState, instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> GenAICall:
    arguments = call_arguments(args, kwargs, chat=chat)
    prompt, content_attributes = request_content(arguments, chat=chat, capture=state.capture_content)
    operation = semconv.OPERATION_CHAT if chat else semconv.OPERATION_TEXT_COMPLETION
    model = arguments.get("model")
    return start_genai_call(
        state.tracer,
        operation=operation,
        model=model if isinstance(model, str) and model else None,
        attributes=request_attributes(instance, arguments, operation=operation),
        capture_content=state.capture_content,
        prompt=prompt,
        content_attributes=content_attributes,
    )


def _finish(call: GenAICall, result: Any, kwargs: Mapping[str, Any]) -> Any:
    # A generator (sync) or async generator of parts when streaming, else one response object.
    if hasattr(result, "__anext__"):
        return AsyncGeneratorProxy(result, call, PartAccumulator())
    if hasattr(result, "__next__"):
        return SyncGeneratorProxy(result, call, PartAccumulator())
    reply = OllamaReply()
    reply.add(result)
    call.finish(reply_extraction(call, reply))
    return result
