"""Reading Ollama ``chat`` / ``generate`` requests and responses into GenAI attributes and content.

Responses arrive as ``ChatResponse`` / ``GenerateResponse`` objects (or, streamed, as a sequence of
parts whose text pieces add up and whose last part, ``done=True``, carries the counts). Both are
reduced to one :class:`OllamaReply`, so the streamed and non-streamed spans are built by the same code.
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
    int_or_none,
    messages_json,
    output_message,
    output_parts,
    server_attributes,
    str_or_none,
    text_part,
    tool_call_part,
    tool_call_response_part,
)

__all__ = ["OllamaReply", "PartAccumulator", "reply_extraction", "request_attributes", "request_content"]


#: Ollama ``options`` keys and the request attributes they set.
_OPTIONS = (
    (semconv.GEN_AI_REQUEST_TEMPERATURE, "temperature"),
    (semconv.GEN_AI_REQUEST_TOP_P, "top_p"),
    (semconv.GEN_AI_REQUEST_TOP_K, "top_k"),
    (semconv.GEN_AI_REQUEST_MAX_TOKENS, "num_predict"),
    (semconv.GEN_AI_REQUEST_SEED, "seed"),
    (semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY, "frequency_penalty"),
    (semconv.GEN_AI_REQUEST_PRESENCE_PENALTY, "presence_penalty"),
)


def _arguments_text(arguments: Any) -> str:
    """Ollama sends tool arguments as an object; the ledger and checks take the JSON text."""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, Mapping):
        arguments = dict(arguments)
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False, default=str)


# --- request -----------------------------------------------------------------------------------------


def call_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any], *, chat: bool) -> dict[str, Any]:
    """The call's arguments by name: ``chat(model, messages)`` / ``generate(model, prompt, suffix)``."""
    positional = ("model", "messages") if chat else ("model", "prompt", "suffix")
    named = dict(zip(positional, args, strict=False))
    named.update(kwargs)
    return named


def request_attributes(
    client: Any, arguments: Mapping[str, Any], *, operation: str
) -> dict[str, AttributeValue]:
    """The request's span attributes: operation, provider, model, options, stream, server."""
    attributes: dict[str, AttributeValue] = {
        semconv.GEN_AI_OPERATION_NAME: operation,
        semconv.GEN_AI_PROVIDER_NAME: semconv.PROVIDER_OLLAMA,
    }
    model = arguments.get("model")
    if isinstance(model, str) and model:
        attributes[semconv.GEN_AI_REQUEST_MODEL] = model
    options = arguments.get("options")
    if options is not None:
        for key, name in _OPTIONS:
            value = field_of(options, name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[key] = value
        stop = field_of(options, "stop")
        if isinstance(stop, list | tuple) and stop and all(isinstance(item, str) for item in stop):
            attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stop)
    if arguments.get("stream") is True:
        attributes[semconv.GEN_AI_REQUEST_STREAM] = True
    output_format = arguments.get("format")
    if output_format:
        attributes[semconv.GEN_AI_OUTPUT_TYPE] = "json"  # "json" or a JSON schema: both ask for JSON
    attributes.update(server_attributes(client))
    return attributes


