"""Reading Anthropic Messages requests, responses and stream events into GenAI attributes and content.

Nothing here trusts the shape of what it reads: SDK objects and plain dicts are both accepted, and
anything unexpected is skipped rather than raised (the callers guard us anyway).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.plugin import ModelContent, ToolCallContent
from tallyspan_instrumentors._calls import Extraction, GenAICall
from tallyspan_instrumentors._parts import (
    field_of,
    given,
    int_or_none,
    messages_json,
    output_message,
    reasoning_part,
    server_attributes,
    str_or_none,
    text_part,
    tool_call_part,
    tool_call_response_part,
)

__all__ = [
    "AnthropicReply",
    "EventAccumulator",
    "extraction_of_message",
    "request_attributes",
    "request_content",
]


#: Anthropic stop reasons mapped to the output-message finish_reason values of the GenAI conventions.
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_call",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


# --- request -----------------------------------------------------------------------------------------


def request_attributes(
    resource: Any, kwargs: Mapping[str, Any], *, stream: bool
) -> dict[str, AttributeValue]:
    """The request's span attributes: operation, provider, model, parameters, server."""
    attributes: dict[str, AttributeValue] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
        semconv.GEN_AI_PROVIDER_NAME: semconv.PROVIDER_ANTHROPIC,
    }
    model = kwargs.get("model")
    if isinstance(model, str):
        attributes[semconv.GEN_AI_REQUEST_MODEL] = model
    # Recent SDKs dropped the sampling keywords; apps still send them through extra_body.
    extra_body = kwargs.get("extra_body")
    extra = extra_body if isinstance(extra_body, Mapping) else {}
    for key, name in (
        (semconv.GEN_AI_REQUEST_MAX_TOKENS, "max_tokens"),
        (semconv.GEN_AI_REQUEST_TEMPERATURE, "temperature"),
        (semconv.GEN_AI_REQUEST_TOP_P, "top_p"),
        (semconv.GEN_AI_REQUEST_TOP_K, "top_k"),
    ):
        value = kwargs.get(name, extra.get(name))
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[key] = value
    stop = kwargs.get("stop_sequences")
    if isinstance(stop, list | tuple) and stop and all(isinstance(item, str) for item in stop):
        attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stop)
    if stream:
        attributes[semconv.GEN_AI_REQUEST_STREAM] = True
    attributes.update(server_attributes(resource))
    return attributes


