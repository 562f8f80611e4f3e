"""What must be renewed in a child after ``fork()``: a lock another thread held at the fork stays held for
ever in the child (only the forking thread survives), so the child's first span would deadlock the app;
a thread of ours is gone in the child, so its queue must start afresh.

Threads are started through :func:`start_thread`: from Python 3.12 the interpreter refuses new threads
once it is finalizing (the ``atexit`` hooks, where the SDK flushes an app that never did), so whatever
our threads would have done must then be done on the caller's thread instead of being lost. Our threads
block SIGINT and SIGTERM, so that the kernel hands those to a thread of the app: Python runs their
handlers on the main thread only, and a signal given to one of our threads leaves a main thread that
waits in C (a lock, a semaphore) asleep with the handler pending. A pool worker waiting on the pool's
queue lock, which ``Pool.terminate()`` holds for ever, would then never run our SIGTERM handler.

One ``os.register_at_fork`` hook serves every owner, through weak references: the interpreter cannot
forget a hook, so one hook per object would pile up with every ``instrument()``/``uninstrument()`` cycle
(and each fork would pay for all of them).
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["after_fork_in_child", "renew_lock_after_fork", "start_thread"]

T = TypeVar("T")

_lock = threading.Lock()
_hooks: list[tuple[weakref.ref[Any], Callable[[Any], None]]] = []
_registered_at: int = 0
"""How many hooks there were when dead ones were last swept: sweep again when the list doubles."""


def _run_hooks_in_child() -> None:
    global _hooks, _lock
    _lock = threading.Lock()  # a thread registering at the fork held it
    alive = []
    for owner_ref, hook in _hooks:
        owner = owner_ref()
        if owner is not None:
            alive.append((owner_ref, hook))
            hook(owner)
    _hooks = alive


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_hooks_in_child)


def after_fork_in_child(owner: T, hook: Callable[[T], None]) -> None:
    """Call ``hook(owner)`` in every child forked from now on, for as long as ``owner`` lives.

    ``owner`` may be a module (``sys.modules[__name__]``). Hooks run in the order they were added.
    """
    global _hooks, _registered_at
    if not hasattr(os, "register_at_fork"):
        return
    with _lock:
        if len(_hooks) >= 2 * max(_registered_at, 16):
            _hooks = [(ref, fn) for ref, fn in _hooks if ref() is not None]
            _registered_at = len(_hooks)
        _hooks.append((weakref.ref(owner), hook))


def renew_lock_after_fork(
    owner: object, attribute: str = "_lock", new_lock: Callable[[], object] = threading.Lock
) -> None:
    """Give ``owner.<attribute>`` a fresh lock (``new_lock()``) in every child forked from now on.

    ``owner`` may be a module (``sys.modules[__name__]``) for a module-level lock.
    """
    after_fork_in_child(owner, lambda found: setattr(found, attribute, new_lock()))


def start_thread(thread: threading.Thread) -> bool:
    """Start ``thread`` with SIGINT and SIGTERM blocked in it (it inherits the mask of the thread that
    starts it); False where the interpreter refuses a new thread (finalizing, or out of threads).

    The caller then does the thread's work itself: at exit there is no app left to keep waiting.
    """
    masked = _block_app_signals()
    try:
        thread.start()
    except (
        RuntimeError
    ):  # "can't create new thread at interpreter shutdown" (3.12+), "can't start new thread"
        return False
    finally:
        if masked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, masked)
    return True


_APP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _block_app_signals() -> set[int | signal.Signals] | None:
    """Block the app's signals in this thread; the mask it had, to put back (None: no signal masks here)."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: a signal goes to the main thread there
        return None
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, _APP_SIGNALS)
    except (OSError, ValueError):
        return None
