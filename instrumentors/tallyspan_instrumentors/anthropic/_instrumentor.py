"""``AnthropicInstrumentor``: Messages ``create``, ``parse`` and ``stream``, sync and async, in one table."""

from __future__ import annotations

from typing import Final

from tallyspan_instrumentors._base import TallyspanInstrumentor, WrapEntry, WrapperState
from tallyspan_instrumentors.anthropic._wrappers import (
    create,
    create_async,
    native_span,
    stream,
    stream_async,
)

__all__ = ["AnthropicInstrumentor"]

_MODULE = "anthropic.resources.messages.messages"
_BETA_MODULE = "anthropic.resources.beta.messages.messages"

#: (module, "Class.method", wrapper factory): what instrument() wraps and uninstrument() unwraps.
_WRAPPED: Final[tuple[WrapEntry[WrapperState], ...]] = (
    (_MODULE, "Messages.create", create),
    (_MODULE, "Messages.parse", create),
    (_MODULE, "Messages.stream", stream),
    (_MODULE, "AsyncMessages.create", create_async),
    (_MODULE, "AsyncMessages.parse", create_async),
    (_MODULE, "AsyncMessages.stream", stream_async),
    # The beta surface (client.beta.messages) has the same methods, objects and stream events.
    (_BETA_MODULE, "Messages.create", create),
    (_BETA_MODULE, "Messages.parse", create),
    (_BETA_MODULE, "Messages.stream", stream),
    (_BETA_MODULE, "AsyncMessages.create", create_async),
    (_BETA_MODULE, "AsyncMessages.parse", create_async),
    (_BETA_MODULE, "AsyncMessages.stream", stream_async),
    # Only where the installed SDK has it (its own tracing arrived in 2.x).
    ("anthropic._base_client", "start_api_call_span", native_span),
)


class AnthropicInstrumentor(TallyspanInstrumentor[WrapperState]):
    """Traces Anthropic Messages calls as GenAI ``chat {model}`` spans.

    Keyword arguments of :meth:`instrument`: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (default: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
    The SDK's own call span (``anthropic.messages.create``) is not made inside ours, so each call
    appears once; the SDK's other spans are left alone.
    """

    _instruments = ("anthropic >= 0.41",)
    _wrapped = _WRAPPED
    _state_type = WrapperState