def request_content(
    arguments: Mapping[str, Any], *, chat: bool, capture: bool
) -> tuple[str | None, dict[str, str]]:
    """The prompt for the checks (the last user text) and, when ``capture``, the content attributes."""
    if not chat:
        prompt = str_or_none(arguments.get("prompt"))
        if not capture:
            return prompt, {}
        attributes = {
            semconv.GEN_AI_INPUT_MESSAGES: messages_json(
                [{"role": "user", "parts": [text_part(prompt)] if prompt else []}]
            )
        }
        system = str_or_none(arguments.get("system"))
        if system:
            attributes[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = messages_json([text_part(system)])
        return prompt, attributes
    messages = arguments.get("messages")
    messages = list(messages) if isinstance(messages, Iterable) and not isinstance(messages, str) else []
    if not capture:  # converting every message would be paid on each call for nothing
        for message in reversed(messages):
            content = str_or_none(field_of(message, "content"))
            if field_of(message, "role") == "user" and content:
                return content, {}
        return None, {}
    last_user: str | None = None
    converted = []
    for message in messages:
        role = str_or_none(field_of(message, "role")) or "user"
        content = str_or_none(field_of(message, "content"))
        if role == "tool":
            tool_name = field_of(message, "tool_name")
            response_part = tool_call_response_part(None, content)
            if isinstance(tool_name, str):
                response_part["name"] = tool_name
            parts: list[dict[str, Any]] = [response_part]
        else:
            parts = [text_part(content)] if content else []
            for tool_call in field_of(message, "tool_calls") or ():
                function = field_of(tool_call, "function")
                parts.append(
                    tool_call_part(
                        str_or_none(field_of(tool_call, "id")),
                        str(field_of(function, "name")),
                        _arguments_text(field_of(function, "arguments")),
                    )
                )
        if role == "user" and content:
            last_user = content
        converted.append({"role": role, "parts": parts})
    return last_user, {semconv.GEN_AI_INPUT_MESSAGES: messages_json(converted)}


# --- response ----------------------------------------------------------------------------------------


@dataclass
class OllamaReply:
    """A response reduced to what the span needs, from one response or a stream's parts."""

    model: str | None = None
    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCallContent] = field(default_factory=list)
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None

    def add(self, part: Any) -> None:
        """Add one response or stream part: pieces of text append, final fields replace."""
        model = str_or_none(field_of(part, "model"))
        if model:
            self.model = model
        message = field_of(part, "message")
        source = message if message is not None else part
        text_field = "content" if message is not None else "response"
        self.text += str_or_none(field_of(source, text_field)) or ""
        self.thinking += str_or_none(field_of(source, "thinking")) or ""
        for tool_call in field_of(source, "tool_calls") or ():
            function = field_of(tool_call, "function")
            self.tool_calls.append(
                ToolCallContent(
                    name=str(field_of(function, "name")),
                    arguments=_arguments_text(field_of(function, "arguments")),
                    call_id=str_or_none(field_of(tool_call, "id")),
                )
            )
        done_reason = str_or_none(field_of(part, "done_reason"))
        if done_reason:
            self.done_reason = done_reason
        for name in ("prompt_eval_count", "eval_count"):
            value = int_or_none(field_of(part, name))
            if value is not None:
                setattr(self, name, value)


def reply_extraction(call: GenAICall, reply: OllamaReply) -> Extraction:
    """The span attributes, checks content and output messages of a reduced response."""
    attributes: dict[str, AttributeValue] = {}
    if reply.model:
        attributes[semconv.GEN_AI_RESPONSE_MODEL] = reply.model
    if reply.done_reason:
        attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [reply.done_reason]
    if reply.prompt_eval_count is not None:
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = reply.prompt_eval_count
    if reply.eval_count is not None:
        attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = reply.eval_count
    content = ModelContent(
        output_text=reply.text,
        tool_calls=tuple(reply.tool_calls),
        prompt=call.prompt,
        reasoning_text=reply.thinking,
    )
    parts = output_parts(reply.text, reply.tool_calls, reasoning=reply.thinking)
    # Ollama answers done_reason "stop" when the model calls tools; the conventions call that tool_call.
    finish = "tool_call" if reply.tool_calls and reply.done_reason in (None, "stop") else reply.done_reason
    return Extraction(attributes=attributes, content=content, output_messages=[output_message(parts, finish)])


class PartAccumulator:
    """Collects a streamed response's parts (the stream proxies' accumulator)."""

    def __init__(self) -> None:
        self._reply = OllamaReply()

    def add(self, part: Any) -> None:
        """Take one streamed part."""
        self._reply.add(part)

    def extraction(self, call: GenAICall) -> Extraction:
        """What the parts so far say (also for a stream cut short)."""
        return reply_extraction(call, self._reply)
