"""Reading an ended span cheaply: its attributes as a plain dict, for the processors and the store."""

from __future__ import annotations

from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["SDK_SPAN_TYPES", "plain_attributes"]

#: The SDK's own span classes, whose private fields are read as they are (no subclass of ours or of the
#: app's overrides them).
SDK_SPAN_TYPES: Final = frozenset(
    cls for cls in (ReadableSpan, sdk_trace.Span, getattr(sdk_trace, "_Span", None)) if cls is not None
)


def plain_attributes(span: ReadableSpan) -> dict[str, Any]:
    """``dict(span.attributes or {})``, a copy the caller may keep. A live span's ``BoundedAttributes`` is
    copied from its inner dict: through the mapping protocol each key costs Python-level ``__iter__``,
    ``__len__`` and ``__getitem__`` calls; an enriched copy's plain dict is copied as it is."""
    if type(span) in SDK_SPAN_TYPES:
        # Private fields: an SDK that renamed them gets the mapping protocol, not an error on every span.
        raw = vars(span).get("_attributes")
        if type(raw) is BoundedAttributes:
            inner = getattr(raw, "_dict", None)
            if type(inner) is dict:
                return dict(inner)
        elif type(raw) is dict:
            return dict(raw)
    return dict(span.attributes or {})
