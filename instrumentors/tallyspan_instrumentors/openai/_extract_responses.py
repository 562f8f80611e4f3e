"""The Responses API: request attributes, response extraction and the stream accumulator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.plugin import ModelContent, ToolCallContent
from tallyspan_instrumentors._calls import Extraction, GenAICall
from tallyspan_instrumentors._parts import (
    given,
    messages_json,
    output_message,
    output_parts,
    text_part,
    tool_call_part,
    tool_call_response_part,
)
from tallyspan_instrumentors.openai._extract_shared import (
    Request,
    as_dict,
    last_user_text,
    request_start,
    sequence,
    set_if,
    text_of_content,
    usage_attributes,
)

__all__ = ["ResponsesStreamAccumulator", "extract_response", "responses_request"]

#: Request attributes and the arguments that set them.
_PARAMETERS = (
    (semconv.GEN_AI_REQUEST_MAX_TOKENS, "max_output_tokens"),
    (semconv.GEN_AI_REQUEST_TEMPERATURE, "temperature"),
    (semconv.GEN_AI_REQUEST_TOP_P, "top_p"),
    (semconv.OPENAI_REQUEST_SERVICE_TIER, "service_tier"),
)
_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
#: Events carrying a response snapshot (asking other events for one costs pydantic an exception each).
_SNAPSHOT_EVENTS = _FINAL_EVENTS | {"response.created", "response.queued", "response.in_progress"}


def responses_request(resource: Any, kwargs: Mapping[str, Any], *, capture_content: bool) -> Request:
    """Read the request attributes (and, when capturing, the input) of a ``responses.create`` call."""
    model, attributes = request_start(resource, kwargs, semconv.OPERATION_CHAT, _PARAMETERS)
    if kwargs.get("stream") is True:
        attributes[semconv.GEN_AI_REQUEST_STREAM] = True
    conversation = kwargs.get("conversation")
    conversation_id = conversation if isinstance(conversation, str) else as_dict(conversation).get("id")
    set_if(attributes, semconv.GEN_AI_CONVERSATION_ID, conversation_id)
    text_format = as_dict(as_dict(kwargs.get("text")).get("format")).get("type")
    if text_format in ("json_schema", "json_object") or given(kwargs.get("text_format")):
        attributes[semconv.GEN_AI_OUTPUT_TYPE] = "json"
    messages = _input_messages(kwargs.get("input"))
    content_attributes: dict[str, str] = {}
    if capture_content:
        if messages:
            content_attributes[semconv.GEN_AI_INPUT_MESSAGES] = messages_json(messages)
        instructions = kwargs.get("instructions")
        if isinstance(instructions, str) and instructions:
            content_attributes[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = messages_json([text_part(instructions)])
    return Request(model, attributes, last_user_text(kwargs.get("input")), content_attributes)


def _input_messages(input_value: Any) -> list[dict[str, Any]]:
    if isinstance(input_value, str):
        return [{"role": "user", "parts": [text_part(input_value)]}]
    messages = []
    for item in sequence(input_value):
        item_dict = as_dict(item)
        kind = item_dict.get("type")
        if kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "parts": [tool_call_response_part(item_dict.get("call_id"), item_dict.get("output"))],
                }
            )
        elif kind == "function_call":
            arguments = item_dict.get("arguments")
            part = tool_call_part(
                item_dict.get("call_id"),
                str(item_dict.get("name", "")),
                arguments if isinstance(arguments, str) else "",
            )
            messages.append({"role": "assistant", "parts": [part]})
        elif "role" in item_dict:
            text = text_of_content(item_dict.get("content"))
            messages.append(
                {"role": item_dict["role"], "parts": [text_part(text)] if text is not None else []}
            )
    return messages


# --- responses ------------------------------------------------------------------------------------------


def _finish_reason(response: Any, has_tool_calls: bool) -> str | None:
    status = getattr(response, "status", None)
    if status == "completed":
        return "tool_calls" if has_tool_calls else "stop"
    if status == "incomplete":
        reason = getattr(getattr(response, "incomplete_details", None), "reason", None)
        return _INCOMPLETE_REASONS.get(str(reason), str(reason) if reason else "incomplete")
    if status == "failed":
        return "error"
    return None


def _items(response: Any) -> tuple[str, list[str], list[ToolCallContent]]:
    texts: list[str] = []
    reasoning: list[str] = []
    tool_calls: list[ToolCallContent] = []
    for item in getattr(response, "output", None) or ():
        kind = getattr(item, "type", None)
        if kind == "message":
            for part in getattr(item, "content", None) or ():
                part_type = getattr(part, "type", None)
                if part_type == "output_text" and isinstance(getattr(part, "text", None), str):
                    texts.append(part.text)
                elif part_type == "refusal" and isinstance(getattr(part, "refusal", None), str):
                    texts.append(part.refusal)
        elif kind == "function_call":
            arguments = getattr(item, "arguments", "")
            tool_calls.append(
                ToolCallContent(
                    name=str(getattr(item, "name", "")),
                    arguments=arguments if isinstance(arguments, str) else "",
                    call_id=getattr(item, "call_id", None),
                )
            )
        elif kind == "reasoning":
            pieces = [getattr(part, "text", "") for part in getattr(item, "content", None) or ()]
            if not any(pieces):
                pieces = [getattr(part, "text", "") for part in getattr(item, "summary", None) or ()]
            reasoning.extend(piece for piece in pieces if isinstance(piece, str) and piece)
    return "".join(texts), reasoning, tool_calls


def _build(
    call: GenAICall,
    *,
    response: Any,
    text: str,
    reasoning: list[str],
    tool_calls: list[ToolCallContent],
    finish_reason: str | None,
) -> Extraction:
    attributes: dict[str, AttributeValue] = {}
    # Strings only: an id or model sent as a number would give the attribute two types across spans.
    for key, name in (
        (semconv.GEN_AI_RESPONSE_ID, "id"),
        (semconv.GEN_AI_RESPONSE_MODEL, "model"),
        (semconv.OPENAI_RESPONSE_SERVICE_TIER, "service_tier"),
    ):
        value = getattr(response, name, None)
        if isinstance(value, str):
            attributes[key] = value
    if finish_reason:
        attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [finish_reason]
    attributes.update(
        usage_attributes(
            getattr(response, "usage", None),
            input_key="input_tokens",
            output_key="output_tokens",
            cached=("input_tokens_details", "cached_tokens"),
            reasoning=("output_tokens_details", "reasoning_tokens"),
        )
    )
    parts = output_parts(text, tool_calls, reasoning="".join(reasoning))
    content = ModelContent(
        output_text=text, tool_calls=tuple(tool_calls), prompt=call.prompt, reasoning_text="".join(reasoning)
    )
    return Extraction(attributes, content, [output_message(parts, finish_reason)])


def extract_response(response: Any, call: GenAICall) -> Extraction:
    """Read a ``Response`` (or ``ParsedResponse``) into span attributes and content."""
    text, reasoning, tool_calls = _items(response)
    return _build(
        call,
        response=response,
        text=text,
        reasoning=reasoning,
        tool_calls=tool_calls,
        finish_reason=_finish_reason(response, bool(tool_calls)),
    )


class ResponsesStreamAccumulator:
    """Accumulates Responses stream events; the final ``response.*`` event carries the whole response."""

    def __init__(self) -> None:
        self._latest: Any = None  # the response snapshot from created / in_progress / completed events
        self._final: Any = None
        self._text: list[str] = []
        self._calls: dict[str, list[Any]] = {}  # item id -> [call_id, name, argument pieces]

    def add(self, event: Any) -> None:
        """Take one event."""
        kind = getattr(event, "type", None)
        if kind in _SNAPSHOT_EVENTS:
            response = getattr(event, "response", None)
            if response is not None:
                self._latest = response
                if kind in _FINAL_EVENTS:
                    self._final = response
        elif kind == "response.output_text.delta":
            delta = getattr(event, "delta", None)
            if isinstance(delta, str):
                self._text.append(delta)
        elif kind == "response.output_item.added":
            item = getattr(event, "item", None)
            if getattr(item, "type", None) == "function_call":
                self._calls[str(getattr(item, "id", ""))] = [
                    getattr(item, "call_id", None),
                    str(getattr(item, "name", "")),
                    [],
                ]
        elif kind == "response.function_call_arguments.delta":
            entry = self._calls.get(str(getattr(event, "item_id", "")))
            delta = getattr(event, "delta", None)
            if entry is not None and isinstance(delta, str):
                entry[2].append(delta)

    def extraction(self, call: GenAICall) -> Extraction:
        """The final response when it arrived, else what the deltas so far say."""
        if self._final is not None:
            return extract_response(self._final, call)
        tool_calls = [
            ToolCallContent(name=name, arguments="".join(pieces), call_id=call_id)
            for call_id, name, pieces in self._calls.values()
        ]
        return _build(
            call,
            response=self._latest,
            text="".join(self._text),
            reasoning=[],
            tool_calls=tool_calls,
            finish_reason=None,
        )
