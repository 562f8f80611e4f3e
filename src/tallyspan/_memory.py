"""Give the C heap's free pages back to the OS after a busy spell (a backlog of spans, a large batch).

glibc keeps the pages it freed (span content, rows, SQLite's page cache) unless asked to trim them, so
without this a process stays at its busiest size. Python's own small-object allocator (pymalloc) is not
the C heap: its 1 MiB arenas go back only once every object in them is gone, which no call can force.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable

from tallyspan._selfstats import swallowed

__all__ = ["release_free_memory"]

_logger = logging.getLogger(__name__)


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS (glibc's ``malloc_trim(0)``, every arena); elsewhere do
    nothing. True if the C library was asked to."""
    trim = _malloc_trim()
    if trim is None:
        return False
    try:
        trim(0)
    except Exception:  # a foreign C library: never let it stop the thread that asked
        swallowed(_logger, "release_memory", "tallyspan could not release free memory")
        return False
    return True


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: every instrument() would pay for it, and only a busy spell needs it

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and other C libraries have no malloc_trim
        return None
