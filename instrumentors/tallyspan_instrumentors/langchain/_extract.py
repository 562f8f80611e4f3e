"""Reading LangChain's callback payloads: provider, request parameters, usage, messages, tool results.

Everything here is duck-typed over LangChain's message and result objects (``content``, ``type``,
``tool_calls``, ``usage_metadata``, ``response_metadata``), so a field a provider package leaves out
is simply absent from the span, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.plugin import ModelContent, ToolCallContent
from tallyspan_instrumentors._calls import Extraction
from tallyspan_instrumentors._parts import output_message, output_parts, text_part, tool_call_response_part

__all__ = [
    "content_text",
    "input_messages",
    "model_result",
    "provider_name",
    "request_attributes",
    "request_model",
    "tool_result",
]

#: LangChain's ``ls_provider`` values mapped to ``gen_ai.provider.name`` where the two differ.
_PROVIDERS: Final = {
    "azure": "azure.ai.openai",
    "azure_openai": "azure.ai.openai",
    "bedrock": "aws.bedrock",
    "amazon_bedrock": "aws.bedrock",
    "google_genai": "gcp.gen_ai",
    "google_vertexai": "gcp.vertex_ai",
    "google_anthropic_vertex": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "mistralai": "mistral_ai",
    "xai": "x_ai",
    "ibm": "ibm.watsonx.ai",
}
#: Chat model class names mapped to a provider, for models that do not report ``ls_provider``.
_CLASS_PROVIDERS: Final = {
    "ChatOpenAI": semconv.PROVIDER_OPENAI,
    "AzureChatOpenAI": "azure.ai.openai",
    "ChatAnthropic": semconv.PROVIDER_ANTHROPIC,
    "ChatOllama": semconv.PROVIDER_OLLAMA,
}
_ROLES: Final = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}
#: Tool-message statuses LangChain sets when a tool's error was handled into its result.
_ERROR_STATUS: Final = "error"


def provider_name(serialized: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None) -> str:
    """``gen_ai.provider.name``: from ``ls_provider`` metadata, else the model class, else ``langchain``."""
    provider = (metadata or {}).get("ls_provider")
    if isinstance(provider, str) and provider:
        return _PROVIDERS.get(provider, provider)
    ids = (serialized or {}).get("id")
    if isinstance(ids, list) and ids:
        class_name = ids[-1]
        if isinstance(class_name, str) and class_name in _CLASS_PROVIDERS:
            return _CLASS_PROVIDERS[class_name]
    return "langchain"


def request_model(
    metadata: Mapping[str, Any] | None, invocation_params: Mapping[str, Any] | None
) -> str | None:
    """The requested model: ``ls_model_name``, else the invocation parameters' ``model``/``model_name``."""
    for source, key in (
        (metadata, "ls_model_name"),
        (invocation_params, "model"),
        (invocation_params, "model_name"),
    ):
        value = (source or {}).get(key)
        if isinstance(value, str) and value:
            return value
    return None


def request_attributes(
    metadata: Mapping[str, Any] | None, invocation_params: Mapping[str, Any] | None
) -> dict[str, AttributeValue]:
    """The ``gen_ai.request.*`` parameters LangChain reports for a model call."""
    params = dict(invocation_params or {})
    md = metadata or {}
    attributes: dict[str, AttributeValue] = {}
    numbers = (
        (semconv.GEN_AI_REQUEST_TEMPERATURE, md.get("ls_temperature", params.get("temperature")), float),
        (semconv.GEN_AI_REQUEST_MAX_TOKENS, md.get("ls_max_tokens", params.get("max_tokens")), int),
        (semconv.GEN_AI_REQUEST_TOP_P, params.get("top_p"), float),
        (semconv.GEN_AI_REQUEST_SEED, params.get("seed"), int),
        (semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY, params.get("frequency_penalty"), float),
        (semconv.GEN_AI_REQUEST_PRESENCE_PENALTY, params.get("presence_penalty"), float),
    )
    for key, value, kind in numbers:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[key] = kind(value)
    stop = md.get("ls_stop", params.get("stop"))
    if isinstance(stop, str):
        stop = [stop]
    if isinstance(stop, list) and stop and all(isinstance(item, str) for item in stop):
        attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = stop
    if params.get("stream") is True or params.get("streaming") is True:
        attributes[semconv.GEN_AI_REQUEST_STREAM] = True
    return attributes


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text blocks of a content-block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif (
                isinstance(block, Mapping)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            ):
                texts.append(block["text"])
        return "".join(texts)
    return ""


def _reasoning_text(message: Any) -> str:
    parts: list[str] = []
    extra = getattr(message, "additional_kwargs", None) or {}
    reasoning = extra.get("reasoning_content") if isinstance(extra, Mapping) else None
    if isinstance(reasoning, str):
        parts.append(reasoning)
    content = getattr(message, "content", None)
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            for key in ("reasoning", "thinking") if kind in ("reasoning", "thinking") else ():
                if isinstance(block.get(key), str):
                    parts.append(block[key])
    return "".join(parts)


def _tool_calls(message: Any) -> tuple[ToolCallContent, ...]:
    calls: list[ToolCallContent] = []
    for call in getattr(message, "tool_calls", None) or ():
        if not isinstance(call, Mapping):
            continue
        arguments = call.get("args")
        text = (
            arguments
            if isinstance(arguments, str)
            else json.dumps(arguments, ensure_ascii=False, default=str)
        )
        call_id = call.get("id")
        calls.append(ToolCallContent(str(call.get("name") or ""), text, str(call_id) if call_id else None))
    return tuple(calls)


