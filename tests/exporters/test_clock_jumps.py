"""The wall clock jumps (a VM resumed after a pause, an NTP step, an operator): the spool's leases and its
look for dead owners must not follow it (issue 38, item 8).

Before, a jump forward made every live process's lease look expired at once: another process claimed
its rows while they were in flight (sent twice) and evicted them as ``spool_full`` while they were being
delivered (counted as lost and delivered); a jump back stopped the look for dead owners for as long as
the jump, so a crashed process's rows waited that long. The clock is the only thing simulated here: the
spool module sees a wall clock moved by an offset, its monotonic clock untouched, as a process does after
a jump; the spool files and the process that dies are real.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from tests.forking import run_forked

import tallyspan
from tallyspan_exporters import _spool
from tallyspan_exporters._spool import _DEAD_OWNER_SCAN_S, LEASE_S, Spool

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

HOUR = 3600.0


class JumpedClock:
    """The ``time`` module as a process sees it once its wall clock moved by ``offset_s``."""

    def __init__(self, offset_s: float) -> None:
        self.offset_s = offset_s

    def time(self) -> float:
        return time.time() + self.offset_s

    def time_ns(self) -> int:
        return time.time_ns() + int(self.offset_s * 1e9)

    def monotonic(self) -> float:
        return time.monotonic()


def _spool_at(path: Path, max_bytes: int = 1 << 20) -> Spool:
    return Spool(path, max_bytes=max_bytes, max_age_s=7 * 86400)


def test_a_jump_forward_leaves_a_live_owners_rows_in_flight_unclaimed_and_unevicted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    sender, other = _spool_at(path, max_bytes=1000), _spool_at(path, max_bytes=1000)
    assert sender.append("traces", [(f"r{n}", "x" * 200) for n in range(3)]) is not None
    in_flight = sender.claim("traces", 10)
    assert [row.record_id for row in in_flight or []] == ["r0", "r1", "r2"]

    monkeypatch.setattr(_spool, "time", JumpedClock(HOUR))  # both see it: one host, one wall clock
    # The other process claims now and then: the sender is alive, so nothing of its is taken...
    assert other.claim("traces", 10) == []
    # ...nor evicted to make room while its export is in flight (600 + 600 bytes > 1000).
    assert other.append("traces", [("new0", "y" * 300), ("new1", "y" * 300)]) is not None
    stats = tallyspan.stats()
    assert stats.get("dropped.otlp.traces.spool_full", 0) == 0
    # The backend accepted the export: delivered once, and nothing of it counted as lost.
    assert sender.delete([row.seq for row in in_flight or []])
    assert sender.pending("traces") == 2
    for spool in (sender, other):
        spool.close()


def test_a_jump_back_does_not_keep_a_crashed_processs_rows_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.db"
    survivor = _spool_at(path)
    assert survivor.claim("traces", 10) == []  # it has looked for dead owners: next look in a few seconds

    monkeypatch.setattr(_spool, "time", JumpedClock(-HOUR))

    def crashing_process() -> bool:
        # Spools a record and dies without releasing it (run_forked leaves with os._exit).
        return _spool_at(path).append("traces", [("orphan", "z")]) == [1]

    assert run_forked(crashing_process) == 0
    threading.Event().wait(_DEAD_OWNER_SCAN_S + 0.2)  # until the next look is due, on any clock
    assert [row.record_id for row in survivor.claim("traces", 10) or []] == ["orphan"]
    survivor.close()


@pytest.mark.slow
def test_a_silent_owner_on_another_host_is_taken_over_after_a_lease_of_the_claimers_own_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease alone protects the rows of another host's process (a network file system): it runs out
    once the claimer has seen it unchanged for LEASE_S of its own clock, whatever either wall clock says
    (here the other host's is ten hours ahead, and ours jumps back an hour meanwhile)."""
    path = tmp_path / "s.db"
    writer = _spool_at(path)
    assert writer.append("logs", [("far", "a")]) == [1]
    writer.close()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE records SET owner = 'elsewhere|1|x', lease_until = ?", (time.time() + 10 * HOUR,))
    db.close()
    claimer = _spool_at(path)
    assert claimer.claim("logs", 10) == []  # its lease is seen for the first time
    monkeypatch.setattr(_spool, "time", JumpedClock(-HOUR))
    threading.Event().wait(LEASE_S / 2)
    assert claimer.claim("logs", 10) == []  # unchanged, but not yet for a lease
    threading.Event().wait(LEASE_S / 2 + 0.2)
    assert [row.record_id for row in claimer.claim("logs", 10) or []] == ["far"]
    claimer.close()
