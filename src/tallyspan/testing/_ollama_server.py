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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tallyspan.testing._openai_server import RecordedRequest, ScriptedReply
from tallyspan.testing._scripted_http import ScriptedServer, _Handler, estimate_tokens, pieces

__all__ = ["OllamaReply", "OllamaServer"]

_NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class OllamaReply(ScriptedReply):
    """A :class:`ScriptedReply` with what only Ollama has.

    ``reasoning`` becomes ``thinking``, ``finish_reason`` the ``done_reason`` (default ``stop``),
    ``prompt_tokens``/``completion_tokens`` ``prompt_eval_count``/``eval_count``.
    """

    stream_error_after: int | None = None
    """Streams only: after this many parts, send an ``{"error": ...}`` line and end the stream."""
    error_message: str = "scripted error"


class OllamaServer(ScriptedServer[ScriptedReply]):
    """A scripted Ollama server on 127.0.0.1, started by ``with`` or :meth:`start`.

    Args:
        replies: replies to send, in order; when they run out, ``default_reply`` is sent.
        handler: instead of a queue, a function choosing the reply for each request.
        default_reply: the reply once the queue is empty (text ``"ok"``).
    """

    _thread_name = "tallyspan-ollama-server"

    def __init__(
        self,
        replies: Sequence[ScriptedReply] = (),
        *,
        handler: Callable[[RecordedRequest], ScriptedReply] | None = None,
        default_reply: ScriptedReply | None = None,
    ) -> None:
        super().__init__(replies, handler=handler, default_reply=default_reply or OllamaReply(text="ok"))

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, the ``host`` for ``ollama.Client``."""
        return f"http://127.0.0.1:{self.port}"

    def _answer(self, handler: _Handler, request: RecordedRequest, reply: ScriptedReply) -> None:
        path = request.path.split("?", 1)[0].rstrip("/")
        streaming = request.body.get("stream", True) is not False  # Ollama streams unless told not to
        if reply.raw_body is not None:
            if streaming:
                handler.send_chunked(200, _NDJSON, [reply.raw_body.encode()])
            else:
                handler.send_body(reply.status, reply.raw_body.encode(), "application/json")
            return
        if path not in ("/api/chat", "/api/generate"):
            handler.send_json(404, {"error": f"no route for POST {request.path}"})
            return
        if reply.status != 200:
            message = getattr(reply, "error_message", "scripted error")
            handler.send_json(reply.status, {"error": f"{message} {reply.status}"})
            return
        parts = _chat_parts(request, reply) if path == "/api/chat" else _generate_parts(request, reply)
        if not streaming:
            handler.send_json(200, _merged(parts, chat=path == "/api/chat"))
            return
        handler.send_chunked(
            200,
            _NDJSON,
            (json.dumps(part, ensure_ascii=False).encode() + b"\n" for part in _with_error(parts, reply)),
            abort_after=reply.abort_after_chunks,
        )


def _created_at() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def _model(request: RecordedRequest, reply: ScriptedReply) -> str:
    return reply.model if reply.model is not None else str(request.body.get("model", "unknown-model"))


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
        arguments = json.loads(call.arguments_text) if call.arguments_text.strip() else {}
        entry: dict[str, Any] = {"function": {"index": index, "name": call.name, "arguments": arguments}}
        if call.call_id is not None:
            entry["id"] = call.call_id
        calls.append(entry)
    return calls


def _chat_parts(request: RecordedRequest, reply: ScriptedReply) -> list[dict[str, Any]]:
    head = {"model": _model(request, reply), "created_at": _created_at()}
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
    head = {"model": _model(request, reply), "created_at": _created_at()}
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
