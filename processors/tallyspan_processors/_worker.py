"""Move the chain's work off the app's thread: ``on_end`` only enqueues; one worker runs the checks,
the ledger and the exports, in the order the spans ended.

The app pays for the instrumentation only. The queue is bounded; a span that does not fit is dropped
and counted (``tallyspan.stats()["dropped.spans"]``), never blocks the app. ``force_flush`` and
``shutdown`` drain the queue first, so no span leaves the process without its violations.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Sequence

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from tallyspan._config import Settings
from tallyspan._selfstats import count, swallowed
from tallyspan_processors._wrapping import flush_all, shutdown_all

__all__ = ["DEFAULT_MAX_QUEUE_SIZE", "OffThreadProcessor", "worker_component"]

_logger = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE_SIZE = 8192


class _Flush:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class OffThreadProcessor(SpanProcessor):
    """Forward ended spans to ``downstream`` from one worker thread, through a bounded queue.

    Args:
        downstream: the processors to run on the worker (usually one ``WrappingProcessor`` chain).
        max_queue_size: spans waiting at most; more are dropped and counted.
    """

    def __init__(
        self, downstream: Sequence[SpanProcessor], *, max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE
    ) -> None:
        if max_queue_size < 1:
            raise ValueError("max_queue_size must be at least 1")
        self._downstream = tuple(downstream)
        self._max_queue_size = max_queue_size
        self._queue: queue.Queue[object] = queue.Queue(max_queue_size)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._is_shutdown = False
        if hasattr(os, "register_at_fork"):
            # The worker thread does not survive fork(): give the child a fresh queue and worker.
            self_ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _reset_after_fork(self_ref))

    @property
    def downstream(self) -> tuple[SpanProcessor, ...]:
        """The processors the worker forwards to."""
        return self._downstream

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for processor in self._downstream:
            try:
                processor.on_start(span, parent_context=parent_context)
            except Exception:  # a downstream processor must not break the span's start in the app
                swallowed(_logger, "on_start", "a span processor failed in on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if self._is_shutdown:
            count("dropped.spans_after_shutdown")
            return
        self._ensure_worker()
        try:
            self._queue.put_nowait(span)
        except queue.Full:
            count("dropped.spans")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        if not self._drain(deadline):
            return False
        remaining_millis = int((deadline - time.monotonic()) * 1000)
        return remaining_millis > 0 and flush_all(self._downstream, remaining_millis)

    def shutdown(self) -> None:
        if self._is_shutdown:
            return
        self._is_shutdown = True
        self._drain(time.monotonic() + 30)
        worker = self._worker
        if worker is not None:
            self._queue.put(_STOP)
            worker.join(timeout=5)
        shutdown_all(self._downstream)

    def _drain(self, deadline: float) -> bool:
        """Wait until every span queued before this call has been forwarded."""
        if self._worker is None:
            return True
        marker = _Flush()
        try:
            self._queue.put(marker, timeout=max(0.0, deadline - time.monotonic()))
        except queue.Full:
            return False
        return marker.done.wait(max(0.0, deadline - time.monotonic()))

    def _ensure_worker(self) -> None:
        if self._worker is not None:
            return
        with self._lock:
            if self._worker is None:
                worker = threading.Thread(target=self._run, name="tallyspan-worker", daemon=True)
                worker.start()
                self._worker = worker

    def _run(self) -> None:
        # Our own exports (OTLP over HTTP, SQLite) must not be traced by instrumentations of the app.
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                if isinstance(item, _Flush):
                    item.done.set()
                    continue
                assert isinstance(item, ReadableSpan)
                for processor in self._downstream:
                    try:
                        processor.on_end(item)
                    except Exception:  # the worker must outlive any processor's failure
                        swallowed(_logger, "worker.on_end", "a span processor failed on the worker")
        finally:
            detach(token)

    def _reset_after_fork(self) -> None:
        self._queue = queue.Queue(self._max_queue_size)
        self._lock = threading.Lock()
        self._worker = None


def _reset_after_fork(self_ref: weakref.ref[OffThreadProcessor]) -> None:
    processor = self_ref()
    if processor is not None:
        processor._reset_after_fork()


def worker_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor:
    """The ``worker`` entry point of ``tallyspan.components``: the head of the chain."""
    return OffThreadProcessor(downstream)