def request_content(kwargs: Mapping[str, Any], *, capture: bool) -> tuple[str | None, dict[str, str]]:
    """The prompt for the checks (the last user text) and, when ``capture``, the content attributes."""
    messages = kwargs.get("messages")
    messages = list(messages) if isinstance(messages, Iterable) and not isinstance(messages, str) else []
    prompt = _last_user_text(messages)
    if not capture:
        return prompt, {}  # converting every message would be paid on each call for nothing
    converted = []
    for message in messages:
        role = field_of(message, "role")
        converted.append(
            {"role": role if isinstance(role, str) else "user", "parts": _parts(field_of(message, "content"))}
        )
    attributes = {semconv.GEN_AI_INPUT_MESSAGES: messages_json(converted)}
    system = kwargs.get("system")
    if given(system):
        system_parts = [part for part in _parts(system) if part["type"] == "text"]
        if system_parts:
            attributes[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = messages_json(system_parts)
    return prompt, attributes


def _last_user_text(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if field_of(message, "role") != "user":
            continue
        text = "".join(
            part["content"] for part in _parts(field_of(message, "content")) if part["type"] == "text"
        )
        if text:
            return text
    return None


def _parts(content: Any) -> list[dict[str, Any]]:
    """Anthropic content (a string or a list of blocks) as GenAI message parts."""
    if isinstance(content, str):
        return [text_part(content)]
    if not isinstance(content, Iterable) or isinstance(content, bytes | Mapping):
        return []
    parts: list[dict[str, Any]] = []
    for block in content:
        kind = field_of(block, "type")
        if kind == "text":
            parts.append(text_part(str(field_of(block, "text") or "")))
        elif kind == "tool_use":
            arguments = json.dumps(field_of(block, "input") or {}, ensure_ascii=False, default=str)
            parts.append(tool_call_part(field_of(block, "id"), str(field_of(block, "name")), arguments))
        elif kind == "tool_result":
            result = field_of(block, "content")
            response = result if isinstance(result, str) else [part.get("content") for part in _parts(result)]
            parts.append(tool_call_response_part(field_of(block, "tool_use_id"), response))
        elif kind == "thinking":
            parts.append(reasoning_part(str(field_of(block, "thinking") or "")))
        elif isinstance(kind, str):
            parts.append({"type": kind})  # images, documents...: the kind without the payload
    return parts


# --- response ----------------------------------------------------------------------------------------


@dataclass
class AnthropicReply:
    """A response message reduced to what the span needs, from a ``Message`` or a stream's events."""

    id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    blocks: list[dict[str, Any]] = field(default_factory=list)
    """``{"type": "text", "text"}``, ``{"type": "thinking", "thinking"}``, ``{"type": "tool_use", ...}``."""


_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _read_usage(usage: Any, into: dict[str, int]) -> None:
    """Copy the counters ``usage`` reports; counters it leaves out keep their earlier values."""
    if usage is None:
        return
    for name in _USAGE_FIELDS:
        value = int_or_none(field_of(usage, name))
        if value is not None:
            into[name] = value
    thinking = int_or_none(field_of(field_of(usage, "output_tokens_details"), "thinking_tokens"))
    if thinking is not None:
        into["thinking_tokens"] = thinking


def reply_of_message(message: Any) -> AnthropicReply:
    """Reduce a ``Message`` (or a dict in its shape)."""
    reply = AnthropicReply(
        id=str_or_none(field_of(message, "id")),
        model=str_or_none(field_of(message, "model")),
        stop_reason=str_or_none(field_of(message, "stop_reason")),
    )
    _read_usage(field_of(message, "usage"), reply.usage)
    for block in field_of(message, "content") or ():
        kind = field_of(block, "type")
        if kind == "text":
            reply.blocks.append({"type": "text", "text": str(field_of(block, "text") or "")})
        elif kind == "thinking":
            reply.blocks.append({"type": "thinking", "thinking": str(field_of(block, "thinking") or "")})
        elif kind == "tool_use":
            arguments = json.dumps(field_of(block, "input") or {}, ensure_ascii=False, default=str)
            reply.blocks.append(
                {
                    "type": "tool_use",
                    "id": str_or_none(field_of(block, "id")),
                    "name": str(field_of(block, "name")),
                    "arguments": arguments,
                }
            )
    return reply


def extraction_of_message(call: GenAICall, message: Any) -> Extraction:
    """The span attributes, checks content and output messages of a non-streamed response."""
    return extraction_of_reply(call, reply_of_message(message))


def extraction_of_reply(call: GenAICall, reply: AnthropicReply) -> Extraction:
    """The span attributes, checks content and output messages of a reduced response."""
    attributes: dict[str, AttributeValue] = {}
    if reply.id:
        attributes[semconv.GEN_AI_RESPONSE_ID] = reply.id
    if reply.model:
        attributes[semconv.GEN_AI_RESPONSE_MODEL] = reply.model
    if reply.stop_reason:
        attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [reply.stop_reason]
    attributes.update(_usage_attributes(reply.usage))
    texts = [block["text"] for block in reply.blocks if block["type"] == "text"]
    thinking = [block["thinking"] for block in reply.blocks if block["type"] == "thinking"]
    tool_calls = tuple(
        ToolCallContent(name=block["name"], arguments=block["arguments"], call_id=block["id"])
        for block in reply.blocks
        if block["type"] == "tool_use"
    )
    content = ModelContent(
        output_text="".join(texts),
        tool_calls=tool_calls,
        prompt=call.prompt,
        reasoning_text="".join(thinking),
    )
    parts: list[dict[str, Any]] = []
    for block in reply.blocks:
        if block["type"] == "text":
            parts.append(text_part(block["text"]))
        elif block["type"] == "thinking":
            parts.append(reasoning_part(block["thinking"]))
        else:
            parts.append(tool_call_part(block["id"], block["name"], block["arguments"]))
    finish = _FINISH_REASONS.get(reply.stop_reason or "", reply.stop_reason)
    return Extraction(attributes=attributes, content=content, output_messages=[output_message(parts, finish)])


def _usage_attributes(usage: Mapping[str, int]) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    cache_read = usage.get("cache_read_input_tokens")
    cache_creation = usage.get("cache_creation_input_tokens")
    if "input_tokens" in usage:
        # The GenAI conventions for Anthropic (anthropic.md): Anthropic's input_tokens exclude the
        # cache, so gen_ai.usage.input_tokens = input_tokens + cache_read + cache_creation.
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = (
            usage["input_tokens"] + (cache_read or 0) + (cache_creation or 0)
        )
    if "output_tokens" in usage:
        attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = usage["output_tokens"]
    if cache_read is not None:
        attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cache_read
    if cache_creation is not None:
        attributes[semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = cache_creation
    if "thinking_tokens" in usage:
        attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = usage["thinking_tokens"]
    return attributes


# --- streams -----------------------------------------------------------------------------------------


class EventAccumulator:
    """Rebuilds the response from raw stream events (``create(stream=True)`` and ``messages.stream``)."""

    def __init__(self) -> None:
        self._reply = AnthropicReply()
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}

    def add(self, event: Any) -> None:
        """Take one raw event."""
        kind = field_of(event, "type")
        if kind == "message_start":
            message = field_of(event, "message")
            self._reply.id = str_or_none(field_of(message, "id"))
            self._reply.model = str_or_none(field_of(message, "model"))
            _read_usage(field_of(message, "usage"), self._reply.usage)
        elif kind == "content_block_start":
            self._start_block(int_or_none(field_of(event, "index")), field_of(event, "content_block"))
        elif kind == "content_block_delta":
            self._delta(int_or_none(field_of(event, "index")), field_of(event, "delta"))
        elif kind == "message_delta":
            stop_reason = field_of(field_of(event, "delta"), "stop_reason")
            if isinstance(stop_reason, str):
                self._reply.stop_reason = stop_reason
            # message_delta counters are cumulative totals: they replace those of message_start.
            _read_usage(field_of(event, "usage"), self._reply.usage)

    def _start_block(self, index: int | None, block: Any) -> None:
        if index is None:
            return
        kind = field_of(block, "type")
        if kind == "text":
            self._blocks[index] = {"type": "text", "text": str(field_of(block, "text") or "")}
        elif kind == "thinking":
            self._blocks[index] = {"type": "thinking", "thinking": str(field_of(block, "thinking") or "")}
        elif kind == "tool_use":
            self._blocks[index] = {
                "type": "tool_use",
                "id": str_or_none(field_of(block, "id")),
                "name": str(field_of(block, "name")),
                "arguments": "",
            }
            self._json[index] = []

    def _delta(self, index: int | None, delta: Any) -> None:
        block = self._blocks.get(index) if index is not None else None
        if block is None or index is None:
            return
        kind = field_of(delta, "type")
        if kind == "text_delta" and block["type"] == "text":
            block["text"] += str(field_of(delta, "text") or "")
        elif kind == "thinking_delta" and block["type"] == "thinking":
            block["thinking"] += str(field_of(delta, "thinking") or "")
        elif kind == "input_json_delta" and block["type"] == "tool_use":
            self._json[index].append(str(field_of(delta, "partial_json") or ""))

    def extraction(self, call: GenAICall) -> Extraction:
        """What the events so far say (also for a stream cut short)."""
        reply = AnthropicReply(
            id=self._reply.id,
            model=self._reply.model,
            stop_reason=self._reply.stop_reason,
            usage=dict(self._reply.usage),
        )
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if block["type"] == "tool_use":
                # The model's argument text as sent; "{}" when it sent none (a tool without input).
                block["arguments"] = "".join(self._json.get(index, ())) or "{}"
            reply.blocks.append(block)
        return extraction_of_reply(call, reply)
