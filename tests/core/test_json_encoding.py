"""``json_encoder`` writes exactly what ``json.dumps(..., ensure_ascii=False, default=str)`` writes.

The instrumentors' message attributes and the store's attributes column use it; with the C encoder and
without it (a Python without ``c_make_encoder``), sorted and in the given order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tallyspan.plugin import json_encoder

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
