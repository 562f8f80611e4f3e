"""Adopting the span processors an app already put on its tracer provider.

An app that set up its own export (``provider.add_span_processor(BatchSpanProcessor(exporter))``,
Phoenix's ``register()``, a vendor's distro) would otherwise export each span the moment it ends, before
our chain has checked it: the backend would never see ``tallyspan.violation_types`` or the ledger
balance. ``instrument()`` therefore moves those processors behind its chain, so they export the
enriched spans, and ``uninstrument()`` gives them back to the provider, first in line as before.

The SDK has no public way to remove a processor; both of its multi-processors keep a tuple in
``_span_processors`` guarded by ``_lock``, which is what we read and replace. A provider of another
shape is left alone (nothing adopted).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

__all__ = ["Borrowed", "adopt", "give_back"]

_logger = logging.getLogger(__name__)


class Borrowed(SpanProcessor):
    """One of the app's processors, now fed by our chain; shut down only if the provider is."""

    def __init__(self, processor: SpanProcessor) -> None:
        self.processor = processor
        self.returned = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.processor.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self.processor.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        # After uninstrument() the processor is the provider's again: its owner shuts it down.
        if self.returned:
            self.processor.force_flush()
        else:
            self.processor.shutdown()


def _multi(provider: TracerProvider) -> tuple[Any, threading.Lock] | None:
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if not isinstance(getattr(multi, "_span_processors", None), tuple) or lock is None:
        _logger.debug("tracer provider of an unknown shape: its span processors are not adopted")
        return None
    return multi, lock


def adopt(provider: TracerProvider, keep: type[SpanProcessor]) -> tuple[Borrowed, ...]:
    """Take the provider's processors off it (all but those of type ``keep``) and return them wrapped."""
    found = _multi(provider)
    if found is None:
        return ()
    multi, lock = found
    with lock:
        current: tuple[SpanProcessor, ...] = multi._span_processors
        taken = tuple(processor for processor in current if not isinstance(processor, keep))
        multi._span_processors = tuple(processor for processor in current if isinstance(processor, keep))
    return tuple(Borrowed(processor) for processor in taken)


def give_back(provider: TracerProvider, borrowed: tuple[Borrowed, ...]) -> None:
    """Put adopted processors back on the provider, ahead of any added since."""
    if not borrowed:
        return
    found = _multi(provider)
    if found is None:
        return
    multi, lock = found
    for item in borrowed:
        item.returned = True
    with lock:
        multi._span_processors = (*(item.processor for item in borrowed), *multi._span_processors)
