"""Test doubles shipped with tallyspan: a local OpenAI-compatible server that replays scripted replies.

Usage::

    import openai
    from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

    with OpenAICompatibleServer(replies=[ScriptedReply(text="こんにちは")]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        server.requests[0].body["model"]   # "m"

The server speaks the real wire formats (chat completions and Responses, JSON and server-sent events;
embeddings) on 127.0.0.1, with the standard library only, so it needs no extra dependency.
"""

from tallyspan.testing._anthropic_server import AnthropicReply, AnthropicServer
from tallyspan.testing._ollama_server import OllamaReply, OllamaServer
from tallyspan.testing._openai_server import (
    OpenAICompatibleServer,
    RecordedRequest,
    ReplyHandler,
    ScriptedReply,
    ScriptedToolCall,
)

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
