"""Chat Completions: request attributes, response extraction and the stream accumulator."""

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
    reasoning_part,
    str_or_none,
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
    usage_attributes,
)

__all__ = ["ChatStreamAccumulator", "chat_request", "extract_chat_completion"]

_OUTPUT_TYPES = {"json_schema": "json", "json_object": "json", "text": "text"}
#: Request attributes and the arguments that set them.
_PARAMETERS = (
    (semconv.GEN_AI_REQUEST_TEMPERATURE, "temperature"),
    (semconv.GEN_AI_REQUEST_TOP_P, "top_p"),
    (semconv.GEN_AI_REQUEST_SEED, "seed"),
    (semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY, "frequency_penalty"),
    (semconv.GEN_AI_REQUEST_PRESENCE_PENALTY, "presence_penalty"),
    (semconv.OPENAI_REQUEST_SERVICE_TIER, "service_tier"),
)


def chat_request(resource: Any, kwargs: Mapping[str, Any], *, capture_content: bool) -> Request:
    """Read the request attributes (and, when capturing, the input messages) of a chat call."""
    model, attributes = request_start(resource, kwargs, semconv.OPERATION_CHAT, _PARAMETERS)
    max_tokens = kwargs.get("max_completion_tokens")
    if not given(max_tokens):
        max_tokens = kwargs.get("max_tokens")
    set_if(attributes, semconv.GEN_AI_REQUEST_MAX_TOKENS, max_tokens)
    stop = kwargs.get("stop")
    set_if(attributes, semconv.GEN_AI_REQUEST_STOP_SEQUENCES, [stop] if isinstance(stop, str) else stop)
    choices = kwargs.get("n")
    if isinstance(choices, int) and choices != 1:
        attributes[semconv.GEN_AI_REQUEST_CHOICE_COUNT] = choices
    if kwargs.get("stream") is True:
        attributes[semconv.GEN_AI_REQUEST_STREAM] = True
    output_type = _output_type(kwargs.get("response_format"))
    if output_type:
        attributes[semconv.GEN_AI_OUTPUT_TYPE] = output_type
    messages = kwargs.get("messages")
    message_list = sequence(messages)
    content_attributes = {}
    if capture_content and message_list:
        content_attributes[semconv.GEN_AI_INPUT_MESSAGES] = messages_json(
            [_input_message(as_dict(message)) for message in message_list]
        )
    return Request(model, attributes, last_user_text(message_list), content_attributes)


def _output_type(response_format: Any) -> str | None:
    if isinstance(response_format, type):  # parse(response_format=SomeModel)
        return "json"
    kind = as_dict(response_format).get("type") if given(response_format) else None
    return _OUTPUT_TYPES.get(kind) if isinstance(kind, str) else None


def _input_message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = message.get("role") or "user"
    content = message.get("content")
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append(tool_call_response_part(message.get("tool_call_id"), content))
    elif isinstance(content, str):
        parts.append(text_part(content))
    else:
        parts.extend(_content_part(as_dict(part)) for part in sequence(content))
    for call in sequence(message.get("tool_calls")):
        call_dict = as_dict(call)
        function = as_dict(call_dict.get("function"))
        arguments = function.get("arguments")
        parts.append(
            tool_call_part(
                call_dict.get("id"),
                str(function.get("name", "")),
                arguments if isinstance(arguments, str) else "",
            )
        )
    return {"role": role, "parts": parts}


def _content_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return text_part(part["text"])
    if kind == "image_url":
        url = as_dict(part.get("image_url")).get("url")
        if isinstance(url, str) and not url.startswith("data:"):
            return {"type": "uri", "modality": "image", "uri": url}
        return {"type": "blob", "modality": "image"}  # inline data is not copied into spans
    return {"type": str(kind)}


# --- responses ------------------------------------------------------------------------------------------


class _Choice:
    # A plain class with slots: a dataclass's default factories cost a call each, for every response.
    __slots__ = ("finish_reason", "has_text", "reasoning", "refusal", "text", "tool_calls")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, list[Any]] = {}  # index -> [id, name, argument pieces]
        self.finish_reason: str | None = None
        self.has_text = False


class _Completion:
    __slots__ = ("choices", "model", "response_id", "service_tier", "system_fingerprint", "usage")

    def __init__(
        self,
        response_id: Any = None,
        model: Any = None,
        system_fingerprint: Any = None,
        service_tier: Any = None,
        usage: Any = None,
    ) -> None:
        self.response_id = response_id
        self.model = model
        self.system_fingerprint = system_fingerprint
        self.service_tier = service_tier
        self.usage = usage
        self.choices: dict[int, _Choice] = {}


