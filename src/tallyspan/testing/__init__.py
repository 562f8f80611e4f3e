"""Test doubles shipped with tallyspan: local OpenAI-compatible, Anthropic and Ollama servers that replay
scripted replies.

Usage::

    import openai
    from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

    with OpenAICompatibleServer(replies=[ScriptedReply(text="こんにちは")]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        server.requests[0].body["model"]   # "m"

Each server speaks its provider's real wire format (for OpenAI: chat completions and Responses, JSON and
server-sent events; embeddings) on 127.0.0.1, with the standard library only, so it needs no extra
dependency. :class:`AnthropicServer` and :class:`OllamaServer` take the same :class:`ScriptedReply`
(or their own :class:`AnthropicReply`, :class:`OllamaReply`).
"""

from tallyspan.testing._anthropic_server import AnthropicReply, AnthropicServer
from tallyspan.testing._ollama_server import OllamaReply, OllamaServer
from tallyspan.testing._openai_server import OpenAICompatibleServer
from tallyspan.testing._scripted_http import RecordedRequest, ReplyHandler, ScriptedReply, ScriptedToolCall

__all__ = [
    "AnthropicReply",
    "AnthropicServer",
    "OllamaReply",
    "OllamaServer",
    "OpenAICompatibleServer",
    "RecordedRequest",
    "ReplyHandler",
    "ScriptedReply",
    "ScriptedToolCall",
]

for _cls in (
    AnthropicReply,
    AnthropicServer,
    OllamaReply,
    OllamaServer,
    OpenAICompatibleServer,
    RecordedRequest,
    ScriptedReply,
    ScriptedToolCall,
):
    _cls.__module__ = __name__
del _cls
