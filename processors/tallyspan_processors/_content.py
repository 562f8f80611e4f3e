"""The content of an ended span, taken once and handed down the chain with it.

The first link of the chain that receives a span from outside it (the worker, on its own thread) calls
:func:`take_content`: the ContentBuffer entry the instrumentor put there, else what other
instrumentations captured on the span. Every link below gets the same object with the span
(``WrappingProcessor.receive``), so nothing pops, peeks or parses twice.

Spans made by other instrumentations carry content only when their content capture is on, each in
its own shape:

- OpenTelemetry GenAI conventions: ``gen_ai.output.messages`` / ``gen_ai.input.messages``, JSON lists
  of ``{role, parts: [{type: "text", content}]}`` (older releases: ``{role, content}``), tool calls as
  ``tool_call`` parts; tool spans: ``gen_ai.tool.call.arguments`` / ``.result``;
- OpenLLMetry: ``gen_ai.completion.{i}.content`` and ``gen_ai.prompt.{i}.role`` / ``.content``;
- OpenInference: ``llm.output_messages.{i}.message.content``, ``llm.input_messages.{i}.message.*``,
  else ``output.value`` (text, or the provider's JSON response).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from tallyspan import semconv
from tallyspan.plugin import Content, ModelContent, ToolCallContent, ToolContent, content_buffer

__all__ = ["captured_content", "take_content"]


def take_content(span: ReadableSpan) -> Content | None:
    """Take the content of ``span`` out of the ContentBuffer, else read what was captured on it."""
    if span.context is not None:
        buffered = content_buffer().pop(span.context.span_id)
        if buffered is not None:
            return buffered
    return captured_content(span.attributes or {})


def captured_content(attributes: Mapping[str, Any]) -> Content | None:
    """Read the content captured on a span's attributes, or None when there is none."""
    operation = attributes.get(semconv.GEN_AI_OPERATION_NAME)
    if operation in semconv.MODEL_OPERATIONS:
        return _genai_messages(attributes) or _openllmetry(attributes) or _openinference(attributes)
    if operation == semconv.OPERATION_EXECUTE_TOOL:
        arguments = attributes.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS)
        if isinstance(arguments, str):
            return ToolContent(arguments=arguments, result=attributes.get(semconv.GEN_AI_TOOL_CALL_RESULT))
    return None


def _parts_text(message: Mapping[str, Any], part_type: str = "text") -> str:
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [
            str(part.get("content", ""))
            for part in parts
            if isinstance(part, Mapping) and part.get("type") == part_type and part.get("content") is not None
        ]
        return "".join(texts)
    content = message.get("content") if part_type == "text" else None
    return content if isinstance(content, str) else ""


def _json_list(raw: Any) -> list[Any] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):  # captured content that is not (sane) JSON is not ours to read
            return None
    return raw if isinstance(raw, list) else None


def _tool_calls(parts: Any) -> tuple[ToolCallContent, ...]:
    if not isinstance(parts, list):
        return ()
    calls: list[ToolCallContent] = []
    for part in parts:
        if (
            isinstance(part, Mapping)
            and part.get("type") == "tool_call"
            and isinstance(part.get("name"), str)
        ):
            arguments = part.get("arguments")
            if not isinstance(arguments, str):
                arguments = (
                    "" if arguments is None else json.dumps(arguments, ensure_ascii=False, default=str)
                )
            call_id = part.get("id")
            calls.append(ToolCallContent(part["name"], arguments, None if call_id is None else str(call_id)))
    return tuple(calls)


def _genai_messages(attributes: Mapping[str, Any]) -> ModelContent | None:
    outputs = _json_list(attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES))
    if not outputs:
        return None
    first = next((message for message in outputs if isinstance(message, Mapping)), None)
    if first is None:
        return None
    prompt = None
    inputs = _json_list(attributes.get(semconv.GEN_AI_INPUT_MESSAGES)) or []
    for message in reversed(inputs):
        if isinstance(message, Mapping) and message.get("role") == "user":
            prompt = _parts_text(message)
            break
    tool_calls = tuple(
        call
        for message in outputs
        if isinstance(message, Mapping)
        for call in _tool_calls(message.get("parts"))
    )
    return ModelContent(_parts_text(first), tool_calls, prompt, _parts_text(first, "reasoning"))


def _indexed(attributes: Mapping[str, Any], prefix: str, suffix: str) -> dict[int, Any]:
    """``{i: value}`` for attributes named ``{prefix}{i}{suffix}``."""
    found: dict[int, Any] = {}
    for name, value in attributes.items():
        if name.startswith(prefix) and name.endswith(suffix):
            index = name[len(prefix) : len(name) - len(suffix)]
            if index.isdigit():
                found[int(index)] = value
    return found


def _last_user(roles: Mapping[int, Any], contents: Mapping[int, Any]) -> str | None:
    for index in sorted(contents, reverse=True):
        if roles.get(index, "user") == "user" and isinstance(contents[index], str):
            return str(contents[index])
    return None


def _openllmetry(attributes: Mapping[str, Any]) -> ModelContent | None:
    completions = _indexed(attributes, semconv.OPENLLMETRY_COMPLETION_PREFIX, ".content")
    if not completions:
        return None
    output = completions[min(completions)]
    prompts = _indexed(attributes, semconv.OPENLLMETRY_PROMPT_PREFIX, ".content")
    roles = _indexed(attributes, semconv.OPENLLMETRY_PROMPT_PREFIX, ".role")
    return ModelContent(str(output), prompt=_last_user(roles, prompts))


def _openinference(attributes: Mapping[str, Any]) -> ModelContent | None:
    prefix = semconv.OPENINFERENCE_OUTPUT_MESSAGES_PREFIX
    messages = _indexed(attributes, prefix, ".message.content")
    output: str | None = str(messages[min(messages)]) if messages else None
    if output is None:
        raw = attributes.get(semconv.OPENINFERENCE_OUTPUT_VALUE)
        if not isinstance(raw, str) or not raw:  # empty: content was not captured (see _calls)
            return None
        output = _response_text(raw)
    in_prefix = semconv.OPENINFERENCE_INPUT_MESSAGES_PREFIX
    prompts = _indexed(attributes, in_prefix, ".message.content")
    roles = _indexed(attributes, in_prefix, ".message.role")
    return ModelContent(output, prompt=_last_user(roles, prompts))


def _response_text(raw: str) -> str:
    """``output.value`` is either the text or the provider's JSON response; take the first choice's text."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    if isinstance(value, Mapping):
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message")
            if isinstance(message, Mapping) and isinstance(message.get("content"), str):
                return str(message["content"])
            if isinstance(choices[0].get("text"), str):
                return str(choices[0]["text"])
    return raw
