"""Our threads leave SIGINT and SIGTERM to the app's (tallyspan._fork.start_thread): Python runs signal
handlers on the main thread only, so a signal the kernel gives one of our threads does not wake a main
thread that waits in C, and a handler (ours in pool workers, the app's Ctrl-C) would wait with it."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import pytest

from tallyspan.plugin import start_thread

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the threads' signal masks from /proc (Linux)"
)


def _blocked(thread_id: int) -> set[int]:
    status = Path(f"/proc/self/task/{thread_id}/status").read_text()
    mask = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
    return {number for number in range(1, 65) if mask & (1 << (number - 1))}


def test_a_thread_we_start_blocks_the_apps_signals_and_the_caller_keeps_its_mask() -> None:
    before = _blocked(threading.get_native_id())
    seen: dict[str, set[int]] = {}
    go_on = threading.Event()

    def run() -> None:
        seen["blocked"] = _blocked(threading.get_native_id())
        go_on.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    assert start_thread(thread) is True
    try:
        for _ in range(1000):
            if "blocked" in seen:
                break
            threading.Event().wait(0.01)
        assert {signal.SIGINT, signal.SIGTERM} <= seen["blocked"]
    finally:
        go_on.set()
        thread.join(10)
    assert _blocked(threading.get_native_id()) == before
    assert signal.SIGTERM not in before
    assert signal.SIGINT not in before
