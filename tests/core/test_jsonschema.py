"""The json_schema rule's parts one by one: the depth guard, the parser, the draft and each problem's text."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema.exceptions import SchemaError

from tallyspan._contract._contracts import compile_schema
from tallyspan._engine._jsonschema import (
    MAX_JSON_DEPTH,
    JsonTooDeepError,
    parse_json_output,
    schema_problems,
    too_deep,
)


def _problems(schema: dict[str, Any], value: Any, limit: int = 5) -> list[str]:
    return schema_problems(value, compile_schema(schema), limit)


# --- too_deep: a linear scan, exact at the limit ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, False),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), True),
        ("{" * (MAX_JSON_DEPTH + 1), True),  # objects nest too
        ("[{" * 33, True),  # 66 levels, half of them each kind
        ("[]" * 200, False),  # many brackets, never deeper than one
        ("[1], " * 100, False),  # and what lies between them is no level
        ("[" + '"' + "[" * 100 + '"' + "]", False),  # brackets inside a string are text
        ('["\\"' + "[" * 100 + '"]', False),  # an escaped quote does not end the string
        ('["\\\\"' + "[" * 100, True),  # an escaped backslash does, and the brackets after it count
        (
            "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "[]",
            False,
        ),  # more openers than the limit, not deeper
        ("", False),
    ],
)
def test_too_deep_counts_levels_outside_strings(text: str, deep: bool) -> None:
    assert too_deep(text) is deep


def test_too_deep_takes_its_limit() -> None:
    assert too_deep("[[[]]]", limit=2) is True
    assert too_deep("[[[]]]", limit=3) is False
    assert too_deep("[][][]", limit=2) is False  # three openers, depth one
    assert too_deep('"["', limit=0) is False  # an opener in a string only: no bracket left to count


# --- parse_json_output -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  \n[1, 2]\n  ", [1, 2]),
        ('```json\n{"a": [1]}\n```', {"a": [1]}),
        ('  ```\n"fenced"\n  ```  ', "fenced"),
        ("```JSON\n3\n```", 3),
    ],
)
def test_json_is_parsed_bare_or_inside_a_code_fence(text: str, value: Any) -> None:
    assert parse_json_output(text) == (True, value)


@pytest.mark.parametrize("text", ["合格です", '{"a": 1', "```json\n{\n```", "```python\nx = 1\n```", ""])
def test_text_that_is_not_json_is_reported_without_raising(text: str) -> None:
    assert parse_json_output(text) == (False, None)


def test_deep_json_raises_before_parsing_even_inside_a_fence() -> None:
    with pytest.raises(JsonTooDeepError, match=r"^JSON nested deeper than 64 levels$"):
        parse_json_output("```json\n" + "[" * 65 + "]" * 65 + "\n```")
    assert parse_json_output("[" * 64 + "]" * 64)[0] is True


# --- compile_schema --------------------------------------------------------------------------------


def test_the_schema_draft_is_2020_12_unless_the_schema_names_another() -> None:
    tuple_items = {"type": "array", "items": [{"type": "integer"}]}  # draft-07 form; invalid in 2020-12
    with pytest.raises(SchemaError):
        compile_schema(tuple_items)
    draft7 = compile_schema({"$schema": "http://json-schema.org/draft-07/schema#", **tuple_items})
    assert schema_problems(["x", "y"], draft7) == ["json field $[0] has type string, want integer"]
    draft2020 = compile_schema({"type": "array", "prefixItems": [{"type": "integer"}]})
    assert schema_problems(["x", "y"], draft2020) == ["json field $[0] has type string, want integer"]


def test_an_invalid_schema_raises_schema_error() -> None:
    with pytest.raises(SchemaError):
        compile_schema({"type": "no-such-type"})


# --- each problem's text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wanted", "value", "found"),
    [
        ("string", None, "null"),
        ("integer", True, "boolean"),  # a bool is an int in Python, a boolean in JSON
        ("string", 3, "integer"),
        ("integer", 1.5, "number"),
        ("integer", "x", "string"),
        ("integer", [1], "array"),
        ("integer", {"k": 1}, "object"),
        ("null", False, "boolean"),
    ],
)
def test_a_wrong_type_names_the_json_type_found_and_wanted(wanted: str, value: Any, found: str) -> None:
    assert _problems({"type": wanted}, value) == [f"json field $ has type {found}, want {wanted}"]


def test_a_value_json_cannot_hold_is_named_by_its_python_type() -> None:
    assert _problems({"type": "array"}, (1, 2)) == ["json field $ has type tuple, want array"]


def test_several_wanted_types_are_joined() -> None:
    assert _problems({"type": ["integer", "null", "array"]}, "x") == [
        "json field $ has type string, want integer|null|array"
    ]


def test_each_missing_required_field_is_one_problem() -> None:
    schema = {"type": "object", "required": ["id", "verdict", "score"]}
    assert _problems(schema, {"verdict": "ok"}) == ["json field $.id missing", "json field $.score missing"]


def test_enum_and_const_share_one_text() -> None:
    assert _problems({"enum": [1, 2]}, 3) == ["json field $ is not one of the allowed values"]
    assert _problems({"const": "a"}, "b") == ["json field $ is not one of the allowed values"]
    assert _problems({"enum": ["a", "b"]}, {"c": 1}) == ["json field $ is not one of the allowed values"]


def test_additional_and_unevaluated_properties_share_one_text() -> None:
    assert _problems({"additionalProperties": False}, {"x": 1}) == ["json object $ has unexpected field(s)"]
    assert _problems({"unevaluatedProperties": False}, {"x": 1}) == ["json object $ has unexpected field(s)"]


@pytest.mark.parametrize(
    ("schema", "value", "problem"),
    [
        ({"maximum": 10}, 11, "json field $ fails maximum 10"),
        ({"minimum": 0.5}, 0.25, "json field $ fails minimum 0.5"),
        ({"maxLength": 3}, "abcd", "json field $ fails maxLength 3"),
        ({"uniqueItems": True}, [1, 1], "json field $ fails uniqueItems"),  # a bool is not a number
        ({"pattern": "^a"}, "b", "json field $ fails pattern"),
        ({"not": {"type": "string"}}, "b", "json field $ fails not"),
    ],
)
def test_other_keywords_name_the_keyword_and_a_numeric_limit(
    schema: dict[str, Any], value: Any, problem: str
) -> None:
    assert _problems(schema, value) == [problem]


def test_paths_index_arrays_and_name_declared_fields_only() -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
            "price": {"type": "number"}}}}},
        "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}},
    }  # fmt: skip
    value = {"items": [{"price": 1}, {"price": "x"}], "secret-name": {"also-secret": "x"}}
    assert sorted(_problems(schema, value)) == [
        "json field $.*.* has type string, want integer",
        "json field $.items[1].price has type string, want number",
    ]


@pytest.mark.parametrize(
    "schema",
    [
        {"required": ["name"]},
        {"dependentRequired": {"name": ["other"]}},
        {"dependentSchemas": {"name": {}}},
        {"allOf": [{"properties": {"name": {}}}]},  # declared inside a list of subschemas
        {"$defs": {"inner": {"properties": {"name": {}}}}},  # declared inside a nested mapping
    ],
)
def test_a_field_is_named_when_any_part_of_the_schema_declares_it(schema: dict[str, Any]) -> None:
    full = {**schema, "additionalProperties": {"type": "integer"}}
    assert _problems(full, {"name": "x", "other": 1}) == ["json field $.name has type string, want integer"]


def test_problems_stop_at_the_limit() -> None:
    schema = {"type": "object", "required": [f"field{index}" for index in range(7)]}
    assert len(schema_problems({}, compile_schema(schema))) == 5
    assert _problems(schema, {}, limit=2) == ["json field $.field0 missing", "json field $.field1 missing"]
    properties = {"properties": {name: {"type": "integer"} for name in "abcdefg"}}
    assert len(_problems(properties, dict.fromkeys("abcdefg", "x"), limit=3)) == 3
