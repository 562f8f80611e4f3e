"""Move the chain's work off the app's thread: ``on_end`` only enqueues; one worker takes each span's
content and runs the checks, the ledger and the exports, in the order the spans ended.

The app pays for the instrumentation only. The queue is bounded; a span that does not fit is dropped
and counted (``tallyspan.stats()["dropped.spans"]``), the app never waits for room, and the chain forgets it (its
ContentBuffer entry, the ledger's note of its run), so a burst cannot leave state behind. ``force_flush``
and ``shutdown`` drain the queue first, so no span leaves the process without its violations; both
give up at their deadline, and what shutdown gave up is counted (``dropped.spans_at_shutdown``).

Turns: behind an app thread that is busy and often lets go of the GIL for a moment, CPython can starve
the worker for seconds (``tallyspan.plugin.Turns`` says why). While it works, the worker looks for spans
again after each batch delay instead of being woken by the next span; once that delay is over, or a
batch of ``max_queue_size // 64`` spans waits, the app's next span hands it the GIL (a hand-over; while
one is not taken, again once the backlog doubled: a batch of slow checks can outlast it). Once
``max_queue_size // 16`` spans wait, the app's thread lets go of the GIL until the worker runs (at most
10 ms; while a turn is not taken, again each time the backlog grew by another sixteenth of the queue).
Those waits, and hand-overs the worker did not take within 10 ms, are counted as
``tallyspan.stats()["backpressure.worker_turns"]``.

The thread, its queue, batching, flushes, fork reset and memory release are a
``tallyspan.plugin.Background`` (``_ChainThread``); this module says what a batch is (each span's
content taken, then the chain) and what the app's thread does at each span. A worker that is gone
(it did not survive ``fork()``) is started again on the next span or flush.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from tallyspan.plugin import (
    Background,
    Content,
    HandOvers,
    Settings,
    ShutdownBudget,
    content_buffer,
    count,
    swallowed,
)
from tallyspan_processors._content import take_content
from tallyspan_processors._wrapping import Handed, WrappingProcessor, flush_all, forward_batch

__all__ = ["DEFAULT_MAX_QUEUE_SIZE", "OffThreadProcessor", "worker_component"]

_logger = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE_SIZE = 8192
#: Spans the worker hands down the chain at most in one batch (``forward_batch``), a link at a time.
FORWARD_BATCH_SPANS = 64
#: How long ``shutdown`` waits for the queue to drain (the SDK's shutdown takes no timeout).
DEFAULT_SHUTDOWN_TIMEOUT_MILLIS = 30000
#: How long the worker lets spans gather before it handles them (flush and shutdown do not wait for it,
#: nor does a batch of a quarter of ``turn_threshold(max_queue_size)`` spans: behind a fast app a long
#: delay would otherwise fill the queue up to those counted turns). Each batch starts on cold caches,
#: the app having run meanwhile: the first span's checks cost about three times the next ones'.
DEFAULT_BATCH_DELAY_MILLIS = 50.0
#: A busy spell of at least this many spans is a backlog, whose freed memory is given back afterwards.
_RELEASE_AFTER_SPANS = 1024


class _Handed:
    """A span handed down by a link above, with the content that link already took."""

    __slots__ = ("content", "span")

    def __init__(self, span: ReadableSpan, content: Content | None) -> None:
        self.span = span
        self.content = content


class _ChainThread(Background[ReadableSpan | _Handed]):
    """The worker's thread: takes each span's content, then hands the batch down the chain."""

    def __init__(self, processor: OffThreadProcessor, max_queue_size: int, batch_delay_s: float) -> None:
        super().__init__(
            name="tallyspan-worker",
            max_queued=max_queue_size,
            drop_key="dropped.spans",
            after_shutdown_key="dropped.spans_after_shutdown",
            at_shutdown_key="dropped.spans_at_shutdown",
            turns_key="backpressure.worker_turns",
            restarted_key="errors.worker.restarted",
            delay_s=batch_delay_s,
            handle_at_most=FORWARD_BATCH_SPANS,
            producer_hands_over=True,
            release_after=_RELEASE_AFTER_SPANS,
        )
        self._processor = processor

    def handle(self, batch: list[ReadableSpan | _Handed], size: int) -> None:
        handed: list[Handed] = []
        for item in batch:
            if isinstance(item, _Handed):
                handed.append((item.span, item.content))
            elif isinstance(item, ReadableSpan):
                handed.append((item, self._content_of(item)))
            else:
                count("dropped.spans_not_readable")  # on_end was handed something else
        if handed:
            forward_batch(
                self._processor._downstream,
                handed,
                failure_key="worker.on_end",
                failure_message="a span processor failed on the worker",
                logger=_logger,
            )

    def discarded(self, item: ReadableSpan | _Handed) -> None:
        self._processor._forget(item.span if isinstance(item, _Handed) else item)

    def failed(self, error: BaseException) -> None:
        # Only a BaseException gets here (forward_batch and _content_of catch the rest), a bug's
        # sys.exit(): it ends the thread, which the next span starts again (counted).
        raise error

    def _content_of(self, span: ReadableSpan) -> Content | None:
        try:
            return take_content(span)
        except Exception:  # content we cannot read: the span still goes through, checked without it
            swallowed(_logger, "content.take", "tallyspan could not read a span's content")
            return None


class OffThreadProcessor(WrappingProcessor):
    """Forward ended spans to ``downstream`` from one worker thread, through a bounded queue.

    A wrapping link like the others: at the head of the chain (``on_end``) the worker takes each span's
    content on its own thread; below another link (``receive``) it carries the content it was handed.

    Args:
        downstream: the processors to run on the worker (usually one ``WrappingProcessor`` chain).
        max_queue_size: spans waiting at most; more are dropped and counted.
        shutdown_timeout_millis: how long ``shutdown`` waits for the queued spans to be forwarded.
        batch_delay_millis: how long spans gather before the worker handles them (0: not at all); a
            batch of ``max_queue_size // 64`` spans is handled at once.
        budget: the instrumentation's shutdown budget, shared with the links below; when given, it
            bounds ``shutdown`` instead of ``shutdown_timeout_millis``.
        hand_overs: the instrumentation's link to the consumers our own threads feed (the store's
            writers, ``Settings.hand_overs``): each span the app ends hands them the GIL once they are
            due. Without it, this processor hands over to none.
    """

    def __init__(
        self,
        downstream: Sequence[SpanProcessor],
        *,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        shutdown_timeout_millis: int = DEFAULT_SHUTDOWN_TIMEOUT_MILLIS,
        budget: ShutdownBudget | None = None,
        batch_delay_millis: float = DEFAULT_BATCH_DELAY_MILLIS,
        hand_overs: HandOvers | None = None,
    ) -> None:
        if max_queue_size < 1:
            raise ValueError("max_queue_size must be at least 1")
        super().__init__(downstream)
        self._shutdown_timeout_s = max(0, shutdown_timeout_millis) / 1000
        self._budget = budget
        self._lock = threading.Lock()
        self._is_shutdown = False
        # What a flush answers once shutdown began; until its drain ends, nothing is known forwarded.
        self._drained_at_shutdown = False
        self._hand_overs = hand_overs if hand_overs is not None else HandOvers()
        self._background = _ChainThread(self, max_queue_size, max(0.0, batch_delay_millis / 1000))
        self._submit = self._background.submit  # bound once: it runs on the app's thread at each span

    @property
    def memory_releases(self) -> int:
        """How often the worker gave free memory back to the OS after working off a backlog (at least
        1024 spans without the queue running empty); always 0 where the C library cannot (not glibc)."""
        return self._background.memory_releases

    def on_end(self, span: ReadableSpan) -> None:
        # On the app's thread: only enqueue (a full queue drops the span, counted and forgotten); the
        # worker takes the content. A batch waiting, or the end of the worker's gathering wait, hands
        # it the GIL, and a backlog of a sixteenth of the queue gives it a turn (Background.submit).
        if self._is_shutdown:
            self._dropped_after_shutdown(span)
        elif self._submit(span):
            # The store's writer is fed by the worker, not by this thread: it is handed the GIL here too.
            self._hand_overs()

    def receive(self, span: ReadableSpan, content: Content | None) -> None:
        if self._is_shutdown:
            self._dropped_after_shutdown(span)
        elif self._submit(_Handed(span, content)):
            self._hand_overs()

    def forget(self, span: ReadableSpan) -> None:
        self._forget(span)

    def _dropped_after_shutdown(self, span: ReadableSpan) -> None:
        count("dropped.spans_after_shutdown")
        self._forget(span)

    def _forget(self, span: ReadableSpan) -> None:
        """Free what the chain holds for a span it will never see end (a burst must leave nothing behind)."""
        try:
            if span.context is not None:
                content_buffer().pop(span.context.span_id)
            super().forget(span)
        except Exception:  # on the app's thread: never let our bookkeeping break the span's end
            swallowed(_logger, "worker.forget", "tallyspan could not forget a dropped span")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if self._is_shutdown:
            # Nothing can be queued any more: answer at once instead of waiting on a stopped worker.
            return self._drained_at_shutdown and not self._background.dropped_at_shutdown
        deadline = time.monotonic() + timeout_millis / 1000
        if not self._background.flush_until(deadline):
            return False
        remaining_millis = int((deadline - time.monotonic()) * 1000)
        return remaining_millis > 0 and flush_all(self._downstream, remaining_millis)

    def shutdown(self) -> None:
        with self._lock:
            if self._is_shutdown:
                return
            self._is_shutdown = True
        budget = self._budget
        deadline = budget.start() if budget is not None else time.monotonic() + self._shutdown_timeout_s
        # Every span queued before shutdown goes down the chain, within the deadline; what is still
        # queued then (a stuck worker), or raced the flag in, is dropped and counted.
        self._drained_at_shutdown = self._background.flush_until(deadline)
        self._background.stop(deadline, give_up_queued=True)
        super().shutdown()


def worker_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor:
    """The ``worker`` entry point of ``tallyspan.components``: the head of the chain."""
    return OffThreadProcessor(downstream, budget=settings.shutdown_budget, hand_overs=settings.hand_overs)
