"""Reading the Agents SDK's span data (plain dicts and OpenAI models) into GenAI attributes and content.

Only used for model calls the processor records itself, i.e. when no instrumentation wraps the
OpenAI client the model called (see ``_processor``); the shapes read here are those of the SDK's own
``GenerationSpanData`` (chat-completions messages) and ``ResponseSpanData`` (a Responses API object).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.plugin import ModelContent, ToolCallContent
from tallyspan_instrumentors._calls import Extraction
from tallyspan_instrumentors._parts import (
    field_of,
    int_or_none,
    output_message,
    output_parts,
    text_part,
    tool_call_part,
    tool_call_response_part,
)

__all__ = ["chat_input_messages", "generation_extraction", "last_user_text", "response_extraction"]


def _usage_attributes(usage: Any) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    if usage is None:
        return attributes
    input_tokens = int_or_none(field_of(usage, "input_tokens"))
    output_tokens = int_or_none(field_of(usage, "output_tokens"))
    if input_tokens is not None:
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
    if output_tokens is not None:
        attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
    cached = int_or_none(field_of(field_of(usage, "input_tokens_details") or {}, "cached_tokens"))
    if cached:
        attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cached
    reasoning = int_or_none(field_of(field_of(usage, "output_tokens_details") or {}, "reasoning_tokens"))
    if reasoning:
        attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = reasoning
    return attributes


def _text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = [field_of(part, "text") for part in content]
        return "".join(text for text in texts if isinstance(text, str))
    return ""


def last_user_text(messages: Any) -> str | None:
    """The last user message of a chat-style input, for the answer_to_other_question check."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, Sequence):
        return None
    for message in reversed(messages):
        if field_of(message, "role") == "user":
            return _text_of(field_of(message, "content")) or None
    return None


def chat_input_messages(messages: Any) -> list[dict[str, Any]] | None:
    """A generation's chat-format input as GenAI input messages (for opt-in capture), or None."""
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return None
    converted = []
    for message in messages:
        role = field_of(message, "role") or "user"
        content = field_of(message, "content")
        if role == "tool":
            parts = [tool_call_response_part(field_of(message, "tool_call_id"), content)]
        else:
            text = _text_of(content)
            parts = [text_part(text)] if text else []
        for call in field_of(message, "tool_calls") or ():
            function = field_of(call, "function") or {}
            arguments = field_of(function, "arguments")
            name = field_of(function, "name")
            parts.append(
                tool_call_part(
                    field_of(call, "id"),
                    name if isinstance(name, str) else "",
                    arguments if isinstance(arguments, str) else "",
                )
            )
        converted.append({"role": role, "parts": parts})
    return converted


def _content(
    text: str, calls: list[ToolCallContent], prompt: str | None, finish_reason: str | None
) -> tuple[ModelContent, list[dict[str, Any]]]:
    return (
        ModelContent(output_text=text, tool_calls=tuple(calls), prompt=prompt),
        [output_message(output_parts(text, calls), finish_reason)],
    )


def generation_extraction(output: Any, usage: Any, prompt: str | None) -> Extraction:
    """A chat-completions generation: ``output`` is a list of assistant message dicts."""
    attributes = _usage_attributes(usage)
    texts: list[str] = []
    calls: list[ToolCallContent] = []
    for message in output if isinstance(output, Sequence) and not isinstance(output, str) else ():
        texts.append(_text_of(field_of(message, "content")))
        for call in field_of(message, "tool_calls") or ():
            function = field_of(call, "function") or {}
            name = field_of(function, "name")
            if isinstance(name, str):
                arguments = field_of(function, "arguments")
                calls.append(
                    ToolCallContent(
                        name, arguments if isinstance(arguments, str) else "", field_of(call, "id")
                    )
                )
    if output is None:
        return Extraction(attributes=attributes)
    content, messages = _content("".join(texts), calls, prompt, "tool_calls" if calls else "stop")
    return Extraction(attributes=attributes, content=content, output_messages=messages)


def response_extraction(response: Any, usage: Any, prompt: str | None) -> tuple[Extraction, str | None]:
    """A Responses API call: the response's id, model, usage and output; returns the model too."""
    attributes = _usage_attributes(field_of(response, "usage") or usage)
    if response is None:
        return Extraction(attributes=attributes), None
    response_id = field_of(response, "id")
    model = field_of(response, "model")
    if isinstance(response_id, str):
        attributes[semconv.GEN_AI_RESPONSE_ID] = response_id
    if isinstance(model, str):
        attributes[semconv.GEN_AI_RESPONSE_MODEL] = model
    texts: list[str] = []
    calls: list[ToolCallContent] = []
    for item in field_of(response, "output") or ():
        kind = field_of(item, "type")
        if kind == "message":
            texts.append(_text_of(field_of(item, "content")))
        elif kind == "function_call":
            name = field_of(item, "name")
            if isinstance(name, str):
                arguments = field_of(item, "arguments")
                call_id = field_of(item, "call_id")
                calls.append(ToolCallContent(name, arguments if isinstance(arguments, str) else "", call_id))
    content, messages = _content("".join(texts), calls, prompt, "tool_calls" if calls else "stop")
    return Extraction(attributes=attributes, content=content, output_messages=messages), (
        model if isinstance(model, str) else None
    )
