"""``Contract.json_schema``: parse the output as JSON and validate it with the ``jsonschema`` library.

The whole current draft applies (2020-12 unless the schema's ``$schema`` names another): ``oneOf``,
``pattern``, ``$ref``, ``const`` and the rest. Problems are content-free: they are built from each
error's path and keyword, never from the output's values, and a path names only fields the schema
itself declares (any other key of the output shows as ``*``).

The parser refuses deep nesting before it parses: an output of 100,000 ``[`` is rejected by a linear,
non-recursive scan (``JsonTooDeepError``) instead of reaching the recursive parser and validator; the
check engine records that the json_schema rule could not judge the output. The validator comes compiled
with the contract (``tallyspan._contract._contracts.compile_schema``, at load).
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Iterator, Mapping
from itertools import accumulate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # jsonschema (and its referencing, attrs and format modules) loads only for a contract with a
    # json_schema: parsing JSON output, which the language checks do too, does not need it.
    from jsonschema import exceptions as schema_exceptions
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_JSON_DEPTH",
    "JsonTooDeepError",
    "parse_json_output",
    "schema_problems",
    "too_deep",
]

#: Deepest nesting of arrays and objects accepted; deeper output is "not JSON" (no real deliverable
#: nests this deep, and the parser and the validator both recurse once per level).
MAX_JSON_DEPTH = 64

_FENCE = re.compile(r"(?s)^\s*```[a-zA-Z]*\s*\n(.*?)\n\s*```\s*$")
# Strings may hold brackets; escapes are skipped pairwise so "\\" and "\"" end where JSON says.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# Each opening bracket counts 2 and each closing 0, so depth after i brackets is prefix sum - i.
_BRACKET_WEIGHTS = str.maketrans({"[": "\x02", "{": "\x02", "]": "\x00", "}": "\x00"})
_TYPE_NAMES: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("boolean", bool),
    ("integer", int),
    ("number", float),
    ("string", str),
    ("array", list),
    ("object", dict),
)


class JsonTooDeepError(ValueError):
    """The output nests arrays and objects deeper than :data:`MAX_JSON_DEPTH`: it is not judged."""


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when brackets outside JSON strings nest deeper than ``limit``; linear, no recursion."""
    if text.count("[") + text.count("{") <= limit:
        return False  # fewer openers than the limit: cannot nest deeper (the common case, two scans)
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    weights = brackets.translate(_BRACKET_WEIGHTS).encode("latin-1")
    depths = map(operator.sub, accumulate(weights), range(1, len(weights) + 1))
    return max(depths, default=0) > limit


def parse_json_output(text: str) -> tuple[bool, Any]:
    """Parse the output as JSON, inside a code fence or not; returns (ok, value).

    Raises:
        JsonTooDeepError: when the output nests deeper than :data:`MAX_JSON_DEPTH` (found by a linear
            scan, before the recursive parser could run out of stack).
    """
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text.strip()
    if too_deep(body):
        raise JsonTooDeepError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return True, json.loads(body)
    except ValueError:
        return False, None


def _declared_names(schema: Any) -> frozenset[str]:
    """Every property name the schema declares (``properties``, ``required``, ``dependentRequired``)."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for keyword in ("properties", "dependentRequired", "dependentSchemas"):
                if isinstance(node.get(keyword), Mapping):
                    names.update(str(name) for name in node[keyword])
            if isinstance(node.get("required"), list):
                names.update(str(name) for name in node["required"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


def _path(parts: Iterator[Any] | Any, declared: frozenset[str]) -> str:
    path = "$"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if part in declared else ".*"
    return path


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    for name, kind in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _problems_of(error: schema_exceptions.ValidationError, declared: frozenset[str]) -> list[str]:
    path = _path(iter(error.absolute_path), declared)
    keyword = str(error.validator)
    expected = error.validator_value
    if keyword == "type":
        wanted = "|".join(map(str, expected)) if isinstance(expected, list) else str(expected)
        return [f"json field {path} has type {_type_name(error.instance)}, want {wanted}"]
    if keyword == "required" and isinstance(error.instance, Mapping) and isinstance(expected, list):
        return [f"json field {path}.{name} missing" for name in expected if name not in error.instance]
    if keyword in ("enum", "const"):
        return [f"json field {path} is not one of the allowed values"]
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        return [f"json object {path} has unexpected field(s)"]
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return [f"json field {path} fails {keyword} {expected:g}"]
    return [f"json field {path} fails {keyword}"]


def schema_problems(value: Any, validator: Validator, limit: int = 5) -> list[str]:
    """Return up to ``limit`` content-free problems of ``value`` against the compiled schema."""
    declared = _declared_names(validator.schema)
    problems: list[str] = []
    for error in validator.iter_errors(value):
        # jsonschema reports each missing field in its own error, each carrying the whole required list.
        for problem in _problems_of(error, declared):
            if problem not in problems:
                problems.append(problem)
        if len(problems) >= limit:
            break
    return problems[:limit]
