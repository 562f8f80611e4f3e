"""What a model span said and was asked, for the checks: the ContentBuffer first, else captured attributes.

Spans made by other instrumentations carry content only when their content capture is on, each in
its own shape:

- OpenTelemetry GenAI conventions: ``gen_ai.output.messages`` / ``gen_ai.input.messages``, JSON lists
  of ``{role, parts: [{type: "text", content}]}`` (older releases: ``{role, content}``);
- OpenLLMetry: ``gen_ai.completion.{i}.content`` and ``gen_ai.prompt.{i}.role`` / ``.content``;
- OpenInference: ``llm.output_messages.{i}.message.content``, ``llm.input_messages.{i}.message.*``,
  else ``output.value`` (text, or the provider's JSON response).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tallyspan import semconv

__all__ = ["SpanContent", "captured_content"]


@dataclass(frozen=True)
class SpanContent:
    """The output (first choice), the last user prompt and any separate reasoning of a model span."""

    output: str | None
    prompt: str | None = None
    reasoning: str = ""
    requested_tools: bool = False
    """The turn ended by asking for tool calls: an intermediate step of an agent loop, not a deliverable."""


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
        except ValueError:
            return None
    return raw if isinstance(raw, list) else None


def _genai_messages(attributes: Mapping[str, Any]) -> SpanContent | None:
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
    parts = first.get("parts")
    requested_tools = isinstance(parts, list) and any(
        isinstance(part, Mapping) and part.get("type") == "tool_call" for part in parts
    )
    return SpanContent(_parts_text(first), prompt, _parts_text(first, "reasoning"), requested_tools)


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


def _openllmetry(attributes: Mapping[str, Any]) -> SpanContent | None:
    completions = _indexed(attributes, semconv.OPENLLMETRY_COMPLETION_PREFIX, ".content")
    if not completions:
        return None
    output = completions[min(completions)]
    prompts = _indexed(attributes, semconv.OPENLLMETRY_PROMPT_PREFIX, ".content")
    roles = _indexed(attributes, semconv.OPENLLMETRY_PROMPT_PREFIX, ".role")
    return SpanContent(str(output), _last_user(roles, prompts))


def _openinference(attributes: Mapping[str, Any]) -> SpanContent | None:
    prefix = semconv.OPENINFERENCE_OUTPUT_MESSAGES_PREFIX
    messages = _indexed(attributes, prefix, ".message.content")
    output: str | None = str(messages[min(messages)]) if messages else None
    if output is None:
        raw = attributes.get(semconv.OPENINFERENCE_OUTPUT_VALUE)
        if not isinstance(raw, str):
            return None
        output = _response_text(raw)
    in_prefix = semconv.OPENINFERENCE_INPUT_MESSAGES_PREFIX
    prompts = _indexed(attributes, in_prefix, ".message.content")
    roles = _indexed(attributes, in_prefix, ".message.role")
    return SpanContent(output, _last_user(roles, prompts))


def _response_text(raw: str) -> str:
    """``output.value`` is either the text or the provider's JSON response; take the first choice's text."""
    try:
        value = json.loads(raw)
    except ValueError:
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


def captured_content(attributes: Mapping[str, Any]) -> SpanContent | None:
    """Read the content other instrumentations captured on a span, or None when there is none."""
    return _genai_messages(attributes) or _openllmetry(attributes) or _openinference(attributes)
