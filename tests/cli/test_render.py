"""The one renderer: aligned text tables (wide characters count twice) and the JSON envelope."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tallyspan.cli._render import JSON_FORMAT_VERSION, table, to_json


@dataclass(frozen=True)
class _Inner:
    name: str


@dataclass(frozen=True)
class _Outer:
    count: int
    items: list[_Inner]


def test_json_envelope_wraps_nested_dataclasses() -> None:
    document = json.loads(to_json("x", _Outer(2, [_Inner("週次"), _Inner("b")])))
    assert document == {
        "format_version": JSON_FORMAT_VERSION,
        "command": "x",
        "data": {"count": 2, "items": [{"name": "週次"}, {"name": "b"}]},
    }
    assert JSON_FORMAT_VERSION == 1


def test_json_keeps_non_ascii_text_readable() -> None:
    assert "判定" in to_json("x", ["判定"])


def test_table_aligns_wide_characters_and_right_aligns_numbers() -> None:
    text = table(["stage", "calls"], [["週次報告", 3], ["triage", 12]])
    assert text.splitlines() == [
        "  stage     calls",
        "  週次報告      3",
        "  triage       12",
    ]


def test_table_shows_none_as_dash_bools_as_words_and_lists_joined() -> None:
    text = table(["a", "b", "c"], [[None, True, ["x", "y"]], ["z", False, []]])
    assert text.splitlines() == ["  a  b    c", "  -  yes  x, y", "  z  no   -"]


def test_an_empty_table_says_none() -> None:
    assert table(["a"], []) == "  (none)"


def test_json_is_indented_by_two_for_people_reading_it() -> None:
    assert to_json("x", ("判定", 1)) == (
        '{\n  "format_version": 1,\n  "command": "x",\n  "data": [\n    "判定",\n    1\n  ]\n}'
    )
