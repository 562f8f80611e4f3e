"""Rotel trace processor: forward only the spans tallyspan flagged, drop the rest.

Rotel (a small OTLP collector with embedded Python processors) calls ``process_spans`` with each
batch's ResourceSpans before exporting it. A span is kept when any of these holds:

- ``tallyspan.violated`` is true (a contract or language violation on a model span),
- it carries a ``tallyspan.violation`` span event,
- ``tallyspan.ledger.balanced`` is false (an agent run whose books do not balance),
- its status is ERROR.

Everything else (clean model calls, tool calls, other instrumentations' spans) is dropped. The file
runs inside Rotel's interpreter, which has only the standard library and ``rotel_sdk``, so it spells
the attribute names out; tests/collector checks them against ``tallyspan.semconv``.

Start it with collector-config/rotel/rotel.env::

    set -a; . collector-config/rotel/rotel.env; set +a
    rotel-agent start      # the binary ships in the `rotel` wheel (python -m pip install rotel)
"""

from __future__ import annotations

from typing import Any

VIOLATED = "tallyspan.violated"
LEDGER_BALANCED = "tallyspan.ledger.balanced"
EVENT_VIOLATION = "tallyspan.violation"
STATUS_CODE_ERROR = 2  # OTLP Status.code


def _attribute(span: Any, key: str) -> Any:
    """The plain value of one span attribute, or None when absent."""
    for key_value in span.attributes:
        if key_value.key == key:
            return None if key_value.value is None else key_value.value.value
    return None


def keep(span: Any) -> bool:
    """Whether a span shows a violation, an unbalanced ledger or an error."""
    if _attribute(span, VIOLATED) is True or _attribute(span, LEDGER_BALANCED) is False:
        return True
    if any(event.name == EVENT_VIOLATION for event in span.events):
        return True
    return span.status is not None and span.status.code == STATUS_CODE_ERROR


def process_spans(resource_spans: Any) -> None:
    """Rotel's entry point: drop, in place, every span of the batch that ``keep`` rejects."""
    for scope_spans in resource_spans.scope_spans:
        scope_spans.spans = [span for span in scope_spans.spans if keep(span)]
