"""The wrapping-processor chain: a processor computes extra data for an ended span and forwards an
enriched copy to the processors it wraps.

``instrument()`` builds ``OffThreadProcessor(ChecksProcessor(LedgerProcessor(exporters...)))``; each
link only knows the tuple of processors below it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from tallyspan.plugin import swallowed

__all__ = ["WrappingProcessor", "flush_all", "shutdown_all"]

_logger = logging.getLogger(__name__)


def flush_all(processors: Sequence[SpanProcessor], timeout_millis: int) -> bool:
    """Flush each processor in turn within one shared deadline; True if all flushed in time."""
    deadline = time.monotonic() + timeout_millis / 1000
    flushed = True
    for processor in processors:
        remaining_millis = int((deadline - time.monotonic()) * 1000)
        if remaining_millis <= 0:
            return False
        try:
            flushed = processor.force_flush(remaining_millis) and flushed
        except Exception:  # a downstream processor's failure must not stop the others flushing
            swallowed(_logger, "flush", "a span processor failed to flush")
            flushed = False
    return flushed


def shutdown_all(processors: Sequence[SpanProcessor]) -> None:
    """Shut each processor down, logging (once) any that fails."""
    for processor in processors:
        try:
            processor.shutdown()
        except Exception:  # one processor's failure must not keep the others open
            swallowed(_logger, "shutdown", "a span processor failed to shut down")


class WrappingProcessor(SpanProcessor):
    """A processor that enriches ended spans and forwards them to ``downstream``.

    Subclasses override :meth:`process`. It runs on the chain's worker thread (see
    ``OffThreadProcessor``); an exception in it is logged once and counted, and the span is forwarded
    unenriched, so no span is ever lost because of us.
    """

    def __init__(self, downstream: Sequence[SpanProcessor]) -> None:
        self._downstream = tuple(downstream)

    @property
    def downstream(self) -> tuple[SpanProcessor, ...]:
        """The processors this one forwards to."""
        return self._downstream

    def process(self, span: ReadableSpan) -> ReadableSpan:
        """Return the span to forward: ``span`` itself or an enriched copy. The default forwards it as is."""
        return span

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for processor in self._downstream:
            try:
                processor.on_start(span, parent_context=parent_context)
            except Exception:  # a downstream processor must not break the span's start in the app
                swallowed(_logger, "on_start", "a span processor failed in on_start")

    def on_end(self, span: ReadableSpan) -> None:
        try:
            forwarded = self.process(span)
        except Exception:  # our enrichment failed: forward the span as it came rather than lose it
            swallowed(_logger, f"process.{type(self).__name__}", f"{type(self).__name__} failed on a span")
            forwarded = span
        for processor in self._downstream:
            try:
                processor.on_end(forwarded)
            except Exception:  # one exporter's failure must not keep the span from the others
                swallowed(_logger, "on_end", "a span processor failed in on_end")

    def forget(self, span: ReadableSpan) -> None:
        """``span`` was dropped before reaching :meth:`on_end` (a full queue): free what is kept for it.

        Called on the app's thread, so it must be cheap; the default passes it down the chain.
        """
        for processor in self._downstream:
            if isinstance(processor, WrappingProcessor):
                processor.forget(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return flush_all(self._downstream, timeout_millis)

    def shutdown(self) -> None:
        shutdown_all(self._downstream)
