"""A local OpenAI-compatible HTTP server that replays scripted replies, for tests and the demo.

It speaks the wire format the ``openai`` package parses (chat completions, Responses and embeddings,
JSON and server-sent events), on 127.0.0.1, with the standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tallyspan.testing._openai_wire import (
    chat_body,
    chat_events,
    embeddings_body,
    error_body,
    new_response_id,
    response_object,
    responses_events,
)
from tallyspan.testing._scripted_http import RecordedRequest, ScriptedReply, ScriptedServer
from tallyspan.testing._wire import sse_event

__all__ = ["OpenAICompatibleServer"]

_ROUTES = ("/chat/completions", "/responses", "/embeddings")


class OpenAICompatibleServer(ScriptedServer):
    """A scripted OpenAI-compatible server on 127.0.0.1, started by ``with`` or :meth:`start`.

    Args:
        replies: replies to send, in order; when they run out, ``default_reply`` is sent.
        handler: instead of a queue, a function choosing the reply for each request.
        default_reply: the reply once the queue is empty (default: text ``"ok"``).

    ``base_url`` is ``http://127.0.0.1:PORT/v1``, the ``base_url`` for ``openai.OpenAI``.

    Example::

        with OpenAICompatibleServer(replies=[ScriptedReply(text="hello")]) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="test-key")
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert server.requests[0].body["model"] == "m"
    """

    _thread_name = "tallyspan-openai-server"
    _base_path = "/v1"
    _stream_end = (b"data: [DONE]\n\n",)

    def _serves(self, route: str) -> bool:
        return route.endswith(_ROUTES)

    def _streams(self, request: RecordedRequest) -> bool:
        return request.stream and not request.route.endswith("/embeddings")  # embeddings never stream

    def _headers(self, *, chunked: bool) -> dict[str, str]:
        return {} if chunked else {"x-request-id": f"req_{self._next_number('request')}"}

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        return error_body(status, message)

    def _body(self, request: RecordedRequest, reply: ScriptedReply) -> Any:
        if request.route.endswith("/responses"):
            return response_object(self, request, reply, new_response_id(self))
        if request.route.endswith("/embeddings"):
            return embeddings_body(request, reply)
        return chat_body(self, request, reply)

    def _events(self, request: RecordedRequest, reply: ScriptedReply) -> Iterable[bytes]:
        events = responses_events if request.route.endswith("/responses") else chat_events
        return (sse_event(event) for event in events(self, request, reply))
