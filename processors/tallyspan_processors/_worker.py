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

A worker that is gone (it did not survive ``fork()``) is started again on the next span or flush.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Sequence

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from tallyspan.plugin import (
    TURN_SLICE_S,
    Content,
    HandOvers,
    Settings,
    ShutdownBudget,
    Turns,
    after_fork_in_child,
    content_buffer,
    count,
    release_free_memory,
    start_thread,
    swallowed,
    turn_threshold,
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
#: nor does a batch of ``turn_threshold(max_queue_size) // BATCH_SHARE_OF_TURN`` spans). Each batch
#: starts on cold caches, the app having run meanwhile: the first span's checks took about 150 us, the
#: next ones about 50 us. With 50 ms instead of 20 ms, a batch behind a mock-transport OpenAI loop grew
#: from about 21 spans to about 50, and the worker's CPU per span went from 115-119 us to 106-107 us.
DEFAULT_BATCH_DELAY_MILLIS = 50.0
#: A batch of a quarter of the backlog from which turns are given is handed over at once, delay or not:
#: behind a fast app a long delay would otherwise fill the queue up to those (counted) turns.
BATCH_SHARE_OF_TURN = 4


class _Flush:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class _Handed:
    """A span handed down by a link above, with the content that link already took."""

    __slots__ = ("content", "span")

    def __init__(self, span: ReadableSpan, content: Content | None) -> None:
        self.span = span
        self.content = content


_STOP = object()
#: A busy spell of at least this many spans is a backlog, whose freed memory is given back afterwards.
_RELEASE_AFTER_SPANS = 1024


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
        self._max_queue_size = max_queue_size
        self._shutdown_timeout_s = max(0, shutdown_timeout_millis) / 1000
        self._budget = budget
        # A SimpleQueue (C, about a tenth of queue.Queue's put on the app's thread), bounded by the size
        # checked before each put: app threads racing each other may pass it by one span each.
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._inline_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        # Set before the worker starts and cleared when it returns: checked on every span instead of
        # Thread.is_alive(), a few Python-level calls (fork, which also ends it, is handled apart).
        self._worker_running = False
        self._is_shutdown = False
        # Set once shutdown stops waiting: the worker then discards (and counts) what is still queued.
        self._stopping = False
        # What a flush answers once shutdown began; until its drain ends, nothing is known forwarded.
        self._drained_at_shutdown = False
        self._batch_delay_s = max(0.0, batch_delay_millis / 1000)
        self._wake = threading.Event()
        # The worker's state as the app's thread reads it: waiting for work (a span wakes it), and the
        # time from which it is due to run (it waits for the GIL then; infinite while it waits for work).
        self._sleeping = False
        self._due = math.inf
        self._memory_releases = 0
        self._turn_at = turn_threshold(max_queue_size)
        self._batch_spans = max(1, self._turn_at // BATCH_SHARE_OF_TURN)
        self._turns = Turns("backpressure.worker_turns")
        self._hand_overs = hand_overs if hand_overs is not None else HandOvers()
        # The worker thread does not survive fork(): give the child a fresh queue and worker.
        after_fork_in_child(self, OffThreadProcessor._reset_after_fork)

    @property
    def memory_releases(self) -> int:
        """How often the worker gave free memory back to the OS after working off a backlog (at least
        1024 spans without the queue running empty); always 0 where the C library cannot (not glibc)."""
        return self._memory_releases

    def receive(self, span: ReadableSpan, content: Content | None) -> None:
        self._enqueue(_Handed(span, content))

    def forget(self, span: ReadableSpan) -> None:
        self._forget(span)

    def _enqueue(self, span: ReadableSpan | _Handed) -> None:
        """Queue ``span`` (``on_end``: the span itself; ``receive``: with its content), on the app's thread."""
        if self._is_shutdown:
            count("dropped.spans_after_shutdown")
            self._forget(span.span if isinstance(span, _Handed) else span)
            return
        if not self._worker_running and not self._ensure_worker():
            self._queue.put(span)
            self._work_off_here()
            return
        queued = self._queue.qsize()
        if queued >= self._max_queue_size:
            count("dropped.spans")
            self._forget(span.span if isinstance(span, _Handed) else span)
            return
        self._queue.put(span)
        queued += 1
        now = 0.0  # the clock, once read
        if queued >= self._turn_at:
            self._wake.set()  # a batch delay must not hold the turn up
            self._turns.give(queued)
        elif self._sleeping:
            # This span wakes the worker from its wait for work: it is due as soon as it is awake.
            self._sleeping = False
            self._due = 0.0
        elif queued >= self._batch_spans or (now := time.monotonic()) >= self._due:
            # The worker's wait is over (or a whole batch waits: cut it short) and it waits for the GIL:
            # hand it over now. Left to CPython, a thread waiting for the GIL behind a busy app wakes at
            # each of the app's short releases (a socket call, os.urandom) and loses the race for it
            # again, a futile wake-up (and two system calls) per app call, until it wins one by chance.
            if queued >= self._batch_spans:
                self._wake.set()
            self._turns.hand_over(queued)
            now = 0.0  # that may have waited
        # The store's writer is fed by the worker, not by this thread: it is handed the GIL here too
        # (what ``HandOvers.__call__`` does, without its frame and a second read of the clock).
        consumers = self._hand_overs.consumers
        if consumers:
            if not now:
                now = time.monotonic()
            for turns in consumers:
                if now >= turns.due:
                    turns.hand_over(while_due=True)

    #: On the app's thread: only enqueue (no frame of its own in between); the worker takes the content.
    on_end = _enqueue

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
            return self._drained_at_shutdown
        deadline = time.monotonic() + timeout_millis / 1000
        if not self._drain(deadline):
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
        self._drained_at_shutdown = self._drain(deadline)
        self._stopping = True
        self._wake.set()
        worker = self._worker
        if worker is not None:
            # A stuck worker stops by itself once it sees _stopping.
            self._queue.put(_STOP)
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        if worker is None or not worker.is_alive():
            self._discard_queued()  # spans that raced shutdown's flag into the queue
        super().shutdown()

    def _discard_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            self._discard(item)

    def _discard(self, item: object) -> None:
        if isinstance(item, _Flush):
            item.done.set()  # let a flush that waits on it go, rather than time out
        elif item is not _STOP:
            count("dropped.spans_at_shutdown")
            self._drained_at_shutdown = False
            if isinstance(item, _Handed):
                self._forget(item.span)
            elif isinstance(item, ReadableSpan):
                self._forget(item)

    def _drain(self, deadline: float) -> bool:
        """Wait until every span queued before this call has been forwarded."""
        if self._worker is None and self._queue.empty():
            return True
        if not self._ensure_worker():
            self._work_off_here()
            return True
        marker = _Flush()
        self._queue.put(marker)  # past the bound by one at most: a flush must not wait for room
        self._wake.set()
        return marker.done.wait(max(0.0, deadline - time.monotonic()))

    def _ensure_worker(self) -> bool:
        """Start the worker unless it runs; False where the interpreter refuses a thread (at exit, from
        Python 3.12): the caller then forwards the queue itself (``_work_off_here``)."""
        worker = self._worker
        if worker is not None and worker.is_alive():
            return True
        with self._lock:
            worker = self._worker
            if worker is not None and worker.is_alive():
                return True
            if worker is not None and not self._stopping:
                count("errors.worker.restarted")  # it died, or did not survive fork()
            if self._stopping:
                return True  # shutting down: nobody should start a worker any more
            worker = threading.Thread(target=self._run, name="tallyspan-worker", daemon=True)
            self._worker_running = True
            if not start_thread(worker):
                self._worker_running = False
                return False
            self._worker = worker
            return True

    def _run(self) -> None:
        # Our own exports (OTLP over HTTP, SQLite) must not be traced by instrumentations of the app.
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        turns = self._turns
        turns.consumer_started()
        batch: list[Handed] = []  # taken from the queue, not yet handed down the chain
        try:
            handled = 0  # spans since the queue was last empty
            slice_ends = time.monotonic() + TURN_SLICE_S
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    if batch:
                        self._forward_batch(batch)
                        continue  # that took a while: look again before answering a turn or waiting
                    if self._stopping:
                        return
                    turns.taken()  # worked off: an app thread that gave us its turn may go on
                    # A backlog was worked off: give its pages back.
                    if handled >= _RELEASE_AFTER_SPANS and release_free_memory():
                        self._memory_releases += 1
                    if handled and self._batch_delay_s:
                        # Busy: look again after the batch delay, rather than be woken by the next span
                        # and then wait for the GIL behind the app (see _enqueue); a pause with no span
                        # in it sends the worker to sleep below.
                        handled = 0
                        self._gather()
                        slice_ends = time.monotonic() + TURN_SLICE_S
                        continue
                    handled = 0
                    self._sleeping = True
                    self._due = math.inf
                    item = self._queue.get()
                    self._sleeping = False
                    if item is not _STOP and self._batch_delay_s and not isinstance(item, _Flush):
                        self._gather()  # the first span after a pause: let the next ones gather
                    slice_ends = time.monotonic() + TURN_SLICE_S
                if item is _STOP:
                    self._forward_batch(batch)
                    return
                if time.monotonic() >= slice_ends:
                    # A turn lasts a slice: the app's thread that gave it may go on (and take the GIL
                    # back at its next switch interval, to hand it over again at its next span).
                    self._forward_batch(batch)
                    turns.taken()
                    slice_ends = time.monotonic() + TURN_SLICE_S
                handled += 1
                self._handle(item, batch)
        finally:
            try:
                self._forward_batch(batch)  # a worker that dies (a bug) still hands down what it took
            finally:
                self._turns.taken()  # nobody waits for a worker that is gone
                self._worker_running = False
                detach(token)

    def _handle(self, item: object, batch: list[Handed]) -> None:
        """Add a queued span to ``batch`` (forwarded once full), or answer a flush marker."""
        if isinstance(item, _Flush):
            self._forward_batch(batch)  # everything queued before the flush, first
            item.done.set()
        elif item is _STOP:
            return
        elif self._stopping:
            self._discard(item)  # shutdown stopped waiting for this one
        elif isinstance(item, _Handed):
            batch.append((item.span, item.content))
        elif isinstance(item, ReadableSpan):
            batch.append((item, self._take(item)))
        else:
            count("dropped.spans_not_readable")  # on_end was handed something else
        if len(batch) >= FORWARD_BATCH_SPANS:
            self._forward_batch(batch)

    def _work_off_here(self) -> None:
        """Forward everything queued on the calling thread: no worker thread could be started (the
        interpreter is finalizing). One caller at a time, so the spans keep their order."""
        with self._inline_lock:
            token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
            batch: list[Handed] = []
            try:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        return
                    self._handle(item, batch)
            finally:
                try:
                    self._forward_batch(batch)
                finally:
                    detach(token)

    def _gather(self) -> None:
        """Let spans gather for the batch delay: meanwhile the app runs without contending for the GIL,
        and the checks then run back to back on warm caches (per span, interleaved with the app, they
        cost about twice the CPU). A flush, shutdown or a turn cuts the wait short."""
        self._turns.taken()  # the GIL is not ours to keep while we wait
        self._due = time.monotonic() + self._batch_delay_s
        self._wake.wait(self._batch_delay_s)
        self._wake.clear()

    def _take(self, span: ReadableSpan) -> Content | None:
        try:
            return take_content(span)
        except Exception:  # content we cannot read: the span still goes through, checked without it
            swallowed(_logger, "content.take", "tallyspan could not read a span's content")
            return None

    def _forward_batch(self, batch: list[Handed]) -> None:
        """Hand ``batch`` down the chain (``forward_batch``) and empty it; once shutdown stopped waiting,
        discard it instead (counted)."""
        if not batch:
            return
        items = batch.copy()
        batch.clear()
        if self._stopping:
            for span, content in items:
                self._discard(_Handed(span, content))
            return
        forward_batch(
            self._downstream,
            items,
            failure_key="worker.on_end",
            failure_message="a span processor failed on the worker",
            logger=_logger,
        )

    def _reset_after_fork(self) -> None:
        self._queue = queue.SimpleQueue()
        self._worker_running = False
        self._sleeping = False
        self._due = math.inf
        self._lock = threading.Lock()
        self._inline_lock = threading.Lock()
        self._wake = threading.Event()
        self._turns.reset_after_fork()
        self._worker = None


def worker_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor:
    """The ``worker`` entry point of ``tallyspan.components``: the head of the chain."""
    return OffThreadProcessor(downstream, budget=settings.shutdown_budget, hand_overs=settings.hand_overs)
