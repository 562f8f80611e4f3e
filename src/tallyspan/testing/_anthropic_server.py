"""A local server speaking the Anthropic Messages API (JSON and server-sent events), for tests.

Usage::

    import anthropic
    from tallyspan.testing import AnthropicReply, AnthropicServer, ScriptedToolCall

    with AnthropicServer(replies=[AnthropicReply(text="こんにちは", reasoning="thinking...")]) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="test-key", max_retries=0)
        client.messages.create(model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "hi"}])

It answers ``POST /v1/messages`` with the body the ``anthropic`` package parses: ``thinking``, ``text``
and ``tool_use`` content blocks, ``stop_reason``, usage with the cache counters; with ``stream: true``,
the real event sequence (``message_start``, ``content_block_start``, ``ping``, ``content_block_delta``
with ``thinking_delta``/``signature_delta``/``text_delta``/``input_json_delta``, ``content_block_stop``,
``message_delta`` with the stop reason and usage, ``message_stop``). Errors use Anthropic's error body.
A plain :class:`~tallyspan.testing.ScriptedReply` works too; :class:`AnthropicReply` adds what only
Anthropic has.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tallyspan.testing._scripted_http import RecordedRequest, ScriptedReply, ScriptedServer
from tallyspan.testing._wire import arguments_object, estimate_tokens, pieces, reply_model, sse_event

__all__ = ["AnthropicReply", "AnthropicServer"]

#: Anthropic's error ``type`` for each HTTP status it documents.
_ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class AnthropicReply(ScriptedReply):
    """A :class:`ScriptedReply` with what only Anthropic has.

    ``reasoning`` becomes a ``thinking`` block, ``cached_tokens`` ``cache_read_input_tokens``,
    ``prompt_tokens`` the (uncached) ``input_tokens``, ``finish_reason`` the ``stop_reason``
    (default ``tool_use`` with tool calls, else ``end_turn``).
    """

    cache_creation_tokens: int = 0
    """Sent as ``cache_creation_input_tokens``."""
    stop_sequence: str | None = None
    stream_error_after: int | None = None
    """Streams only: after this many events, send an ``error`` event (overloaded) and end the stream."""


class AnthropicServer(ScriptedServer):
    """A scripted Anthropic Messages API on 127.0.0.1, started by ``with`` or :meth:`start`.

    Takes the arguments of :class:`~tallyspan.testing.OpenAICompatibleServer`; ``base_url``
    (``http://127.0.0.1:PORT``) is the ``base_url`` for ``anthropic.Anthropic``.
    """

    _thread_name = "tallyspan-anthropic-server"
    _default_reply = AnthropicReply(text="ok")

    def _serves(self, route: str) -> bool:
        return route == "/v1/messages"

    def _headers(self, *, chunked: bool) -> dict[str, str]:
        return {"request-id": f"req_{self._next_number('request'):024d}"}

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _body(self, request: RecordedRequest, reply: ScriptedReply) -> Any:
        return _message(self, request, reply)

    def _events(self, request: RecordedRequest, reply: ScriptedReply) -> Iterable[bytes]:
        events = _stream_events(_message(self, request, reply), reply)
        return (sse_event(json.dumps(data, ensure_ascii=False), name) for name, data in events)


def _message(server: AnthropicServer, request: RecordedRequest, reply: ScriptedReply) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "c2lnbmF0dXJl"})
    if reply.text or not reply.tool_calls:
        content.append({"type": "text", "text": reply.text, "citations": None})
    for call in reply.tool_calls:
        content.append(
            {
                "type": "tool_use",
                "id": call.call_id or f"toolu_{server._next_number('tool'):022d}",
                "name": call.name,
                "input": arguments_object(call),
            }
        )
    stop_reason = reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return {
        "id": f"msg_{server._next_number('message'):024d}",
        "type": "message",
        "role": "assistant",
        "model": reply_model(request, reply),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": getattr(reply, "stop_sequence", None),
        "usage": _usage(request, reply, content),
    }


def _usage(request: RecordedRequest, reply: ScriptedReply, content: list[dict[str, Any]]) -> dict[str, Any]:
    input_tokens = reply.prompt_tokens
    if input_tokens is None:
        prompt = json.dumps([request.body.get("system"), request.body.get("messages")], ensure_ascii=False)
        input_tokens = estimate_tokens(prompt)
    output_tokens = reply.completion_tokens
    if output_tokens is None:
        output_tokens = estimate_tokens(json.dumps(content, ensure_ascii=False)) + reply.reasoning_tokens
    creation = int(getattr(reply, "cache_creation_tokens", 0))
    usage: dict[str, Any] = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": reply.cached_tokens,
        "cache_creation": {"ephemeral_5m_input_tokens": creation, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "server_tool_use": None,
        "service_tier": "standard",
    }
    if reply.reasoning_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": reply.reasoning_tokens}
    return usage


def _stream_events(message: Mapping[str, Any], reply: ScriptedReply) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stream of ``message``, as the API sends it; an error event cuts it where the reply says."""
    error_after = getattr(reply, "stream_error_after", None)
    for sent, event in enumerate(_message_events(message)):
        if error_after is not None and sent >= error_after:
            yield "error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return
        yield event


def _message_events(message: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    usage = message["usage"]
    start_usage = {key: value for key, value in usage.items() if key != "output_tokens_details"}
    start_usage["output_tokens"] = 1
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                **message,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
    )
    for index, block in enumerate(message["content"]):
        for event in _block_events(index, block):
            yield event
            if index == 0 and event[0] == "content_block_start":
                yield "ping", {"type": "ping"}  # where the API sends its first ping
    delta_usage = {
        key: usage[key]
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    }
    if "output_tokens_details" in usage:
        delta_usage["output_tokens_details"] = usage["output_tokens_details"]
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
            "usage": delta_usage,
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _block_events(index: int, block: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = block["type"]
    if kind == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in pieces(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        arguments = json.dumps(block["input"], ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces(arguments)]
    else:
        start = {"type": "text", "text": "", "citations": None}
        deltas = [{"type": "text_delta", "text": piece} for piece in pieces(block["text"])]
    yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}
