"""A local server speaking the Ollama API (``/api/chat``, ``/api/generate``; JSON and NDJSON), for tests.

Usage::

    import ollama
    from tallyspan.testing import OllamaReply, OllamaServer

    with OllamaServer(replies=[OllamaReply(text="こんにちは")]) as server:
        client = ollama.Client(host=server.base_url)
        client.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}])

Answers carry what the ``ollama`` package parses: ``message`` (``content``, ``thinking``,
``tool_calls`` with object arguments) or ``response``/``thinking`` for generate, ``done``,
``done_reason``, ``prompt_eval_count``/``eval_count`` and the durations. With ``stream: true`` the
body is newline-delimited JSON: thinking pieces, content pieces, the tool calls in one part, then a
final ``done`` part with the counts. Errors are ``{"error": "..."}`` bodies, or an error line mid-stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tallyspan.testing._scripted_http import RecordedRequest, ScriptedReply, ScriptedServer
from tallyspan.testing._wire import arguments_object, estimate_tokens, pieces, reply_model

__all__ = ["OllamaReply", "OllamaServer"]


@dataclass(frozen=True)
class OllamaReply(ScriptedReply):
    """A :class:`ScriptedReply` with what only Ollama has.

    ``reasoning`` becomes ``thinking``, ``finish_reason`` the ``done_reason`` (default ``stop``),
    ``prompt_tokens``/``completion_tokens`` ``prompt_eval_count``/``eval_count``.
    """

    stream_error_after: int | None = None
    """Streams only: after this many parts, send an ``{"error": ...}`` line and end the stream."""
    error_message: str = "scripted error"


class OllamaServer(ScriptedServer):
    """A scripted Ollama server on 127.0.0.1, started by ``with`` or :meth:`start`.

    Takes the arguments of :class:`~tallyspan.testing.OpenAICompatibleServer`; ``base_url``
    (``http://127.0.0.1:PORT``) is the ``host`` for ``ollama.Client``.
    """

    _thread_name = "tallyspan-ollama-server"
    _stream_type = "application/x-ndjson"
    _default_reply = OllamaReply(text="ok")

    def _serves(self, route: str) -> bool:
        return route in ("/api/chat", "/api/generate")

    def _streams(self, request: RecordedRequest) -> bool:
        return request.body.get("stream", True) is not False  # Ollama streams unless told not to

    def _error_message(self, reply: ScriptedReply) -> str:
        return f"{getattr(reply, 'error_message', 'scripted error')} {reply.status}"

    def _body(self, request: RecordedRequest, reply: ScriptedReply) -> Any:
        return _merged(_parts(request, reply), chat=request.route == "/api/chat")

    def _events(self, request: RecordedRequest, reply: ScriptedReply) -> Iterable[bytes]:
        parts = _with_error(_parts(request, reply), reply)
        return (json.dumps(part, ensure_ascii=False).encode() + b"\n" for part in parts)


def _created_at() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def _final_fields(request: RecordedRequest, reply: ScriptedReply, prompt: Any) -> dict[str, Any]:
    prompt_count = reply.prompt_tokens
    if prompt_count is None:
        prompt_count = estimate_tokens(json.dumps(prompt, ensure_ascii=False))
    eval_count = reply.completion_tokens
    if eval_count is None:
        arguments = "".join(call.arguments_text for call in reply.tool_calls)
        eval_count = estimate_tokens(reply.text + reply.reasoning + arguments)
    return {
        "done": True,
        "done_reason": reply.finish_reason or "stop",
        "total_duration": 5_000_000,
        "load_duration": 1_000_000,
        "prompt_eval_count": prompt_count,
        "prompt_eval_duration": 1_000_000,
        "eval_count": eval_count,
        "eval_duration": 3_000_000,
    }


def _tool_calls(reply: ScriptedReply) -> list[dict[str, Any]]:
    calls = []
    for index, call in enumerate(reply.tool_calls):
        function = {"index": index, "name": call.name, "arguments": arguments_object(call)}
        entry: dict[str, Any] = {"function": function}
        if call.call_id is not None:
            entry["id"] = call.call_id
        calls.append(entry)
    return calls


def _parts(request: RecordedRequest, reply: ScriptedReply) -> list[dict[str, Any]]:
    return _chat_parts(request, reply) if request.route == "/api/chat" else _generate_parts(request, reply)


def _chat_parts(request: RecordedRequest, reply: ScriptedReply) -> list[dict[str, Any]]:
    head = {"model": reply_model(request, reply), "created_at": _created_at()}
    parts: list[dict[str, Any]] = []
    for piece in pieces(reply.reasoning):
        parts.append(
            {**head, "message": {"role": "assistant", "content": "", "thinking": piece}, "done": False}
        )
    for piece in pieces(reply.text):
        parts.append({**head, "message": {"role": "assistant", "content": piece}, "done": False})
    if reply.tool_calls:
        message = {"role": "assistant", "content": "", "tool_calls": _tool_calls(reply)}
        parts.append({**head, "message": message, "done": False})
    final = _final_fields(request, reply, request.body.get("messages"))
    parts.append({**head, "message": {"role": "assistant", "content": ""}, **final})
    return parts


def _generate_parts(request: RecordedRequest, reply: ScriptedReply) -> list[dict[str, Any]]:
    head = {"model": reply_model(request, reply), "created_at": _created_at()}
    parts: list[dict[str, Any]] = []
    for piece in pieces(reply.reasoning):
        parts.append({**head, "response": "", "thinking": piece, "done": False})
    for piece in pieces(reply.text):
        parts.append({**head, "response": piece, "done": False})
    final = _final_fields(request, reply, [request.body.get("system"), request.body.get("prompt")])
    parts.append({**head, "response": "", **final, "context": [1, 2, 3]})
    return parts


def _merged(parts: Sequence[Mapping[str, Any]], *, chat: bool) -> dict[str, Any]:
    """The non-streaming body: the final part with the pieces joined, as Ollama answers."""
    final = dict(parts[-1])
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        thinking = ""
        for part in parts:
            piece = part["message"]
            message["content"] += piece.get("content", "")
            thinking += piece.get("thinking", "")
            if "tool_calls" in piece:
                message["tool_calls"] = piece["tool_calls"]
        if thinking:
            message["thinking"] = thinking
        final["message"] = message
    else:
        final["response"] = "".join(part.get("response", "") for part in parts)
        thinking = "".join(part.get("thinking", "") for part in parts)
        if thinking:
            final["thinking"] = thinking
    return final


def _with_error(parts: Sequence[dict[str, Any]], reply: ScriptedReply) -> Iterator[dict[str, Any]]:
    error_after = getattr(reply, "stream_error_after", None)
    for sent, part in enumerate(parts):
        if error_after is not None and sent >= error_after:
            yield {"error": getattr(reply, "error_message", "scripted error")}
            return
        yield part
