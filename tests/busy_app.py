"""An app thread that keeps the GIL busy, for the tests of the turns our threads are given."""

from __future__ import annotations

import os


def work_between_spans() -> None:
    """The app's own work between two spans: pure Python, with short releases of the GIL (``os.urandom``,
    as a client makes at every request), after each of which CPython lets this thread take the GIL
    back before a thread that waits for it runs."""
    for _ in range(3):
        total = 0
        for number in range(1500):
            total += number
        os.urandom(16)
