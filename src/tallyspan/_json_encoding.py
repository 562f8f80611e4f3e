"""JSON text for span attributes, with the C encoder made once.

``json.dumps`` with any option builds a new ``JSONEncoder`` (and its C encoder) on every call: more than
half of its cost for a chat call's message list, paid on the app's thread for every captured call and
on the store's writer for every span.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

__all__ = ["json_encoder"]


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
