"""The generic worker under the chain's worker and the store's writers: bounded queue, batches, flush
tokens, stop with a deadline, drops counted, fork, memory, and the caller's thread when none can start.

Real threads throughout; a test that needs the thread held holds it on an event inside ``handle``."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator

import pytest

import tallyspan
from tallyspan.plugin import Background


class _Recorder(Background[str]):
    """Records each batch; holds the thread inside ``handle`` on an item ``"hold"`` until released."""

    def __init__(self, **options: object) -> None:
        defaults: dict[str, object] = {
            "name": "tallyspan-test",
            "max_queued": 1024,
            "drop_key": "dropped.test",
            "turns_key": "backpressure.test_turns",
            "restarted_key": "errors.test.restarted",
        }
        defaults.update(options)
        super().__init__(**defaults)  # type: ignore[arg-type]
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.discards: list[str] = []
        self.stops = 0
        self.flush_answer = True
        self.releases = 0
        self.idles = 0
        self.idle_after: float | None = None
        self.handled_on: set[int] = set()

    @property
    def handled(self) -> list[str]:
        return [item for batch in self.batches for item in batch]

    def handle(self, batch: list[str], size: int) -> None:
        self.handled_on.add(threading.get_ident())
        if "lost" in batch:
            self.count_lost(size)
            return
        if "hold" in batch:
            self.entered.set()
            self.release.wait(30)
        if "exit" in batch:
            raise SystemExit("a bug of ours calls sys.exit()")
        self.batches.append(batch)

    def flushed(self, deadline: float) -> bool:
        del deadline
        return self.flush_answer

    def stopped(self) -> None:
        self.stops += 1

    def discarded(self, item: str) -> None:
        self.discards.append(item)

    def release_memory(self) -> bool:
        self.releases += 1
        return True

    def idle_timeout(self) -> float | None:
        return self.idle_after

    def idle(self) -> None:
        self.idles += 1
        self.idle_after = None


@pytest.fixture
def made() -> Iterator[list[_Recorder]]:
    workers: list[_Recorder] = []
    yield workers
    for worker in workers:
        worker.release.set()
        worker.stop(time.monotonic() + 10)


def _worker(made: list[_Recorder], **options: object) -> _Recorder:
    worker = _Recorder(**options)
    made.append(worker)
    return worker


def _soon() -> float:
    return time.monotonic() + 10


def _held(worker: _Recorder) -> None:
    """The thread is inside ``handle``, on the item ``"hold"``."""
    assert worker.submit("hold")
    assert worker.entered.wait(10)


def test_items_are_handled_in_order_in_batches_of_at_most_handle_at_most(made: list[_Recorder]) -> None:
    worker = _worker(made, handle_at_most=3)
    _held(worker)
    for index in range(7):
        assert worker.submit(f"i{index}")
    worker.release.set()
    assert worker.flush_until(_soon()) is True
    assert worker.batches[1:] == [["i0", "i1", "i2"], ["i3", "i4", "i5"], ["i6"]]
    assert threading.get_ident() not in worker.handled_on
    assert tallyspan.stats() == {}


def test_a_flush_without_any_item_is_true_and_starts_no_thread(made: list[_Recorder]) -> None:
    worker = _worker(made)
    assert worker.flush_until(_soon()) is True
    assert worker._thread is None


def test_a_flush_answers_what_flushed_says_and_false_past_its_deadline(made: list[_Recorder]) -> None:
    worker = _worker(made)
    assert worker.submit("a")
    worker.flush_answer = False
    assert worker.flush_until(_soon()) is False
    worker.flush_answer = True
    _held(worker)
    assert worker.submit("b")
    assert worker.flush_until(time.monotonic()) is False  # "b" waits behind the held item
    worker.release.set()
    assert worker.flush_until(_soon()) is True
    assert worker.handled == ["a", "hold", "b"]


def test_a_full_queue_drops_counts_and_frees_the_item_and_the_caller_never_waits(
    made: list[_Recorder],
) -> None:
    worker = _worker(made, max_queued=3)
    _held(worker)
    assert [worker.submit(f"i{index}") for index in range(5)] == [True, True, True, False, False]
    assert worker.discards == ["i3", "i4"]
    assert worker.dropped == 2
    worker.release.set()
    assert worker.flush_until(_soon()) is True
    assert worker.handled == ["hold", "i0", "i1", "i2"]
    assert tallyspan.stats()["dropped.test"] == 2


def test_sized_items_are_bounded_by_the_sum_of_their_sizes(made: list[_Recorder]) -> None:
    worker = _worker(made, max_queued=10, sized=True)
    _held(worker)
    assert worker.submit("six", 6) is True
    assert worker.queued == 6
    assert worker.submit("five", 5) is False  # 11 > 10
    assert worker.submit("four", 4) is True  # exactly 10
    assert worker.dropped == 5
    worker.release.set()
    assert worker.flush_until(_soon()) is True
    assert worker.handled == ["hold", "six", "four"]
    assert worker.queued == 0
    assert tallyspan.stats()["dropped.test"] == 5


def test_what_handle_cannot_handle_it_counts_lost_with_the_batchs_size(made: list[_Recorder]) -> None:
    worker = _worker(made, sized=True)
    _held(worker)
    assert worker.submit("lost", 3)
    assert worker.submit("also", 2)  # in the same batch: both lost
    worker.release.set()
    assert worker.flush_until(_soon()) is True
    assert worker.handled == ["hold"]
    assert worker.dropped == 5
    assert tallyspan.stats() == {"dropped.test": 5}


def test_stop_handles_what_is_queued_then_stops_and_later_items_are_counted(made: list[_Recorder]) -> None:
    worker = _worker(made, after_shutdown_key="dropped.test_after")
    _held(worker)
    assert worker.submit("a")
    worker.release.set()
    assert worker.stop(_soon()) is True
    assert worker.handled == ["hold", "a"]
    assert worker.stops == 1
    assert worker.stop(_soon()) is True  # once only
    assert worker.stops == 1
    assert worker.submit("late") is False
    assert worker.discards == ["late"]
    assert tallyspan.stats() == {"dropped.test_after": 1}


def test_stop_that_gives_up_counts_what_it_gave_up_and_the_thread_ends_once_free(
    made: list[_Recorder],
) -> None:
    worker = _worker(made, at_shutdown_key="dropped.test_at")
    _held(worker)
    assert worker.submit("a")
    assert worker.submit("b")
    thread = worker._thread
    assert thread is not None
    assert worker.stop(time.monotonic(), give_up_queued=True) is False  # held past the deadline
    assert worker.discards == ["a", "b"]  # counted at the stop, not whenever the thread is free
    assert tallyspan.stats() == {"dropped.test_at": 2}
    worker.release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert worker.handled == ["hold"]  # the batch in hand is finished, the rest given up
    assert worker.discards == ["a", "b"]
    assert worker.dropped_at_shutdown == 2
    assert worker.stops == 1
    assert tallyspan.stats() == {"dropped.test_at": 2}


def test_items_gather_for_the_delay_and_a_flush_or_a_whole_batch_cuts_it_short(
    made: list[_Recorder],
) -> None:
    # An hour: nothing but a flush, stop or a whole batch can end the wait within the test.
    worker = _worker(made, delay_s=3600.0, batch_size=4)
    before = time.monotonic()
    assert worker.submit("a")
    deadline = _soon()
    while not (math.isfinite(worker._turns.due) and worker._turns.due - 3600 >= before):
        assert time.monotonic() < deadline, "the thread never started gathering"
        time.sleep(0.005)
    assert not worker._wake.is_set()  # one item does not cut the wait short
    assert worker.batches == []
    assert worker.flush_until(_soon()) is True
    assert worker.handled == ["a"]
    for item in ("b", "c", "d", "e"):  # the fourth queued is a whole batch: handled without a flush
        assert worker.submit(item)
    deadline = _soon()
    while worker.handled != ["a", "b", "c", "d", "e"]:
        assert time.monotonic() < deadline, worker.handled
        time.sleep(0.005)


def test_a_producer_gives_the_thread_turns_once_a_sixteenth_of_the_queue_waits(
    made: list[_Recorder],
) -> None:
    worker = _worker(made, max_queued=32)  # turns from 2 waiting
    _held(worker)
    assert worker.submit("a")
    assert "backpressure.test_turns" not in tallyspan.stats()
    assert worker.submit("b")  # 2 waiting: a turn, not taken (the thread is held): counted
    assert tallyspan.stats()["backpressure.test_turns"] == 1


# The thread's death is the point: pytest would report the SystemExit that ended it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_dies_answers_its_flushes_false_and_is_started_again_counted(
    made: list[_Recorder],
) -> None:
    class _Dying(_Recorder):
        def failed(self, error: BaseException) -> None:
            raise SystemExit("the report of a failure ends the thread") from error

    worker = _Dying(
        name="tallyspan-test",
        max_queued=1024,
        drop_key="dropped.test",
        turns_key="backpressure.test_turns",
        restarted_key="errors.test.restarted",
    )
    made.append(worker)
    _held(worker)
    assert worker.submit("exit")
    dead = worker._thread
    assert dead is not None
    worker.release.set()
    assert worker.flush_until(_soon()) is False
    dead.join(10)
    assert not dead.is_alive()
    assert worker.submit("after")
    assert worker.flush_until(_soon()) is True
    assert worker._thread is not dead
    assert worker.handled == ["hold", "after"]
    assert tallyspan.stats() == {"errors.test.restarted": 1}


def test_where_no_thread_can_start_the_caller_does_the_work_in_order(
    made: list[_Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From Python 3.12 the interpreter refuses new threads at exit, where the SDK flushes an app that
    never did: the items are handled on the caller's thread instead of being lost."""

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    worker = _worker(made, delay_s=3600.0)
    monkeypatch.setattr(threading.Thread, "start", refused)
    assert worker.submit("a")
    assert worker.submit("b")
    assert worker.handled == ["a", "b"]  # at once: nothing waits for a thread
    assert worker.handled_on == {threading.get_ident()}
    assert worker.flush_until(_soon()) is True
    assert worker.stop(_soon()) is True
    assert worker.stops == 1
    assert worker._thread is None
    assert tallyspan.stats() == {}