def _reasoning_of(message: Any) -> str | None:
    # Not in the SDK's types: OpenAI-compatible servers (vLLM, DeepSeek, llama.cpp) add these fields, which
    # pydantic keeps as extras. Read the dicts: a missing attribute costs pydantic an exception per chunk.
    fields = getattr(message, "__dict__", None) or {}
    extras = getattr(message, "__pydantic_extra__", None) or {}
    for name in ("reasoning_content", "reasoning"):
        value = fields.get(name) or extras.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def extract_chat_completion(completion: Any, call: GenAICall) -> Extraction:
    """Read a ``ChatCompletion`` (or ``ParsedChatCompletion``) into span attributes and content."""
    summary = _Completion(
        getattr(completion, "id", None),
        getattr(completion, "model", None),
        getattr(completion, "system_fingerprint", None),
        getattr(completion, "service_tier", None),
        getattr(completion, "usage", None),
    )
    # The SDK does not validate bodies: any field may hold any JSON type, and one odd field must not
    # cost the span everything else the response says.
    for position, choice in enumerate(sequence(getattr(completion, "choices", None))):
        message = getattr(choice, "message", None)
        if message is None:
            continue
        index = choice.index if isinstance(getattr(choice, "index", None), int) else position
        item = summary.choices.get(index)
        if item is None:
            item = summary.choices[index] = _Choice()
        content = getattr(message, "content", None)
        if isinstance(content, str):
            item.text.append(content)
            item.has_text = True
        refusal = getattr(message, "refusal", None)
        if isinstance(refusal, str):
            item.refusal.append(refusal)
        reasoning = _reasoning_of(message)
        if reasoning:
            item.reasoning.append(reasoning)
        for position_in_message, tool_call in enumerate(sequence(getattr(message, "tool_calls", None))):
            function = getattr(tool_call, "function", None)
            if function is None:  # custom (non-function) tool calls carry no name/arguments pair
                continue
            arguments = getattr(function, "arguments", "")
            item.tool_calls[position_in_message] = [
                getattr(tool_call, "id", None),
                getattr(function, "name", ""),
                [arguments if isinstance(arguments, str) else ""],
            ]
        item.finish_reason = str_or_none(getattr(choice, "finish_reason", None))
    return _extraction(summary, call)


def _extraction(summary: _Completion, call: GenAICall) -> Extraction:
    # Strings only: an id or model sent as a number would give the attribute two types across spans.
    attributes: dict[str, AttributeValue] = {
        key: value
        for key, value in (
            (semconv.GEN_AI_RESPONSE_ID, summary.response_id),
            (semconv.GEN_AI_RESPONSE_MODEL, summary.model),
            (semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT, summary.system_fingerprint),
            (semconv.OPENAI_RESPONSE_SERVICE_TIER, summary.service_tier),
        )
        if isinstance(value, str)
    }
    ordered = [summary.choices[index] for index in sorted(summary.choices)]
    reasons = [choice.finish_reason for choice in ordered if isinstance(choice.finish_reason, str)]
    if reasons:
        attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    attributes.update(
        usage_attributes(
            summary.usage,
            input_key="prompt_tokens",
            output_key="completion_tokens",
            cached=("prompt_tokens_details", "cached_tokens"),
            reasoning=("completion_tokens_details", "reasoning_tokens"),
        )
    )
    messages = []
    for choice in ordered:
        parts: list[dict[str, Any]] = []
        if choice.reasoning:
            parts.append(reasoning_part("".join(choice.reasoning)))
        if choice.has_text:
            parts.append(text_part("".join(choice.text)))
        elif choice.refusal:
            parts.append(text_part("".join(choice.refusal)))
        parts.extend(
            tool_call_part(call_id, str(name or ""), "".join(pieces))
            for call_id, name, pieces in (choice.tool_calls[i] for i in sorted(choice.tool_calls))
        )
        messages.append(output_message(parts, choice.finish_reason))
    content = None
    if ordered:
        first = ordered[0]
        tool_calls = tuple(
            ToolCallContent(name=str(name or ""), arguments="".join(pieces), call_id=call_id)
            for call_id, name, pieces in (first.tool_calls[i] for i in sorted(first.tool_calls))
        )
        output_text = "".join(first.text) if first.has_text else "".join(first.refusal)
        content = ModelContent(
            output_text=output_text,
            tool_calls=tool_calls,
            prompt=call.prompt,
            reasoning_text="".join(first.reasoning),
        )
    return Extraction(attributes, content, messages or None)


class ChatStreamAccumulator:
    """Accumulates ``ChatCompletionChunk``s: text, reasoning and tool-call deltas per choice, usage."""

    def __init__(self) -> None:
        self._summary = _Completion()

    def add(self, chunk: Any) -> None:
        """Take one chunk."""
        summary = self._summary
        summary.response_id = summary.response_id or getattr(chunk, "id", None)
        summary.model = summary.model or getattr(chunk, "model", None)
        summary.system_fingerprint = summary.system_fingerprint or getattr(chunk, "system_fingerprint", None)
        summary.service_tier = summary.service_tier or getattr(chunk, "service_tier", None)
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            summary.usage = usage
        for choice in sequence(getattr(chunk, "choices", None)):
            index = getattr(choice, "index", 0)
            key = index if isinstance(index, int) else 0
            item = summary.choices.get(key)
            if item is None:  # not setdefault: it would build (and drop) a _Choice for every chunk
                item = summary.choices[key] = _Choice()
            delta = getattr(choice, "delta", None)
            if delta is not None:
                _add_delta(item, delta)
            reason = getattr(choice, "finish_reason", None)
            if isinstance(reason, str):
                item.finish_reason = reason

    def extraction(self, call: GenAICall) -> Extraction:
        """What the chunks so far say."""
        return _extraction(self._summary, call)


def _add_delta(item: _Choice, delta: Any) -> None:
    content = getattr(delta, "content", None)
    if isinstance(content, str) and content:
        item.text.append(content)
        item.has_text = True
    refusal = getattr(delta, "refusal", None)
    if isinstance(refusal, str) and refusal:
        item.refusal.append(refusal)
    reasoning = _reasoning_of(delta)
    if reasoning:
        item.reasoning.append(reasoning)
    for tool_call in sequence(getattr(delta, "tool_calls", None)):
        index = getattr(tool_call, "index", 0)
        entry = item.tool_calls.setdefault(index if isinstance(index, int) else 0, [None, "", []])
        call_id = getattr(tool_call, "id", None)
        if call_id:
            entry[0] = call_id
        function = getattr(tool_call, "function", None)
        name = getattr(function, "name", None)
        if isinstance(name, str) and name:
            entry[1] = name
        arguments = getattr(function, "arguments", None)
        if isinstance(arguments, str):
            entry[2].append(arguments)
