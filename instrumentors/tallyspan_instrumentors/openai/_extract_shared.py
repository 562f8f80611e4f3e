"""Reading OpenAI SDK request arguments and objects without trusting their shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan_instrumentors._parts import field_of, given, int_or_none, server_attributes

__all__ = [
    "Request",
    "as_dict",
    "last_user_text",
    "number",
    "request_start",
    "sequence",
    "set_if",
    "text_of_content",
    "usage_attributes",
]


class Request(NamedTuple):
    """What the span needs from a request, read before the call. A named tuple: one is made for every
    call on the app's thread, and a frozen dataclass costs several times as much to make."""

    model: str | None
    attributes: dict[str, AttributeValue]
    prompt: str | None
    content_attributes: dict[str, str]


def number(value: Any) -> int | float | None:
    """``value`` if it is a real number (bools excluded), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def set_if(attributes: dict[str, AttributeValue], key: str, value: Any) -> None:
    """Set ``key`` when ``value`` is a usable attribute value (str, number, or list of str)."""
    if isinstance(value, (str, bool)) or number(value) is not None:
        attributes[key] = value
    elif isinstance(value, (list, tuple)) and value and all(isinstance(item, str) for item in value):
        attributes[key] = list(value)


def request_start(
    resource: Any, kwargs: Mapping[str, Any], operation: str, parameters: tuple[tuple[str, str], ...] = ()
) -> tuple[str | None, dict[str, AttributeValue]]:
    """The requested model and the attributes every request's span starts with.

    Args:
        resource: the SDK resource the call was made on (it knows the server).
        kwargs: the call's arguments.
        operation: a ``gen_ai.operation.name`` value.
        parameters: ``(attribute, argument)`` pairs: the attribute is set when the app gave the argument.
    """
    model = kwargs.get("model")
    model = model if isinstance(model, str) else None
    attributes: dict[str, AttributeValue] = {
        semconv.GEN_AI_OPERATION_NAME: operation,
        semconv.GEN_AI_PROVIDER_NAME: semconv.PROVIDER_OPENAI,
    }
    set_if(attributes, semconv.GEN_AI_REQUEST_MODEL, model)
    for key, argument in parameters:
        value = kwargs.get(argument)
        if given(value):
            set_if(attributes, key, value)
    attributes.update(server_attributes(resource))
    return model, attributes


def last_user_text(messages: Any) -> str | None:
    """The prompt for the checks: ``messages`` itself if it is text, else its last user message's text."""
    if isinstance(messages, str):
        return messages
    for message in reversed(sequence(messages)):
        message_dict = as_dict(message)
        if message_dict.get("role") == "user":
            return text_of_content(message_dict.get("content"))
    return None


def sequence(value: Any) -> list[Any] | tuple[Any, ...]:
    """``value`` if it is a list or tuple, else empty: iterators the app passes are the SDK's to consume."""
    return value if isinstance(value, (list, tuple)) else ()


def as_dict(item: Any) -> dict[str, Any]:
    """A message or item as a dict, whether the app passed a dict or an SDK object."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        dumped = dump()
        return dumped if isinstance(dumped, dict) else {}
    return {}


def text_of_content(content: Any) -> str | None:
    """The text of a message's content: a string, or the text parts of a list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        texts = []
        for part in content:
            part_dict = as_dict(part)
            text = part_dict.get("text")
            if isinstance(text, str):
                texts.append(text)
        return "".join(texts) if texts else None
    return None


def _int_at(obj: Any, path: tuple[str, ...]) -> int | None:
    for name in path:
        obj = field_of(obj, name)
        if obj is None:
            return None
    return int_or_none(obj)


def usage_attributes(
    usage: Any, *, input_key: str, output_key: str, cached: tuple[str, ...], reasoning: tuple[str, ...]
) -> dict[str, AttributeValue]:
    """Token usage as ``gen_ai.usage.*``; the field names differ between Chat and Responses."""
    attributes: dict[str, AttributeValue] = {}
    if usage is None:
        return attributes
    for key, path in (
        (semconv.GEN_AI_USAGE_INPUT_TOKENS, (input_key,)),
        (semconv.GEN_AI_USAGE_OUTPUT_TOKENS, (output_key,)),
        (semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cached),
        (semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, reasoning),
    ):
        value = _int_at(usage, path)
        if value is not None:
            attributes[key] = value
    return attributes