def test_a_backlog_gives_memory_back_when_the_queue_runs_empty_and_one_item_short_does_not(
    made: list[_Recorder],
) -> None:
    worker = _worker(made, max_queued=4096, release_after=8)
    idle = worker._idle
    for spell in (7, 8):
        _held(worker)
        for index in range(spell - 1):
            assert worker.submit(f"i{index}")
        idle.clear()
        worker.entered.clear()
        worker.release.set()
        assert idle.wait(10)  # worked off, waiting for more
        worker.release.clear()
    assert worker.releases == 1
    assert worker.memory_releases == 1


def test_with_an_idle_pause_memory_goes_back_after_the_pause_counting_across_spells(
    made: list[_Recorder],
) -> None:
    worker = _worker(made, release_after=8, release_idle_s=0.0)
    for index in range(7):
        assert worker.submit(f"i{index}")
    assert worker.flush_until(_soon()) is True
    assert worker._idle.wait(10)
    assert worker.releases == 0
    assert worker.submit("eighth")
    assert worker.flush_until(_soon()) is True  # the pause after it gives memory back
    assert worker._idle.wait(10)  # cleared when the thread took "eighth", set again after the pause
    assert worker.memory_releases == 1


def test_an_idle_timeout_calls_idle_once_nothing_came(made: list[_Recorder]) -> None:
    worker = _worker(made)
    worker.idle_after = 0.0
    assert worker.submit("a")
    assert worker.flush_until(_soon()) is True
    assert worker._idle.wait(10)  # idle() ran, then the thread waits for ever
    assert worker.idles == 1


