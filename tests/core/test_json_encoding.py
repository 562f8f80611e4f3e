"""``json_encoder`` writes exactly what ``json.dumps(..., ensure_ascii=False, default=str)`` writes;
``json_bytes_encoder`` the same compact (no spaces), in UTF-8.

The instrumentors' message attributes use the first, with the C encoder and without it (a Python without
``c_make_encoder``), sorted and in the given order; the store's JSON columns the second, with orjson and
without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tallyspan import _json_encoding
from tallyspan.plugin.exporters import json_bytes_encoder
from tallyspan.plugin.instrumentors import json_encoder

#: Values of every attribute type, and strings that need escaping (the store's test writes them too).
TRICKY_ATTRIBUTES: dict[str, Any] = {
    "z.last": '週次報告 "quoted" \\ back\nslash \u2028 \x00',
    "a.first": ("stop", "length"),
    "m.ints": (1, -2, 2**70),
    "m.floats": (0.1, 1e300, float("inf"), float("-inf"), float("nan")),
    "m.bools": (True, False),
    "m.empty": (),
    "é.key": 3.5,
}
_TRICKY: dict[str, Any] = {
    **TRICKY_ATTRIBUTES,
    "m.none": None,
    "m.object": Path("/tmp/x"),  # not JSON: written as its str
    "m.messages": [{"role": "assistant", "parts": [{"type": "text", "content": "判定：合格"}]}],
}


@pytest.mark.parametrize("sort_keys", [True, False], ids=["sorted", "in-order"])
@pytest.mark.parametrize("c_encoder", [True, False], ids=["c-encoder", "fallback"])
def test_the_text_is_exactly_what_json_dumps_writes(
    c_encoder: bool, sort_keys: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not c_encoder:
        monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    encode = json_encoder(sort_keys=sort_keys)
    expected = json.dumps(_TRICKY, ensure_ascii=False, sort_keys=sort_keys, default=str)
    assert encode(_TRICKY) == expected
    assert encode({}) == "{}"
    assert encode([]) == "[]"
    if sort_keys:
        assert expected.startswith('{"a.first": ["stop", "length"], "m.bools": [true, false]')
    else:
        assert expected.startswith('{"z.last": "週次報告 \\"quoted\\"')


def test_the_same_encoder_serves_many_values() -> None:
    encode = json_encoder()
    for value in ([1, "a"], {"b": [{"c": None}]}, "text", 3):
        assert encode(value) == json.dumps(value, ensure_ascii=False, default=str)


_COMPACT: dict[str, Any] = {"ensure_ascii": False, "separators": (",", ":"), "default": str}


@pytest.fixture(params=["orjson", "standard"])
def bytes_encoder_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways ``json_bytes_encoder`` writes: orjson where installed, the standard library without it."""
    if request.param == "orjson":
        pytest.importorskip("orjson", reason="orjson has no wheel for this Python (PyPy)")
    else:
        monkeypatch.setattr(_json_encoding, "_orjson", lambda: None)
    return str(request.param)


@pytest.mark.parametrize("sort_keys", [True, False], ids=["sorted", "in-order"])
def test_json_bytes_are_the_compact_json_of_the_value_in_utf8(
    bytes_encoder_kind: str, sort_keys: bool
) -> None:
    encode = json_bytes_encoder(sort_keys=sort_keys)
    finite = {**_TRICKY, "m.ints": (1, -2, 2**63 - 1), "m.floats": (0.1, 1e300, -0.0, 5e-324)}
    expected = json.dumps(finite, sort_keys=sort_keys, **_COMPACT).encode()
    assert encode(finite) == expected
    assert encode({}) == b"{}"
    assert encode(["判定"]) == '["判定"]'.encode()
    assert json.loads(expected)["m.object"] == "/tmp/x"  # not JSON: its str


def test_json_bytes_of_what_orjson_refuses_come_from_the_standard_library(bytes_encoder_kind: str) -> None:
    encode = json_bytes_encoder(sort_keys=True)
    huge = {"b": 2**70, "a": "判定"}
    assert encode(huge) == json.dumps(huge, sort_keys=True, **_COMPACT).encode()
    surrogate = {"answer": "判\ud800定"}  # only escaped is it UTF-8
    assert encode(surrogate) == b'{"answer":"\\u5224\\ud800\\u5b9a"}'
    assert json.loads(encode(surrogate)) == surrogate


def test_json_bytes_write_floats_that_are_not_finite_as_null_with_orjson() -> None:
    pytest.importorskip("orjson", reason="orjson has no wheel for this Python (PyPy)")
    encode = json_bytes_encoder()
    assert encode([float("nan"), float("inf"), 1.5]) == b"[null,null,1.5]"
    # Without orjson, the standard library's NaN (which SQLite's JSON functions reject).
    assert json.dumps([float("nan")], **_COMPACT) == "[NaN]"
