"""Counters of our own failures and drops, and a log-once helper, so a swallowed error is never silent.

Every ``except Exception:`` on the span path calls :func:`swallowed`, which counts the error under a
stable key and logs its type and stack the first time that key is seen (the whole exception, message
included, only at debug level, since a message may quote content), so a broken extractor cannot flood
the host application's logs.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections import Counter
from typing import Final

from tallyspan._fork import renew_lock_after_fork

__all__ = ["PROBLEM_PREFIXES", "count", "is_problem", "reset_stats", "stats", "swallowed"]

PROBLEM_PREFIXES: Final = ("dropped.", "errors.")
"""Counters whose keys start so mean something was lost or failed. The others are figures:
``backpressure.*`` counts the waits an app thread gave one of our threads, not a loss."""

_lock = threading.Lock()
_counters: Counter[str] = Counter()
_logged: set[str] = set()


# Any thread may be counting at fork(): the child must not inherit the lock held for ever.
renew_lock_after_fork(sys.modules[__name__])


def count(key: str, amount: int = 1) -> None:
    """Add ``amount`` to the counter ``key``."""
    with _lock:
        _counters[key] += amount


def swallowed(logger: logging.Logger, key: str, message: str) -> None:
    """Record an exception we caught so the app goes on: count it, log it once with its traceback.

    Call it from inside the ``except`` block.
    """
    with _lock:
        _counters[f"errors.{key}"] += 1
        first = key not in _logged
        _logged.add(key)
    if first:
        # The exception's message may quote what it failed on (a prompt, an output, a key): the warning
        # names the type and where it was raised; the whole exception is logged at debug level only.
        logger.warning(
            "%s (logged once; later ones are counted in tallyspan.stats()): %s\n%s",
            message,
            *_type_and_stack(),
        )
    logger.debug(message, exc_info=True)


def _type_and_stack() -> tuple[str, str]:
    error = sys.exc_info()[1]
    if error is None:
        return "no exception", ""
    stack = "".join(traceback.format_tb(error.__traceback__)).rstrip()
    return f"{type(error).__module__}.{type(error).__qualname__}", stack


def stats() -> dict[str, int]:
    """Return a snapshot of the counters: ``errors.*`` for swallowed errors, ``dropped.*`` for drops,
    ``backpressure.*`` for the times the app's thread waited for our worker."""
    with _lock:
        return dict(_counters)


def reset_stats() -> None:
    """Zero every counter and forget which errors were logged (for tests)."""
    with _lock:
        _counters.clear()
        _logged.clear()


def is_problem(key: str) -> bool:
    """True for a counter that means something was lost or failed (:data:`PROBLEM_PREFIXES`)."""
    return key.startswith(PROBLEM_PREFIXES)
