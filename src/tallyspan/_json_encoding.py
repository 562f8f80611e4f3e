"""JSON text for span attributes, with the C encoder made once, and JSON bytes for the store.

``json.dumps`` with any option builds a new ``JSONEncoder`` (and its C encoder) on every call: more than
half of its cost for a chat call's message list, paid on the app's thread for every captured call and
on the store's writer for every span.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["json_bytes_encoder", "json_encoder"]


def json_encoder(*, sort_keys: bool = False) -> Callable[[Any], str]:
    """A function equal to ``json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, default=str)``.

    For values we build ourselves (messages, attributes): there is no circular-reference check, and a
    structure nested beyond the interpreter's recursion limit raises ``RecursionError``.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is not None:
        try:
            chunks = make(None, str, json.encoder.encode_basestring, None, ": ", ", ", sort_keys, False, True)
        except TypeError:  # another signature (a future Python): the plain call below
            chunks = None
        if chunks is not None:
            return lambda value: "".join(chunks(value, 0))
    return functools.partial(json.dumps, ensure_ascii=False, sort_keys=sort_keys, default=str)


def json_bytes_encoder(*, sort_keys: bool = False) -> Callable[[Any], bytes]:
    """A function writing a value as compact JSON in UTF-8 bytes (no spaces; non-JSON values as their
    ``str``), for a TEXT column of the store bound as ``CAST(? AS TEXT)``.

    Bytes go into SQLite as they are, where a ``str`` is encoded to UTF-8 again while it is bound: for a
    span whose attributes hold a captured answer, the escaping and the encoding were about a third of the
    store's cost per span. orjson writes them where it is installed (every CPython platform with a
    wheel). The standard library writes what orjson refuses (an int beyond 64 bits, PyPy), and
    escapes a lone surrogate (a provider's broken ``\\ud800`` escape) as ``\\ud800``, which strict
    UTF-8 cannot hold and which used to cost the whole batch of the store. orjson writes a float that
    is not finite as ``null``, the standard library as ``NaN`` or ``Infinity``: JSON has neither.
    """
    text = _standard_encoder(sort_keys=sort_keys, ensure_ascii=False)
    ascii_text = _standard_encoder(sort_keys=sort_keys, ensure_ascii=True)

    def standard(value: Any) -> bytes:
        try:
            return text(value).encode()
        except UnicodeEncodeError:  # a lone surrogate: only the escaped form is UTF-8
            return ascii_text(value).encode()

    orjson = _orjson()
    if orjson is None:
        return standard
    dumps: Callable[..., bytes] = orjson.dumps
    error: type[Exception] = orjson.JSONEncodeError
    option = orjson.OPT_SORT_KEYS if sort_keys else 0

    def encode(value: Any) -> bytes:
        try:
            return dumps(value, default=str, option=option)
        except error:  # an int beyond 64 bits, a lone surrogate, nesting beyond 255
            return standard(value)

    return encode


def _orjson() -> ModuleType | None:
    """orjson, imported by the first encoder that wants it (the store's, on its writer thread): with what
    it imports, it costs milliseconds that ``instrument()`` need not wait for."""
    try:
        import orjson
    except ImportError:  # PyPy, or a platform orjson has no wheel for: the standard library writes it
        return None
    return orjson


def _standard_encoder(*, sort_keys: bool, ensure_ascii: bool) -> Callable[[Any], str]:
    return json.JSONEncoder(
        ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=(",", ":"), default=str
    ).encode
