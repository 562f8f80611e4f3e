"""Adopting the span processors an app already put on its tracer provider.

An app that set up its own export (``provider.add_span_processor(BatchSpanProcessor(exporter))``,
Phoenix's ``register()``, a vendor's distro) would otherwise export each span the moment it ends, before
our chain has checked it: the backend would never see ``tallyspan.violation_types`` or the ledger
balance. ``instrument()`` therefore moves those processors behind its chain, so they export the
enriched spans, and ``uninstrument()`` gives them back to the provider, first in line as before.

The SDK has no public way to remove a processor; both of its multi-processors keep a tuple in
``_span_processors`` guarded by ``_lock``, which is what we read and replace. A provider of another
shape is left alone (nothing adopted).

Our chain's head goes on the provider the same way, never through ``provider.add_span_processor``: a
subclass may do more there, and phoenix.otel's ``TracerProvider`` (what ``register()`` returns) shuts
its default processor, the very exporter ``register()`` set up, down at the first call, so an adopted
processor would be dead before its first span. The adopted processors come off and the head goes on in
one step under the provider's lock (``take_over``): no span ends between the two with nobody to
export it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from tallyspan._config import ShutdownBudget
from tallyspan._fork import start_thread
from tallyspan._selfstats import count, swallowed

__all__ = ["Borrowed", "Guarded", "adoptable", "count_batch_drops", "give_back", "remove", "take_over"]

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


def remove(provider: TracerProvider, processor: SpanProcessor) -> bool:
    """Take ``processor`` off the provider; False when it is not there or the provider has another shape."""
    found = _multi(provider)
    if found is None:
        return False
    multi, lock = found
    with lock:
        current: tuple[SpanProcessor, ...] = multi._span_processors
        kept = tuple(item for item in current if item is not processor)
        multi._span_processors = kept
    return len(kept) < len(current)


class _CountingMetrics:
    """Stands in for an SDK batch processor's metrics to count what it drops (``drop_items``): the SDK
    itself only logs one line per 20 s. Everything is passed on to the metrics it replaces."""

    def __init__(self, inner: Any, signal: str) -> None:
        self.inner = inner
        self._key = f"dropped.batch_processor.{signal}."
        self.dropped = 0

    def register_queue_size(self, get_queue_size: Callable[[], int]) -> None:
        self.inner.register_queue_size(get_queue_size)

    def drop_items(self, number: int, error_type: str = "queue_full") -> None:
        self.dropped += number
        count(self._key + error_type, number)
        self.inner.drop_items(number, error_type)

    def finish_items(self, number: int) -> None:
        self.inner.finish_items(number)


def count_batch_drops(processor: object, signal: str) -> _CountingMetrics | None:
    """Count the drops of an SDK ``BatchSpanProcessor`` / ``BatchLogRecordProcessor`` in
    ``tallyspan.stats()`` (``dropped.batch_processor.<signal>.queue_full``); the counter, or None when
    ``processor`` is not one, or of an SDK version whose internals differ (then nothing is counted: so
    before 1.41, whose batch processors drop from a bounded deque with no metrics to tell)."""
    batch = getattr(processor, "_batch_processor", None)
    metrics = getattr(batch, "_metrics", None)
    if batch is None or not callable(getattr(metrics, "drop_items", None)):
        return None
    if not isinstance(metrics, _CountingMetrics):
        metrics = batch._metrics = _CountingMetrics(metrics, signal)
    return metrics


class Guarded(SpanProcessor):
    """A processor of the app's behind our chain (adopted, or given in ``span_processors``): its drops
    are counted when it is an SDK batch processor, and its shutdown, run on a thread of its own, waits
    at most for the shutdown budget (an SDK batch processor exporting to a hanging backend would hold
    the app's exit for its own 30 s, and then its exporter's timeout). Its ``force_flush`` answers False
    when the processor dropped spans since the last flush."""

    def __init__(self, processor: SpanProcessor, budget: ShutdownBudget) -> None:
        self.processor = processor
        self._budget = budget
        inner = processor.processor if isinstance(processor, Borrowed) else processor
        self._drops = count_batch_drops(inner, "spans")
        self._drops_at_flush = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.processor.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        # Our worker runs with instrumentation suppressed (our own exports are not to be traced), but the
        # app's processor is owed the context it would have had on the provider, where spans end in the
        # app's code: Logfire's root processor drops every span that ends while instrumentation is
        # suppressed. The SDK's processors suppress their own exports themselves.
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, False))
        try:
            self.processor.on_end(span)
        finally:
            detach(token)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # Only False is a failure: a processor that does not override force_flush answers None on SDK
        # releases before 1.40 (the base class's has no return), and it had nothing to flush.
        flushed = self.processor.force_flush(timeout_millis) is not False
        if self._drops is None:
            return flushed
        dropped = self._drops.dropped
        nothing_lost = dropped == self._drops_at_flush
        self._drops_at_flush = dropped
        return flushed and nothing_lost

    def shutdown(self) -> None:
        def run() -> None:
            try:
                self.processor.shutdown()
            except Exception:  # the app's processor failing to stop must not stop ours
                swallowed(_logger, "shutdown", "a span processor failed to shut down")

        worker = threading.Thread(target=run, name="tallyspan-app-processor-shutdown", daemon=True)
        if not start_thread(worker):
            run()  # the interpreter is finalizing (3.12+): no thread, so no bound but the processor's own
            return
        worker.join(self._budget.remaining())
        if worker.is_alive():
            count("errors.app_processor.shutdown_timeout")


def adoptable(provider: TracerProvider, keep: type[SpanProcessor]) -> tuple[Borrowed, ...]:
    """The provider's processors (all but those of type ``keep``), wrapped; they stay on the provider
    until ``take_over`` takes them off (so a chain that fails to build leaves the app's export as it
    was). Nothing on a provider of an unknown shape."""
    found = _multi(provider)
    if found is None:
        return ()
    multi, lock = found
    with lock:
        current: tuple[SpanProcessor, ...] = multi._span_processors
    return tuple(Borrowed(processor) for processor in current if not isinstance(processor, keep))


def take_over(provider: TracerProvider, head: SpanProcessor, borrowed: tuple[Borrowed, ...]) -> None:
    """Take the ``borrowed`` processors off the provider and put ``head`` on it, last, in one step.

    Never through the provider's ``add_span_processor`` (see the module's docstring: phoenix.otel's
    shuts the exporter ``register()`` set up down there); only a provider of an unknown shape, from
    which nothing was borrowed, gets ``head`` that way.
    """
    found = _multi(provider)
    if found is None:
        provider.add_span_processor(head)
        return
    multi, lock = found
    taken = {id(item.processor) for item in borrowed}
    with lock:
        current: tuple[SpanProcessor, ...] = multi._span_processors
        multi._span_processors = (*(item for item in current if id(item) not in taken), head)


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
