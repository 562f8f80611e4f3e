"""What a test of tallyspan's own counters compares: its losses and errors, not how busy the host was."""

from __future__ import annotations

from collections.abc import Mapping

import tallyspan

#: Counters of GIL hand-overs that timed out: waits the app's thread gave tallyspan's threads on a busy
#: host (``tallyspan._turns``). A figure, not a loss, and one a loaded test runner makes at random.
BACKPRESSURE = "backpressure."


def without_backpressure(counts: Mapping[str, int]) -> dict[str, int]:
    """``counts`` without the ``backpressure.*`` counters."""
    return {key: value for key, value in counts.items() if not key.startswith(BACKPRESSURE)}


def losses() -> dict[str, int]:
    """``tallyspan.stats()`` without the ``backpressure.*`` counters: what was dropped or failed."""
    return without_backpressure(tallyspan.stats())