def test_after_fork_the_thread_starts_afresh_with_an_empty_queue_of_the_same_bound(
    made: list[_Recorder],
) -> None:
    """What the fork hook does in the child, driven in this process: the parent's thread, held here,
    is gone there with its queue; the child's items go through a thread of its own."""
    worker = _worker(made, max_queued=2)
    _held(worker)
    parents = worker._thread
    parents_release = worker.release
    worker.release = threading.Event()
    worker.entered.clear()
    assert worker.submit("a")
    assert worker.submit("b")
    assert worker.submit("full") is False

    worker._reset_after_fork()

    assert worker.submit("c") is True
    assert worker.flush_until(_soon()) is True
    assert worker._thread is not parents
    assert worker.handled == ["c"]
    assert worker.submit("d") is True
    assert worker.submit("e") is True  # as bounded as the parent's: two fit
    assert worker.stop(_soon()) is True
    parents_release.set()
    assert parents is not None
    parents.join(10)
    assert not parents.is_alive()  # it finished its batch, found the stop taken and ended
    assert worker.handled == ["c", "d", "e", "hold"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_handles_its_own_items_on_a_thread_of_its_own(made: list[_Recorder]) -> None:
    worker = _worker(made)
    assert worker.submit("parent")
    assert worker.flush_until(_soon()) is True
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            ok = worker.submit("child") and worker.flush_until(time.monotonic() + 10)
            thread = worker._thread
            code = 0 if ok and worker.handled == ["parent", "child"] and thread is not None else 1
            os.write(write, b"%d" % code)
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    reported = os.read(read, 16)
    os.close(read)
    assert (os.waitstatus_to_exitcode(status), reported) == (0, b"0")
    assert worker.handled == ["parent"]
