"""A small JSON Schema subset for ``Contract.json_schema``: enough to say which field is missing or wrong.

Supported keywords: ``type`` (a name or a list), ``required``, ``properties``, ``additionalProperties:
false``, ``items``, ``enum``, ``minLength``/``maxLength``, ``minimum``/``maximum``, ``minItems``.
Other keywords are ignored. Problems are content-free: they name the field path, never a value.
"""

from __future__ import annotations

import json
from typing import Any

import regex

__all__ = ["parse_json_output", "schema_problems"]

_FENCE = regex.compile(r"(?s)^\s*```[a-zA-Z]*\s*\n(.*?)\n\s*```\s*$")
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def parse_json_output(text: str) -> tuple[bool, Any]:
    """Parse the output as JSON, inside a code fence or not; returns (ok, value)."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text.strip()
    try:
        return True, json.loads(body)
    except ValueError:
        return False, None


def _type_ok(value: Any, expected: str) -> bool:
    if isinstance(value, bool) and expected in ("number", "integer"):
        return False
    return isinstance(value, _TYPES.get(expected, (object,)))


def _type_name(value: Any) -> str:
    for name in _TYPES:
        if _type_ok(value, name) and name != "number":
            return name
    return "number" if isinstance(value, float) else type(value).__name__


def schema_problems(value: Any, schema: dict[str, Any], path: str = "$", limit: int = 5) -> list[str]:
    """Return up to ``limit`` content-free problems of ``value`` against ``schema``."""
    problems: list[str] = []
    _check(value, schema, path, problems, limit)
    return problems[:limit]


def _check(value: Any, schema: dict[str, Any], path: str, problems: list[str], limit: int) -> None:
    if len(problems) >= limit or not isinstance(schema, dict):
        return
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_type_ok(value, str(name)) for name in names):
            problems.append(
                f"json field {path} has type {_type_name(value)}, want {'|'.join(map(str, names))}"
            )
            return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"json field {path} is not one of the allowed values")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"json field {path} has {len(value)} chars < minLength {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"json field {path} has {len(value)} chars > maxLength {schema['maxLength']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"json field {path} is below minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"json field {path} is above maximum {schema['maximum']}")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"json field {path}.{name} missing")
        properties = schema.get("properties", {})
        for name, sub_schema in properties.items():
            if name in value:
                _check(value[name], sub_schema, f"{path}.{name}", problems, limit)
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            if extra:
                problems.append(f"json object {path} has {len(extra)} unexpected field(s)")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"json array {path} has {len(value)} items < minItems {schema['minItems']}")
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                _check(item, items, f"{path}[{index}]", problems, limit)
