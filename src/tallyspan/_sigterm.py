"""Flush before a SIGTERM ends the process, in the processes where nobody else would: ``multiprocessing``
pool workers, which ``Pool.terminate()`` (and so the end of ``with Pool() as pool:``) stops with SIGTERM.

SIGTERM's default action ends the process at once: no ``atexit`` hook, no ``multiprocessing`` finalizer,
so every span and ledger record still queued in the worker's threads was lost, uncounted (a fork pool
terminated after ``map()`` stored 0 to 51 of 200 runs). The handler installed here flushes first, then
does what would have happened without it:

- it chains to the handler that was there (the app's, inherited from the parent or set before us): that
  handler is called after the flush, with the same arguments, and decides what happens next;
- where there was none (``SIG_DFL``), it puts the default action back and sends the signal again, so the
  process still ends by SIGTERM (exit status ``-SIGTERM``), as it would have;
- a second SIGTERM while it flushes skips the flush and ends the process (or calls the app's handler) at
  once;
- a SIGTERM that comes while tallyspan is already stopping (``atexit``, the pool worker's finalizer:
  ``Pool.terminate()`` sends its workers their stop message too, and a worker that took it is exiting
  when the signal comes) waits for that flush, bounded by the same budget, and is then sent again (to
  this handler, which chains as above): cut short, that flush lost what it had not yet written;
- the flush runs on a thread of its own, waited for at most ``wait_s``: the signal may have stopped the
  main thread inside our own code, holding a lock the flush needs, and that must cost the budget, not
  a deadlock.

- a SIGTERM whose handler never runs is still obeyed: Python runs the handler on the main thread when it
  comes back to the interpreter, and a main thread that waits in C for ever (a pool worker on the queue
  lock that ``Pool.terminate()`` holds) may never come back if the signal lands just before it sleeps
  (seen in about 1 of 15 terminated pools). A thread of ours reads the signal from a wakeup fd
  (``signal.set_wakeup_fd``, only where nobody set one) and, when the handler has not started within
  ``MISSED_AFTER_S``, does its work from there: it flushes, then ends the process where the disposition
  it replaced was the default (``os._exit(128 + SIGTERM)``, the shell's status for it: a thread cannot
  restore the default action), or calls the app's handler and ends the process as an exception leaving
  that handler would have (``SystemExit``'s code; 1 for any other).

It is installed only from the main thread (Python runs signal handlers there; ``signal.signal`` refuses
other threads), never over a handler set outside Python (``getsignal`` answers None: there is nothing to
chain to) nor over ``SIG_IGN`` (the app chose to survive SIGTERM; exit then flushes as usual).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from tallyspan._fork import after_fork_in_child, start_thread
from tallyspan._selfstats import swallowed

__all__ = ["final_flush", "flush_on_sigterm", "installed_handler"]

_logger = logging.getLogger(__name__)

#: What ``flush`` is told: True when the process is about to end (the handler it chains to is the default).
Flush = Callable[[bool], None]


# Both are lists changed by single calls (append, remove, pop): each is atomic under the GIL, for other
# threads and for the handler alike. A lock here deadlocked: the handler runs on the main thread between
# two bytecodes, possibly while that thread held the lock, and its flush thread then waited for it.
_final_flushes: list[object] = []
"""Final flushes under way (``final_flush``), on any thread: one token each."""
_deferred: list[int] = []
"""A signal that arrived during a final flush, sent again once it is done."""


def _forget_final_flushes(module: object) -> None:
    """In a forked child: the final flushes under way were the parent's threads', which the child does not
    have. Kept, they would hold every SIGTERM of the child back for ever."""
    del module
    _final_flushes.clear()
    _deferred.clear()


after_fork_in_child(sys.modules[__name__], _forget_final_flushes)


@contextmanager
def final_flush() -> Iterator[None]:
    """Around the flush that stops tallyspan (exit, the pool worker's finalizer, the provider's shutdown;
    bounded by the shutdown budget): a SIGTERM meanwhile is handled once that flush is done (sent again,
    to whatever handles it then), rather than cutting it short.

    Enter it before the first step of stopping (turning the chain off): a SIGTERM that comes between
    that step and this block found the chain off, flushed nothing, and the process ended with every
    span still queued (a spawn pool worker lost all its runs, 1 terminated pool in about 20).
    """
    token = object()
    _final_flushes.append(token)
    try:
        yield
    finally:
        _final_flushes.remove(token)
        if not _final_flushes:  # the last one: the signal that waited for it, sent again once
            _send_deferred_signal()


def _send_deferred_signal() -> None:
    try:
        signum = _deferred.pop()
    except IndexError:  # none waited, or another final flush ending at the same moment took it
        return
    os.kill(os.getpid(), signum)


class _FlushThenChain:
    """The SIGTERM handler: flush (bounded, off the main thread), then what the previous disposition did."""

    def __init__(self, flush: Flush, wait_s: Callable[[], float], previous: Any) -> None:
        self.flush = flush
        self.wait_s = wait_s
        self.previous = previous
        self._flushing = False
        #: Set when the handler starts, for the watch (``_watch_for_missed_sigterm``).
        self.entered = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        self.entered.set()
        previous = self.previous
        ends = self.ends
        if _final_flushes and not self._flushing:
            if not _deferred:
                _deferred.append(signum)  # handled again as soon as that flush is done (final_flush)
            if _final_flushes:  # read after the write: if it ended meanwhile, the signal is handled here
                return None
            try:
                _deferred.pop()  # taken back: no flush is left to send it again
            except IndexError:
                return None  # the flush that ended sent it again: handled then
        if not self._flushing:  # a second SIGTERM during the flush does not wait for it again
            self._flushing = True
            try:
                self._flush(ends)
            finally:
                self._flushing = False
        if not ends:
            return previous(signum, frame)
        # The default action, as if we had never been here: the process ends by this signal.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None

    @property
    def ends(self) -> bool:
        """Whether the signal ends the process: the disposition replaced was the default."""
        return not callable(self.previous)

    def handle_from_thread(self) -> None:
        """What the handler does on the main thread, done from another (the watch's): flush, then end the
        process, or call the app's handler and end it as an exception leaving that handler would have."""
        self._flush(self.ends)
        if self.ends:
            os._exit(128 + signal.SIGTERM)  # a thread cannot restore the default action
        try:
            self.previous(signal.SIGTERM, None)
        except SystemExit as leaving:  # sys.exit() in the app's handler: the process ends with its code
            code = leaving.code
            os._exit(code if isinstance(code, int) else (0 if code is None else 1))
        except BaseException:  # on the main thread it would have ended the process, uncaught
            os._exit(1)

    def _flush(self, ends: bool) -> None:
        try:
            thread = threading.Thread(
                target=self._run_flush, args=(ends,), name="tallyspan-sigterm-flush", daemon=True
            )
            if not start_thread(thread):
                return
            thread.join(self.wait_s())
        except Exception:  # the signal must still do what it would have done
            swallowed(_logger, "sigterm", "flushing tallyspan on SIGTERM failed")

    def _run_flush(self, ends: bool) -> None:
        try:
            self.flush(ends)
        except Exception:
            swallowed(_logger, "sigterm", "flushing tallyspan on SIGTERM failed")


def installed_handler() -> _FlushThenChain | None:
    """Our SIGTERM handler, if it is the one installed now."""
    handler = signal.getsignal(signal.SIGTERM)
    return handler if isinstance(handler, _FlushThenChain) else None


def flush_on_sigterm(flush: Flush, wait_s: Callable[[], float]) -> bool:
    """Flush with ``flush`` (waited for at most ``wait_s()`` seconds) when SIGTERM arrives, then do what the
    signal would have done; True if the handler is (now) installed.

    Call it only where a SIGTERM is expected to end the process and a flush is wanted (a pool worker):
    from the main thread, where the previous disposition is the default or a handler set from Python.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if isinstance(previous, _FlushThenChain):
            return True
        if previous is None or previous == signal.SIG_IGN:
            return False
        handler = _FlushThenChain(flush, wait_s, previous)
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError, RuntimeError):  # not the main interpreter, or no such signal here
        return False
    _watch_for_missed_sigterm(handler)
    return True


#: How long the handler may take to start on the main thread before the watch acts in its place.
MISSED_AFTER_S = 2.0


def _watch_for_missed_sigterm(handler: _FlushThenChain) -> None:
    """From the main thread: have a thread of ours see each SIGTERM (a wakeup fd, where no one else set
    one) and do what ``handler`` would have done if it has not started within ``MISSED_AFTER_S``."""
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return
    try:
        os.set_blocking(write_fd, False)  # the signal's C handler must never wait on a full pipe
        earlier = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read_fd)
        os.close(write_fd)
        return
    if earlier != -1:  # the app's (an event loop): keep it, and go without the watch
        signal.set_wakeup_fd(earlier)
        os.close(read_fd)
        os.close(write_fd)
        return
    watch = threading.Thread(
        target=_watch, args=(read_fd, handler), name="tallyspan-sigterm-watch", daemon=True
    )
    if not start_thread(watch):
        signal.set_wakeup_fd(-1)
        os.close(read_fd)
        os.close(write_fd)


def _watch(read_fd: int, handler: _FlushThenChain) -> None:
    try:
        while True:
            received = os.read(read_fd, 64)  # one byte a signal, whichever thread the kernel chose
            if not received:
                return
            if signal.SIGTERM in received and not handler.entered.wait(MISSED_AFTER_S):
                _logger.warning("the SIGTERM handler did not start on the main thread: handled from a thread")
                handler.entered.set()  # a handler that starts late skips nothing but the watch
                handler.handle_from_thread()
    except Exception:
        swallowed(_logger, "sigterm", "watching for SIGTERM failed")
