"""Running a check in a forked child, for the tests of what survives ``fork()`` (prefork servers)."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable

#: How long a child may run before it counts as deadlocked: a guard, not a timing.
CHILD_GUARD_S = 60


def run_forked(child: Callable[[], bool]) -> int:
    """Run ``child`` in a forked process; its exit code: 0 if it returned True, 2 if False, 1 if it
    raised, -9 if it was still running after ``CHILD_GUARD_S`` (killed)."""
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads: exactly the case under test.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if child() else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_GUARD_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -9
