"""The wire formats of the OpenAI-compatible test server: JSON bodies and server-sent events.

Shapes follow the ``openai`` package's own types (``openai.types.chat``, ``openai.types.responses``), so the
real client, including its ``.stream()`` helpers, parses everything the server sends.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import time
from collections.abc import Iterator, Mapping
from typing import Any

from tallyspan.testing._scripted_http import RecordedRequest, ScriptedReply, ScriptedServer
from tallyspan.testing._wire import estimate_tokens, pieces, reply_model

__all__ = [
    "chat_body",
    "chat_events",
    "embeddings_body",
    "error_body",
    "new_response_id",
    "response_object",
    "responses_events",
]


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _prompt_text(body: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for key in ("messages", "input", "instructions"):
        value = body.get(key)
        if value is not None:
            parts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return "".join(parts)


def _usage_numbers(request: RecordedRequest, reply: ScriptedReply) -> tuple[int, int]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = estimate_tokens(_prompt_text(request.body))
    completion = reply.completion_tokens
    if completion is None:
        arguments = "".join(call.arguments_text for call in reply.tool_calls)
        completion = estimate_tokens(reply.text + reply.reasoning + arguments) + reply.reasoning_tokens
    return prompt, completion


def _finish_reason(reply: ScriptedReply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def _call_ids(owner: ScriptedServer, reply: ScriptedReply) -> list[str]:
    return [call.call_id or f"call_{owner._next_number('call')}" for call in reply.tool_calls]


def _chat_usage(request: RecordedRequest, reply: ScriptedReply) -> dict[str, Any]:
    prompt, completion = _usage_numbers(request, reply)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens, "audio_tokens": 0},
    }


def chat_body(owner: ScriptedServer, request: RecordedRequest, reply: ScriptedReply) -> dict[str, Any]:
    choice_count = request.body.get("n") or 1
    choices = []
    for index in range(int(choice_count)):
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text},
                }
                for call, call_id in zip(reply.tool_calls, _call_ids(owner, reply), strict=True)
            ]
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        choices.append(
            {"index": index, "message": message, "finish_reason": _finish_reason(reply), "logprobs": None}
        )
    return {
        "id": f"chatcmpl-{owner._next_number('chat')}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply_model(request, reply),
        "system_fingerprint": "fp_tallyspan",
        "service_tier": "default",
        "choices": choices,
        "usage": _chat_usage(request, reply),
    }


def chat_events(owner: ScriptedServer, request: RecordedRequest, reply: ScriptedReply) -> Iterator[str]:
    completion_id = f"chatcmpl-{owner._next_number('chat')}"
    created = int(time.time())
    model = reply_model(request, reply)
    options = request.body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        payload: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_tallyspan",
            "service_tier": "default",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }
        if include_usage:
            payload["usage"] = None
        return json.dumps(payload, ensure_ascii=False)

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in pieces(reply.reasoning):
        yield chunk({"reasoning_content": piece})
    for piece in pieces(reply.text):
        yield chunk({"content": piece})
    for index, (call, call_id) in enumerate(zip(reply.tool_calls, _call_ids(owner, reply), strict=True)):
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield chunk({"tool_calls": [opening]})
        for piece in pieces(call.arguments_text):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _finish_reason(reply))
    if include_usage:
        yield json.dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_tallyspan",
                "choices": [],
                "usage": _chat_usage(request, reply),
            }
        )


# --- Responses API ---------------------------------------------------------------------------------


def new_response_id(owner: ScriptedServer) -> str:
    return f"resp_{owner._next_number('response')}"


def _response_output(owner: ScriptedServer, reply: ScriptedReply, response_id: str) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if reply.reasoning:
        output.append(
            {
                "id": f"rs_{response_id}",
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reply.reasoning}],
                "status": "completed",
            }
        )
    if reply.text:
        output.append(_message_item(response_id, reply.text, "completed"))
    for index, (call, call_id) in enumerate(zip(reply.tool_calls, _call_ids(owner, reply), strict=True)):
        output.append(
            _function_call_item(response_id, index, call.name, call_id, call.arguments_text, "completed")
        )
    return output


def _message_item(response_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = (
        [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    )
    return {
        "id": f"msg_{response_id}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _function_call_item(
    response_id: str, index: int, name: str, call_id: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "id": f"fc_{response_id}_{index}",
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_object(
    owner: ScriptedServer,
    request: RecordedRequest,
    reply: ScriptedReply,
    response_id: str,
    *,
    output: list[dict[str, Any]] | None = None,
    status: str | None = None,
    with_usage: bool = True,
) -> dict[str, Any]:
    reason = _finish_reason(reply)
    final_status = "incomplete" if reason == "length" else "completed"
    incomplete = {"reason": "max_output_tokens"} if final_status == "incomplete" and status is None else None
    prompt, completion = _usage_numbers(request, reply)
    body: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status or final_status,
        "model": reply_model(request, reply),
        "output": output if output is not None else _response_output(owner, reply, response_id),
        "parallel_tool_calls": True,
        "tool_choice": request.body.get("tool_choice", "auto"),
        "tools": request.body.get("tools", []),
        "temperature": request.body.get("temperature"),
        "top_p": request.body.get("top_p"),
        "max_output_tokens": request.body.get("max_output_tokens"),
        "instructions": request.body.get("instructions"),
        "service_tier": "default",
        "error": None,
        "incomplete_details": incomplete,
        "usage": None,
    }
    if with_usage:
        body["usage"] = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            "total_tokens": prompt + completion,
        }
    return body


def responses_events(owner: ScriptedServer, request: RecordedRequest, reply: ScriptedReply) -> Iterator[str]:
    response_id = new_response_id(owner)
    sequence = itertools.count(0)

    def event(kind: str, **fields: Any) -> str:
        return json.dumps({"type": kind, "sequence_number": next(sequence), **fields}, ensure_ascii=False)

    pending = response_object(
        owner, request, reply, response_id, output=[], status="in_progress", with_usage=False
    )
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    final_output = _response_output(owner, reply, response_id)
    for output_index, item in enumerate(final_output):
        if item["type"] == "reasoning":
            yield event(
                "response.output_item.added",
                output_index=output_index,
                item={**item, "status": "in_progress"},
            )
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added",
                output_index=output_index,
                item=_message_item(response_id, None, "in_progress"),
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
            yield event("response.content_part.added", part=part, **where)
            for piece in pieces(text):
                yield event("response.output_text.delta", delta=piece, logprobs=[], **where)
            yield event("response.output_text.done", text=text, logprobs=[], **where)
            yield event("response.content_part.done", part=item["content"][0], **where)
        else:
            added = {**item, "arguments": "", "status": "in_progress"}
            yield event("response.output_item.added", output_index=output_index, item=added)
            where = {"item_id": item["id"], "output_index": output_index}
            for piece in pieces(item["arguments"]):
                yield event("response.function_call_arguments.delta", delta=piece, **where)
            yield event(
                "response.function_call_arguments.done",
                arguments=item["arguments"],
                name=item["name"],
                **where,
            )
        yield event("response.output_item.done", output_index=output_index, item=item)
    final = response_object(owner, request, reply, response_id, output=final_output)
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    yield event(kind, response=final)


# --- embeddings --------------------------------------------------------------------------------------


def embeddings_body(request: RecordedRequest, reply: ScriptedReply) -> dict[str, Any]:
    raw_input = request.body.get("input", "")
    inputs = raw_input if isinstance(raw_input, list) else [raw_input]
    dimensions = int(request.body.get("dimensions") or 8)
    as_base64 = request.body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        seed = sum(ord(ch) for ch in str(item)) + index
        vector = [((seed * (k + 1)) % 97) / 97.0 for k in range(dimensions)]
        embedding: Any = (
            base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode() if as_base64 else vector
        )
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    prompt = (
        reply.prompt_tokens
        if reply.prompt_tokens is not None
        else estimate_tokens("".join(str(item) for item in inputs))
    )
    return {
        "object": "list",
        "data": data,
        "model": reply_model(request, reply),
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }
