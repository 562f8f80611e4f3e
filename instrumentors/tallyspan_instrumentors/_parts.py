"""Content in the GenAI conventions' message format, and the small readers every provider module shares.

Message parts (``text_part``, ``tool_call_part``, ...) build ``gen_ai.input.messages`` /
``gen_ai.output.messages``, exported only when content capture is on. SDKs do not validate what servers
send, so every reader here accepts any type and gives up quietly (``str_or_none``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.plugin import ToolCallContent
from tallyspan.plugin.instrumentors import json_encoder

__all__ = [
    "field_of",
    "given",
    "int_or_none",
    "messages_json",
    "output_message",
    "output_parts",
    "parse_arguments",
    "reasoning_part",
    "server_attributes",
    "str_or_none",
    "text_part",
    "tool_call_part",
    "tool_call_response_part",
]

#: OpenAI-style finish reasons mapped to the GenAI conventions' output-message finish_reason values.
_FINISH_REASON_TO_GENAI = {"tool_calls": "tool_call", "function_call": "tool_call", "max_tokens": "length"}
_DEFAULT_PORTS = {"https": 443, "http": 80}


def field_of(item: Any, name: str) -> Any:
    """``item[name]`` for dicts and other mappings, ``item.name`` for SDK objects, else None."""
    if type(item) is dict:
        return item.get(name)
    # The attribute first: an SDK object is no Mapping, and asking the ABC costs about 2,000 instructions
    # a time; a mapping that is no dict has no attribute of a field's name, so it is asked only then.
    value = getattr(item, name, None)
    if value is None and isinstance(item, Mapping):
        return item.get(name)
    return value


def given(value: Any) -> bool:
    """False for None and the ``NOT_GIVEN`` / ``omit`` sentinels of the OpenAI and Anthropic SDKs."""
    return value is not None and type(value).__name__ not in ("NotGiven", "Omit")


def int_or_none(value: Any) -> int | None:
    """``value`` if it is an int (bools excluded), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def str_or_none(value: Any) -> str | None:
    """``value`` if it is a string, else None: SDKs do not validate bodies, any field may hold any type."""
    return value if isinstance(value, str) else None


def text_part(text: str) -> dict[str, Any]:
    """A ``text`` message part."""
    return {"type": "text", "content": text}


def reasoning_part(text: str) -> dict[str, Any]:
    """A ``reasoning`` message part (what a reasoning model thought before it answered)."""
    return {"type": "reasoning", "content": text}


def parse_arguments(arguments: str) -> Any:
    """Tool-call arguments as an object when they are JSON, else the raw text."""
    try:
        return json.loads(arguments)
    except (TypeError, ValueError):
        return arguments


def tool_call_part(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    """A ``tool_call`` message part (a tool call the model requested)."""
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": parse_arguments(arguments)}


def tool_call_response_part(call_id: str | None, response: Any) -> dict[str, Any]:
    """A ``tool_call_response`` message part (a tool result sent back to the model)."""
    return {"type": "tool_call_response", "id": call_id, "response": response}


def output_parts(
    text: str, tool_calls: Iterable[ToolCallContent] = (), reasoning: str = ""
) -> list[dict[str, Any]]:
    """An answer's message parts: its reasoning, its text, then the tool calls it requested (each if any)."""
    parts = [reasoning_part(reasoning)] if reasoning else []
    if text:
        parts.append(text_part(text))
    parts.extend(tool_call_part(call.call_id, call.name, call.arguments) for call in tool_calls)
    return parts


def output_message(parts: list[dict[str, Any]], finish_reason: str | None) -> dict[str, Any]:
    """An assistant output message; provider finish reasons are mapped to the conventions' values."""
    message: dict[str, Any] = {"role": "assistant", "parts": parts}
    if finish_reason:  # unknown for a stream cut short
        message["finish_reason"] = _FINISH_REASON_TO_GENAI.get(finish_reason, finish_reason)
    return message


_MESSAGES_TEXT = json_encoder()


def messages_json(messages: Iterable[Mapping[str, Any]] | list[Any]) -> str:
    """Serialise messages or parts for a span attribute (non-JSON values as their ``str``)."""
    return _MESSAGES_TEXT(list(messages))


def server_attributes(resource: Any) -> dict[str, AttributeValue]:
    """``server.address`` / ``server.port`` from ``resource._client.base_url`` (an httpx URL).

    The SDK resources of openai and anthropic, and ollama's clients, all keep their HTTP client there.
    """
    # Reading it costs about 15,000 instructions a call: openai's base_url property imports a module
    # each time, and httpx's URL reads its host and port through Python-level properties. So the
    # attributes of the last URL read are kept, where the property gave the client's own _base_url (an
    # httpx URL, immutable), and given again while the client still holds that very object.
    global _last_server
    client = getattr(resource, "_client", None)
    own = getattr(client, "_base_url", None)
    last_url, last_attributes = _last_server  # one read: another thread may replace the pair meanwhile
    if own is not None and own is last_url:
        return dict(last_attributes)
    url = getattr(client, "base_url", None)
    attributes = _server_attributes(url)
    if url is own and type(url).__name__ == "URL":
        _last_server = (url, attributes)
    return dict(attributes)


#: (the last httpx URL read, its attributes), shared by every client: most apps have one base URL.
_last_server: tuple[Any, dict[str, AttributeValue]] = (None, {})


def _server_attributes(url: Any) -> dict[str, AttributeValue]:
    host = getattr(url, "host", None)
    if not isinstance(host, str) or not host:
        return {}
    attributes: dict[str, AttributeValue] = {semconv.SERVER_ADDRESS: host}
    port = getattr(url, "port", None)
    if not isinstance(port, int):
        port = _DEFAULT_PORTS.get(str(getattr(url, "scheme", "")))
    if isinstance(port, int):
        attributes[semconv.SERVER_PORT] = port
    return attributes