def _message_parts(message: Any) -> list[dict[str, Any]]:
    text = content_text(getattr(message, "content", None))
    if getattr(message, "type", None) == "tool":
        return [tool_call_response_part(getattr(message, "tool_call_id", None), text)]
    return output_parts(text, _tool_calls(message))


def input_messages(messages: Sequence[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """The GenAI input messages, the system instructions, and the last user message's text."""
    chat: list[dict[str, Any]] = []
    system: list[dict[str, Any]] = []
    prompt: str | None = None
    for message in messages:
        role = _ROLES.get(str(getattr(message, "type", "")), str(getattr(message, "type", "user")))
        if role == "system":
            system.append(text_part(content_text(getattr(message, "content", None))))
            continue
        chat.append({"role": role, "parts": _message_parts(message)})
        if role == "user":
            prompt = content_text(getattr(message, "content", None))
    return chat, system, prompt


def _first(mappings: Iterable[Mapping[str, Any]], *keys: str) -> Any:
    for mapping in mappings:
        for key in keys:
            value = mapping.get(key)
            if value is not None and value != "":
                return value
    return None


def _usage(message: Any, llm_output: Mapping[str, Any]) -> dict[str, AttributeValue]:
    usage = getattr(message, "usage_metadata", None)
    result: dict[str, AttributeValue] = {}
    if isinstance(usage, Mapping):
        pairs = [
            (semconv.GEN_AI_USAGE_INPUT_TOKENS, usage.get("input_tokens")),
            (semconv.GEN_AI_USAGE_OUTPUT_TOKENS, usage.get("output_tokens")),
        ]
        details_in = usage.get("input_token_details") or {}
        details_out = usage.get("output_token_details") or {}
        pairs += [
            (semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, details_in.get("cache_read") or None),
            (semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, details_in.get("cache_creation") or None),
            (semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, details_out.get("reasoning") or None),
        ]
    else:
        raw = llm_output.get("token_usage") or llm_output.get("usage") or {}
        raw = raw if isinstance(raw, Mapping) else {}
        pairs = [
            (semconv.GEN_AI_USAGE_INPUT_TOKENS, _first([raw], "prompt_tokens", "input_tokens")),
            (semconv.GEN_AI_USAGE_OUTPUT_TOKENS, _first([raw], "completion_tokens", "output_tokens")),
        ]
    for key, value in pairs:
        if isinstance(value, int) and not isinstance(value, bool):
            result[key] = value
    return result


def model_result(response: Any, prompt: str | None) -> Extraction:
    """Read an ``LLMResult`` (its first generation) into span attributes, content and output messages."""
    generations = getattr(response, "generations", None) or []
    generation = generations[0][0] if generations and generations[0] else None
    message = getattr(generation, "message", None)
    llm_output = getattr(response, "llm_output", None) or {}
    llm_output = llm_output if isinstance(llm_output, Mapping) else {}
    response_metadata = getattr(message, "response_metadata", None) or {}
    generation_info = getattr(generation, "generation_info", None) or {}
    sources = [m for m in (response_metadata, generation_info, llm_output) if isinstance(m, Mapping)]

    attributes: dict[str, AttributeValue] = {}
    response_model = _first(sources, "model_name", "model")
    if isinstance(response_model, str):
        attributes[semconv.GEN_AI_RESPONSE_MODEL] = response_model
    response_id = _first(sources, "id")
    if isinstance(response_id, str):
        attributes[semconv.GEN_AI_RESPONSE_ID] = response_id
    finish_reason = _first(sources, "finish_reason", "stop_reason", "done_reason")
    if isinstance(finish_reason, str):
        attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [finish_reason]
    attributes.update(_usage(message, llm_output))

    if message is not None:
        text = content_text(getattr(message, "content", None))
        tool_calls = _tool_calls(message)
        reasoning = _reasoning_text(message)
    else:
        text = str(getattr(generation, "text", "") or "")
        tool_calls, reasoning = (), ""
    parts = output_parts(text, tool_calls)
    output = [output_message(parts, finish_reason if isinstance(finish_reason, str) else None)]
    return Extraction(attributes, ModelContent(text, tool_calls, prompt, reasoning), output)


def _tool_message(output: Any) -> Any:
    """The ToolMessage in a tool's output: the output itself, or the one a LangGraph ``Command`` carries."""
    if getattr(output, "type", None) == "tool" and hasattr(output, "tool_call_id"):
        return output
    update = getattr(output, "update", None)
    messages = update.get("messages") if isinstance(update, Mapping) else None
    for message in messages if isinstance(messages, list) else ():
        if getattr(message, "type", None) == "tool" and hasattr(message, "tool_call_id"):
            return message
    return None


def tool_result(output: Any) -> tuple[Any, bool, str | None]:
    """A tool's output read as (result, failed, tool call id): failed when it is an error ToolMessage."""
    message = _tool_message(output)
    if message is None:
        return output, False, None
    call_id = getattr(message, "tool_call_id", None)
    failed = getattr(message, "status", None) == _ERROR_STATUS
    content = getattr(message, "content", None)
    result = content if isinstance(content, str) else content_text(content) or content
    return result, failed, str(call_id) if call_id else None
