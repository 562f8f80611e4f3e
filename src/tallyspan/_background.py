"""One thread of ours that works off a bounded queue in batches: the one shape of tallyspan's background work.

The chain's worker and the store's writer threads are subclasses of :class:`Background` (the SDK serves
spans and logs with one such class too, ``BatchProcessor``). A subclass says what a batch is
(:meth:`Background.handle`) and, where it needs to, what a flush, a stop, a pause and a loss mean for
it; the rest is here, once:

- a bounded queue (``size`` per item, or one queue slot per item): an item that does not fit is
  dropped and counted under ``drop_key``, the caller never waits for room;
- the thread, started with the first item or flush (:func:`tallyspan._fork.start_thread`) and again
  in a forked child (it does not survive ``fork()``); where the interpreter refuses a thread (at exit,
  from Python 3.12) the caller works the queue off itself, so nothing depends on a thread at exit;
- batching: after a pause the thread lets items gather for ``delay_s`` (``batch_size`` queued end the
  wait at once), and while items keep coming it looks for them again every ``delay_s`` rather than be
  woken by each; it hands them to ``handle`` at most ``handle_at_most`` at a time, in queue order;
- flush tokens: :meth:`Background.flush_until` waits, up to a deadline, until every item submitted
  before it is handled, then asks the subclass (:meth:`Background.flushed`) for its answer;
- a stop with a deadline (:meth:`Background.stop`): what the thread had not handled by then, when
  the caller gives it up, is dropped and counted under ``at_shutdown_key``;
- turns under the GIL (:class:`tallyspan._turns.Turns`): the producer lets go of the GIL once the
  thread is behind; with ``producer_hands_over`` (the chain's worker, fed by the app's thread) the
  producer also hands it the GIL once its gathering wait is over and the thread answers after a
  slice of work; otherwise (the store's writers, whose every statement lets go of the GIL) it answers
  at once and takes the app's hand-overs through ``hand_overs``;
- memory: after ``release_after`` items, the C heap's free pages go back to the OS, at once when the
  queue runs empty after that many without a pause (``release_idle_s`` None), or after a pause of
  ``release_idle_s`` with nothing queued.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final, Generic, TypeVar

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

from tallyspan._fork import after_fork_in_child, start_thread
from tallyspan._memory import release_free_memory
from tallyspan._selfstats import count, swallowed
from tallyspan._turns import TURN_SLICE_S, HandOvers, Turns, turn_threshold

__all__ = ["Background"]

_logger = logging.getLogger(__name__)

T = TypeVar("T")

_STOP: Final = object()
"""Queued by ``stop``: everything before it is handled, then the thread ends."""
_NOTHING: Final = object()


class _Token:
    """A flush in the queue: answered once every item queued before it is handled."""

    __slots__ = ("deadline", "done", "result")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.done = threading.Event()
        self.result = False


@contextmanager
def _suppressed() -> Iterator[None]:
    # Our own work (exports, SQL) must not be traced by the app's instrumentations.
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        yield
    finally:
        detach(token)


class Background(Generic[T]):
    """A bounded queue worked off in batches by one thread of ours (see the module docstring).

    Args:
        name: the thread's name.
        max_queued: items waiting at most (the sum of their sizes when ``sized``).
        drop_key: the ``tallyspan.stats()`` counter of items that found the queue full.
        turns_key: the counter of the turns the producer waited for (``Turns``).
        restarted_key: the counter of threads started again after one died (a bug of ours).
        after_shutdown_key: items submitted after ``stop`` (default ``drop_key``).
        at_shutdown_key: items given up by ``stop`` (default ``drop_key``).
        delay_s: how long items gather before they are handled (0: not at all).
        batch_size: items queued that end the gathering at once (default a quarter of the backlog
            from which the producer gives turns).
        handle_at_most: items per ``handle`` call at most.
        sized: items come with a size (``submit(item, size)``) bounded together; else each takes a
            slot and the producer's check is lock-free (app threads racing each other may pass the
            bound by an item each).
        producer_hands_over: the producer hands the thread the GIL once its wait is over, and the
            thread answers a turn after ``TURN_SLICE_S`` of work; else it answers at once.
        hand_overs: the app threads' hand-overs this thread takes (``Settings.hand_overs``).
        release_after: items after which free memory is given back.
        release_idle_s: None: give it back when the queue runs empty after ``release_after`` items
            without a pause; else after a pause this long once ``release_after`` items were handled.
    """

    def __init__(
        self,
        *,
        name: str,
        max_queued: int,
        drop_key: str,
        turns_key: str,
        restarted_key: str,
        after_shutdown_key: str | None = None,
        at_shutdown_key: str | None = None,
        delay_s: float = 0.0,
        batch_size: int | None = None,
        handle_at_most: int = 64,
        sized: bool = False,
        producer_hands_over: bool = False,
        hand_overs: HandOvers | None = None,
        release_after: int = 1024,
        release_idle_s: float | None = None,
    ) -> None:
        if max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self.name = name
        self._max_queued = max_queued
        self._drop_key = drop_key
        self._after_shutdown_key = after_shutdown_key or drop_key
        self._at_shutdown_key = at_shutdown_key or drop_key
        self._restarted_key = restarted_key
        self._delay_s = max(0.0, delay_s)
        self._turn_at = turn_threshold(max_queued)
        self._batch_size = batch_size if batch_size is not None else max(1, self._turn_at // 4)
        self._handle_at_most = max(1, handle_at_most)
        self._sized = sized
        self._producer_hands_over = producer_hands_over
        self._hand_overs = hand_overs
        self._release_after = release_after
        self._release_idle_s = release_idle_s
        self._turns = Turns(turns_key)
        self._closed = False  # stop() was called: later items are dropped
        self._given_up = False  # the thread drops what it meets instead of handling it
        self._stop_taken = False  # a thread (or the caller) took the stop: the others end too
        self._lost = 0
        self._lost_at_shutdown = 0
        self._failed_since_flush = False
        self._memory_releases = 0
        self._fresh_state()
        # The thread does not survive fork(): the child starts afresh with an empty queue.
        after_fork_in_child(self, Background._reset_after_fork)

    def _fresh_state(self) -> None:
        # A SimpleQueue (C, about a tenth of queue.Queue's put on the producer's thread); a thread that
        # waits for work blocks in its get(), which a put wakes without any Python-level notify.
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._queued = 0  # the sizes queued, when sized (under _lock)
        self._lock = threading.Lock()
        self._here_lock = threading.Lock()
        self._wake = threading.Event()  # cuts a gathering wait short
        self._idle = threading.Event()  # set while the thread waits with nothing queued nor due
        self._flushes: set[_Token] = set()
        self._thread: threading.Thread | None = None
        # Set before the thread starts and cleared when it returns: read on every submit instead of
        # Thread.is_alive(), a few Python-level calls.
        self._running = False
        self._sleeping = False  # the thread waits for work: the next item wakes it
        self._unreleased = 0
        self._slice_ends = 0.0  # when the thread answers a turn it is working through

    # --- what a subclass says ---------------------------------------------------------------------------

    def handle(self, batch: list[T], size: int) -> None:
        """Handle ``batch`` (in queue order; ``size``: their sizes together), on the thread, or on the
        caller's where no thread can start. What it cannot handle it counts with :meth:`count_lost`."""
        raise NotImplementedError

    def flushed(self, deadline: float) -> bool:
        """Called once every item before a flush is handled: the flush's answer (default True)."""
        del deadline
        return True

    def stopped(self) -> None:
        """The last call of a stop, once everything before it is handled (or given up)."""

    def discarded(self, item: T) -> None:
        """``item`` will never be handled (dropped or given up; already counted): free what it holds."""
        del item

    def idle_timeout(self) -> float | None:
        """How long the thread waits for work before it calls :meth:`idle` (None: for ever)."""
        return None

    def idle(self) -> None:
        """Called when ``idle_timeout`` passed with nothing queued (a retry, say)."""

    def release_memory(self) -> bool:
        """Give free memory back after a busy spell; True if it was (counted in ``memory_releases``)."""
        return release_free_memory()

    def failed(self, error: BaseException) -> None:
        """``handle``, ``flushed`` or ``stopped`` raised ``error`` (even ``SystemExit``): logged once and
        counted, and the thread goes on. A subclass may raise it again to end the thread (the next item
        starts another, counted under ``restarted_key``)."""
        del error
        swallowed(_logger, f"{self.name}.thread", f"the {self.name} thread failed")

    def running_context(self) -> AbstractContextManager[None]:
        """What the work runs in: instrumentation suppressed, so our own exports are never traced."""
        return _suppressed()

    # --- the producer's side ----------------------------------------------------------------------------

    def answer_turn(self) -> None:
        """On the thread, between steps that let go of the GIL (each SQLite statement): a producer that
        gave us its turn may go on, the thread having run."""
        self._turns.taken()

    def count_lost(self, size: int) -> None:
        """Count ``size`` items lost on the thread (under ``drop_key``, and in ``dropped``)."""
        with self._lock:
            self._lost += size
        count(self._drop_key, size)

    @property
    def memory_releases(self) -> int:
        """How often free memory was given back after a busy spell."""
        return self._memory_releases

    @property
    def dropped(self) -> int:
        """Items dropped or given up so far (each also counted under its key)."""
        return self._lost

    @property
    def dropped_at_shutdown(self) -> int:
        """Items that ``stop`` gave up (or that raced it into the queue)."""
        return self._lost_at_shutdown

    @property
    def queued(self) -> int:
        """Items waiting (their sizes, when sized; flush tokens count as one)."""
        return self._queued if self._sized else self._queue.qsize()

    def submit(self, item: T, size: int = 1) -> bool:
        """Queue ``item``; False if it was dropped (queue full, or after ``stop``) and counted."""
        if self._closed:
            self._drop(item, size, self._after_shutdown_key)
            return False
        threaded = self._running or self._ensure_thread()
        if self._sized:
            with self._lock:
                queued = self._queued + size
                full = queued > self._max_queued
                if not full:
                    self._queued = queued
            if full:
                self._drop(item, size, self._drop_key)
                return False
            self._queue.put((item, size))
        else:
            queued = self._queue.qsize() + 1
            if queued > self._max_queued and threaded:
                self._drop(item, size, self._drop_key)
                return False
            self._queue.put(item)
        if not threaded:
            self._work_here()
            return True
        turns = self._turns
        if queued >= self._turn_at:
            if self._producer_hands_over or queued >= self._batch_size:
                self._wake.set()  # a gathering wait must not hold the turn up
            turns.give(queued)
        elif self._sleeping:
            # This item wakes the thread from its wait for work: it is due as soon as it is awake.
            self._sleeping = False
            turns.due = 0.0
            if queued >= self._batch_size:
                self._wake.set()
        elif queued >= self._batch_size:
            self._wake.set()
            if self._producer_hands_over:
                turns.hand_over(queued)
        elif self._producer_hands_over and time.monotonic() >= turns.due:
            # The thread's wait is over and it waits for the GIL: hand it over now. Left to CPython, a
            # thread waiting for the GIL behind a busy app wakes at each of the app's short releases
            # (a socket call, os.urandom) and loses the race again, until it wins one by chance.
            turns.hand_over(queued)
        return True

    def flush_until(self, deadline: float) -> bool:
        """Wait until every item submitted before is handled, at most until ``deadline`` (monotonic);
        then :meth:`flushed`'s answer. True at once if nothing was ever submitted in this process."""
        if self._thread is None and self._queue.empty():
            return True
        threaded = self._running or self._ensure_thread()
        token = _Token(deadline)
        self._flushes.add(token)
        self._queue.put(token)  # past the bound by one at most: a flush must not wait for room
        self._wake.set()
        if not threaded:
            self._work_here()
        answered = token.done.wait(max(0.0, deadline - time.monotonic()))
        self._flushes.discard(token)
        return answered and token.result

    def stop(self, deadline: float, *, give_up_queued: bool = False) -> bool:
        """Handle what is queued, then :meth:`stopped`; later items are dropped. Waits for the thread
        until ``deadline``; True if it ended. ``give_up_queued``: drop (and count) what is still queued
        instead of handling it."""
        with self._lock:
            if self._closed:
                return not self._running
            self._closed = True
        if give_up_queued:
            self._given_up = True
        self._queue.put(_STOP)
        self._wake.set()
        thread = self._thread
        if not self._running or thread is None:
            self._work_here()  # no thread (never started, or refused at exit): the caller does it
        else:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._running:
            if self._given_up:
                self._drop_queued()  # what the stuck thread would meet: counted now, not when it is free
            return False
        self._drop_queued()  # items that raced stop's flag into the queue behind the stop
        return True

    def give_up(self) -> None:
        """Drop (and count) what is queued now, and from now on what the thread meets, instead of
        handling it: for a stop whose deadline passed while the thread was stuck in a batch."""
        self._given_up = True
        self._wake.set()
        self._drop_queued()

    def wake(self) -> None:
        """Cut a gathering wait short (a flush of the subclass's own that does not wait for the thread)."""
        self._wake.set()

    @property
    def running(self) -> bool:
        """True while the thread runs (started, and not ended)."""
        return self._running

    def _drop(self, item: T, size: int, key: str | None = None) -> None:
        """Count ``item`` lost under ``key`` (None: given up at shutdown) and let it go."""
        with self._lock:
            self._lost += size
            if key is None:
                self._lost_at_shutdown += size
        count(key or self._at_shutdown_key, size)
        try:
            self.discarded(item)
        except Exception:  # on the producer's thread: our bookkeeping must never break the app
            swallowed(_logger, f"{self.name}.discard", f"the {self.name} thread could not free an item")

    def _drop_queued(self) -> None:
        while True:
            try:
                entry = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(entry, _Token):
                entry.done.set()  # let a flush that waits on it go (answered False), not time out
            elif entry is not _STOP:
                item, size = self._unpack(entry)
                self._leave(size)
                self._drop(item, size)

    def _ensure_thread(self) -> bool:
        """Start the thread unless it runs; False where the interpreter refuses one (at exit)."""
        with self._lock:
            if self._running or self._closed:
                return self._running  # stopped: no thread is started again, the caller works here
            if self._thread is not None:
                count(self._restarted_key)  # it died: a bug of ours; the items still go on
            thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._running = True
            if not start_thread(thread):
                self._running = False
                return False
            self._thread = thread
            return True

    # --- the thread's side ------------------------------------------------------------------------------

    def _run(self) -> None:
        turns = self._turns
        turns.consumer_started()
        if self._hand_overs is not None:
            turns.take_hand_overs_from(self._hand_overs)
        batch: list[Any] = []  # taken from the queue, not handled yet
        try:
            with self.running_context():
                try:
                    self._serve(batch)
                finally:
                    self._handle(batch)  # a thread that dies (a bug) still hands on what it took
        finally:
            turns.taken()  # nobody waits for a thread that is gone
            turns.stop_taking_hand_overs()
            self._running = False
            tokens = list(self._flushes)
            if tokens:
                self._failed_since_flush = False  # these answer for the failure
            for token in tokens:
                token.done.set()  # answered False: a thread that died handled not all before them

    def _serve(self, batch: list[Any]) -> None:
        turns = self._turns
        slices = self._producer_hands_over
        handled = 0  # items since the queue was last empty
        busy = False  # anything (an item, a flush) was taken since the queue was last empty
        entry = self._woken(first=True)  # started by an item or a flush: as if woken by it
        while True:
            if entry is _NOTHING:
                try:
                    entry = self._queue.get_nowait()
                except queue.Empty:
                    if batch:
                        self._handle(batch)
                        continue  # that took a while: look again before answering a turn or waiting
                    if self._given_up or self._stop_taken:
                        if not self._stop_taken:
                            self._take_stop()
                        return
                    turns.taken()  # worked off: a producer that gave us its turn may go on
                    self._after_spell(handled)
                    handled = 0
                    if busy and self._delay_s:
                        # Busy: look again after the delay, rather than be woken by the next item and
                        # then wait for the GIL behind the app; a pause with no item sends us to sleep.
                        busy = False
                        self._gather()
                        self._slice_ends = time.monotonic() + TURN_SLICE_S
                        continue
                    entry = self._woken()
                    continue
            if entry is _STOP:
                self._handle(batch)
                self._take_stop()
                return
            if slices and time.monotonic() >= self._slice_ends:
                # A turn lasts a slice: the producer that gave it may go on (and take the GIL back at
                # its next switch interval, to hand it over again at its next item).
                self._handle(batch)
                turns.taken()
                self._slice_ends = time.monotonic() + TURN_SLICE_S
            handled += self._take(entry, batch)
            busy = True
            entry = _NOTHING  # a handled item must not stay alive while the thread waits for the next

    def _woken(self, *, first: bool = False) -> Any:
        """Wait for work; the first item after a pause is held while the next ones gather. ``first``: the
        thread just started, for what is queued already, probably."""
        try:
            entry = self._queue.get_nowait() if first else self._wait_for_work()
        except queue.Empty:
            entry = self._wait_for_work()
        if entry is not _NOTHING:
            if self._delay_s and entry is not _STOP and not isinstance(entry, _Token):
                self._gather()  # the first item after a pause: let the next ones gather
            self._slice_ends = time.monotonic() + TURN_SLICE_S
        return entry

    def _take(self, entry: Any, batch: list[Any]) -> int:
        """Add a queued entry to ``batch`` (handled once full), or answer a flush; its size."""
        if isinstance(entry, _Token):
            self._handle(batch)  # everything queued before the flush, first
            failed, self._failed_since_flush = self._failed_since_flush, False
            try:
                # A batch that failed since the last flush answered was not all handled: False.
                entry.result = self._guarded(self.flushed, entry.deadline) is True and not failed
            finally:
                entry.done.set()
            return 0
        item, size = self._unpack(entry)
        if self._given_up:
            self._leave(size)
            self._drop(item, size)
            return size
        batch.append(entry)
        if len(batch) >= self._handle_at_most:
            self._handle(batch)
        return size

    def _handle(self, batch: list[Any]) -> None:
        """Hand ``batch`` to ``handle`` and empty it; once given up, drop it instead (counted)."""
        if not batch:
            return
        entries = batch.copy()
        batch.clear()
        if self._sized:
            items = [entry[0] for entry in entries]
            size = sum(entry[1] for entry in entries)
            # Items count against the bound until their batch is handled: a batch gathering holds them.
            self._leave(size)
        else:
            items, size = entries, len(entries)
        if self._given_up:
            for entry in entries:
                self._drop(*self._unpack(entry))
            return
        self._guarded(self.handle, items, size)

    def _leave(self, size: int) -> None:
        """``size`` items left the bound (sized only; a slot's queue counts itself)."""
        if self._sized:
            with self._lock:
                self._queued -= size

    def _guarded(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except BaseException as error:  # even sys.exit() from a bug: the thread must outlive it
            self.failed(error)
            self._failed_since_flush = True  # a thread that went on: its next flush answers False
            return None

    def _take_stop(self) -> None:
        self._stop_taken = True
        self._guarded(self.stopped)

    def _unpack(self, entry: Any) -> tuple[T, int]:
        return (entry[0], entry[1]) if self._sized else (entry, 1)

    def _after_spell(self, handled: int) -> None:
        """The queue ran empty after ``handled`` items: a backlog's memory goes back (or, with
        ``release_idle_s``, after the next pause)."""
        if self._release_idle_s is None:
            if handled >= self._release_after:
                self._release()
        else:
            self._unreleased += handled

    def _release(self) -> None:
        self._unreleased = 0
        if self.release_memory():
            self._memory_releases += 1

    def _gather(self) -> None:
        """Let items gather for the delay: meanwhile the producer runs without contending for the GIL,
        and the batch then runs back to back on warm caches. A flush, stop, full batch or turn cuts the
        wait short."""
        turns = self._turns
        turns.taken()  # the GIL is not ours to keep while we wait
        turns.due = time.monotonic() + self._delay_s
        self._wake.wait(self._delay_s)
        self._wake.clear()
        if not self._producer_hands_over:
            turns.due = 0.0  # until the next wait: between its steps it waits for the GIL again
            turns.taken()

    def _wait_for_work(self) -> Any:
        """Block until an entry comes, or until a retry or a memory release is due (then ``_NOTHING``)."""
        retry = self.idle_timeout()
        release = (
            self._release_idle_s
            if self._release_idle_s is not None and self._unreleased >= self._release_after
            else None
        )
        timeout = min((wait for wait in (retry, release) if wait is not None), default=None)
        turns = self._turns
        turns.due = math.inf if timeout is None else time.monotonic() + timeout
        if timeout is None:
            self._idle.set()
        turns.taken()
        self._sleeping = True
        try:
            entry = self._queue.get() if timeout is None else self._queue.get(timeout=timeout)
        except queue.Empty:
            self._sleeping = False
            if release is not None and (retry is None or release <= retry):
                self._release()
            else:
                self._guarded(self.idle)
            return _NOTHING
        self._sleeping = False
        self._idle.clear()
        if not self._producer_hands_over:
            turns.taken()
        return entry

    def _work_here(self) -> None:
        """Work the queue off on the calling thread: no thread could be started for it (the interpreter
        is finalizing). One caller at a time, so the items keep their order."""
        with self._here_lock:
            if self._running:
                return  # a thread took over meanwhile
            batch: list[Any] = []
            with self.running_context():
                try:
                    while True:
                        try:
                            entry = self._queue.get_nowait()
                        except queue.Empty:
                            return
                        if entry is _STOP:
                            self._handle(batch)
                            self._take_stop()
                        else:
                            self._take(entry, batch)
                finally:
                    self._handle(batch)

    def _reset_after_fork(self) -> None:
        # What the parent had queued is the parent's; the child's thread starts with its first item.
        self._fresh_state()
        self._turns.reset_after_fork()
