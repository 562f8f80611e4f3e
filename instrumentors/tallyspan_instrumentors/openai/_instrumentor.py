"""``OpenAIInstrumentor``: one table of wrapped SDK methods feeds both instrument and uninstrument."""

from __future__ import annotations

from typing import Final

from tallyspan_instrumentors._base import TallyspanInstrumentor, WrapEntry, WrapperState
from tallyspan_instrumentors.openai._wrappers import (
    CHAT,
    EMBEDDINGS,
    RESPONSES,
    async_helper_close,
    async_manager_exit,
    call,
    helper_close,
    manager_exit,
)

__all__ = ["OpenAIInstrumentor"]

_CHAT_MODULE = "openai.resources.chat"
_RESPONSES_MODULE = "openai.resources.responses"
_EMBEDDINGS_MODULE = "openai.resources.embeddings"
# Older SDKs kept parse() under client.beta.chat.completions (untested here: the pinned SDK has none).
_BETA_CHAT_MODULE = "openai.resources.beta.chat"
_CHAT_HELPERS = "openai.lib.streaming.chat"
_RESPONSE_HELPERS = "openai.lib.streaming.responses"

#: (module, "Class.method", wrapper factory): what instrument() wraps and uninstrument() unwraps.
#: Older SDKs lack some of these (Responses arrived in 1.66); a missing target is skipped.
_WRAPPED: Final[tuple[WrapEntry[WrapperState], ...]] = (
    (_CHAT_MODULE, "Completions.create", call(CHAT)),
    (_CHAT_MODULE, "AsyncCompletions.create", call(CHAT, is_async=True)),
    (_CHAT_MODULE, "Completions.parse", call(CHAT)),
    (_CHAT_MODULE, "AsyncCompletions.parse", call(CHAT, is_async=True)),
    (_BETA_CHAT_MODULE, "Completions.parse", call(CHAT)),
    (_BETA_CHAT_MODULE, "AsyncCompletions.parse", call(CHAT, is_async=True)),
    (_RESPONSES_MODULE, "Responses.create", call(RESPONSES)),
    (_RESPONSES_MODULE, "AsyncResponses.create", call(RESPONSES, is_async=True)),
    (_RESPONSES_MODULE, "Responses.parse", call(RESPONSES)),
    (_RESPONSES_MODULE, "AsyncResponses.parse", call(RESPONSES, is_async=True)),
    (_EMBEDDINGS_MODULE, "Embeddings.create", call(EMBEDDINGS)),
    (_EMBEDDINGS_MODULE, "AsyncEmbeddings.create", call(EMBEDDINGS, is_async=True)),
    (_CHAT_HELPERS, "ChatCompletionStream.close", helper_close),
    (_CHAT_HELPERS, "AsyncChatCompletionStream.close", async_helper_close),
    (_RESPONSE_HELPERS, "ResponseStream.close", helper_close),
    (_RESPONSE_HELPERS, "AsyncResponseStream.close", async_helper_close),
    (_CHAT_HELPERS, "ChatCompletionStreamManager.__exit__", manager_exit),
    (_CHAT_HELPERS, "AsyncChatCompletionStreamManager.__aexit__", async_manager_exit),
    (_RESPONSE_HELPERS, "ResponseStreamManager.__exit__", manager_exit),
    (_RESPONSE_HELPERS, "AsyncResponseStreamManager.__aexit__", async_manager_exit),
)


class OpenAIInstrumentor(TallyspanInstrumentor[WrapperState]):
    """Emits a GenAI span per OpenAI chat, Responses and embeddings call.

    ``instrument()`` keyword arguments: ``tracer_provider`` (default: the global one) and
    ``capture_content`` (export message content as span attributes; default: the
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` environment variable, else off).
    """

    _instruments = ("openai >= 1.55.3",)
    _wrapped = _WRAPPED
    _state_type = WrapperState
