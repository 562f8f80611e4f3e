"""The one writer of the store and its thread, driven directly against a real SQLite file: what a loss
costs (counted in items, logged with the store's path), and what ``flush`` and ``shutdown`` promise when
the thread is stuck, fails, or was asked to stop."""

from __future__ import annotations

import ctypes
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.c_library import CLibrary
from tests.forking import run_forked
from tests.stats import losses

import tallyspan
from tallyspan._store._store_schema import SELF_STATS, connect
from tallyspan_exporters._writer import DEFAULT_BATCH_ITEMS, Rows, StoreWriter, WriterThread, insert_sql

_CDLL = ctypes.CDLL  # the real one: the c_library fixture replaces ctypes.CDLL

_COLUMNS = ("pid", "started_unix_nano", "service_name", "key", "value", "time_unix_nano")
_INSERT = insert_sql(SELF_STATS, _COLUMNS)


def _rows(*keys: str) -> Rows:
    """One row per key, each an item."""
    rows = Rows(items=len(keys))
    rows.add(_INSERT, [(1, 1, "svc", key, 1, 1) for key in keys])
    return rows


def _keys(db_path: Path) -> list[str]:
    db = connect(db_path)
    try:
        return [row[0] for row in db.execute(f"SELECT key FROM {SELF_STATS} ORDER BY rowid")]
    finally:
        db.close()


def _writer(path: Path, **limits: int) -> StoreWriter:
    """A writer of things counted under ``dropped.test_things``; ``limits``: busy timeout, max pending."""
    return StoreWriter(path, name="test", unit="things", lost_key="dropped.test_things", **limits)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "tallyspan_exporters._writer" and record.levelno == logging.DEBUG
    ]


class _Held:
    """A ``prepare`` that holds the writer's thread on the item ``"hold"`` until ``release`` is set,
    raises on ``"bad"`` and exits the thread's loop on ``"exit"``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def __call__(self, items: list[str]) -> Rows:
        if "hold" in items:
            self.entered.set()
            self.release.wait(10)
        if "bad" in items:
            raise ValueError("items we cannot turn into rows")
        if "exit" in items:
            raise SystemExit("a bug of ours calls sys.exit()")
        return _rows(*items)


@pytest.fixture
def held() -> Iterator[_Held]:
    made = _Held()
    yield made
    made.release.set()


def test_insert_sql_names_every_column_with_one_placeholder_each() -> None:
    assert insert_sql("t", ("a", "b", "c")) == "INSERT INTO t (a, b, c) VALUES (?, ?, ?)"
    assert insert_sql("t", ("a",), verb="INSERT OR REPLACE") == "INSERT OR REPLACE INTO t (a) VALUES (?)"


def test_rows_run_their_statements_in_order_and_join_with_their_items(db_path: Path) -> None:
    joined = Rows.joined([_rows("a", "b"), Rows(), _rows("c")])
    assert joined.items == 3
    empty = Rows(items=5)
    empty.add(_INSERT, [])
    assert empty.statements == []  # nothing to run: not kept
    writer = _writer(db_path)
    assert writer.write(joined) is True
    writer.close()
    assert _keys(db_path) == ["a", "b", "c"]


def test_a_writer_that_cannot_open_the_store_counts_every_lost_item_and_names_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = _writer(tmp_path)  # a directory: SQLite cannot open it
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):
        assert writer.write(_rows("a", "b")) is False
        assert writer.write(_rows("c", "d", "e")) is False
    assert writer.lost == 5
    assert writer.is_open is False
    assert tallyspan.stats()["dropped.test_things"] == 5
    assert tallyspan.stats()["errors.test.write"] == 2
    assert _messages(caplog) == [f"could not write things to the tallyspan store at {tmp_path}"] * 2
    writer.close()
    assert writer.write(_rows("f")) is False  # closed: counted too
    assert writer.lost == 6


def test_a_writer_is_open_once_it_wrote_and_closed_after(db_path: Path) -> None:
    writer = _writer(db_path)
    assert writer.is_open is False  # nothing written yet: the file is not even opened
    assert writer.flush() is True
    assert writer.write(_rows("a")) is True
    assert (writer.is_open, writer.kept, writer.lost) == (True, 0, 0)
    writer.close()
    assert writer.is_open is False
    writer.close()  # twice is harmless


def test_the_thread_writes_everything_submitted_before_a_flush(db_path: Path) -> None:
    writer = _writer(db_path)
    thread: WriterThread[str] = WriterThread(writer, lambda items: _rows(*items), name="tallyspan-test")
    assert thread.flush() is True  # nothing submitted: nothing to wait for
    for key in ("a", "b", "c"):
        assert thread.submit(key) is True
    assert thread.flush(5000) is True
    assert _keys(db_path) == ["a", "b", "c"]
    assert thread.flush(5000) is True  # nothing new, nothing lost: at once
    thread.shutdown()
    assert writer.is_open is False  # shutdown closes the writer
    assert thread.submit("late") is False
    assert tallyspan.stats()["dropped.test_things"] == 1


def test_items_over_the_queue_limit_are_dropped_counted_by_size_and_flush_reports_each_loss(
    db_path: Path, held: _Held
) -> None:
    thread: WriterThread[str] = WriterThread(_writer(db_path), held, name="tallyspan-test", max_queued=4)
    assert thread.submit("hold") is True
    assert held.entered.wait(10)  # taken by the thread: the queue is empty again
    assert thread.submit("big", size=5) is False
    assert tallyspan.stats()["dropped.test_things"] == 5
    held.release.set()
    assert thread.flush(5000) is False  # five things were lost since the last flush
    assert thread.flush(5000) is True
    assert thread.submit("big", size=5) is False
    assert thread.flush(5000) is False  # the same loss again is a new loss
    assert tallyspan.stats()["dropped.test_things"] == 10
    thread.shutdown()


def test_flush_gives_up_at_its_timeout_while_the_thread_is_stuck(db_path: Path, held: _Held) -> None:
    thread: WriterThread[str] = WriterThread(_writer(db_path), held, name="tallyspan-test")
    thread.submit("hold")
    assert held.entered.wait(10)
    started = time.monotonic()
    assert thread.flush(50) is False
    assert time.monotonic() - started < 0.9  # its timeout, not a second or more
    held.release.set()
    assert thread.flush(5000) is True
    thread.shutdown()


def test_shutdown_gives_up_at_its_timeout_and_a_later_flush_says_what_was_left(
    db_path: Path, held: _Held
) -> None:
    thread: WriterThread[str] = WriterThread(_writer(db_path), held, name="tallyspan-test")
    thread.submit("hold")
    assert held.entered.wait(10)
    thread.submit("queued")
    started = time.monotonic()
    thread.shutdown(100)
    assert time.monotonic() - started < 2
    assert thread.flush() is False  # "queued" is still waiting behind the stuck thread
    held.release.set()


def test_items_that_cannot_be_prepared_are_lost_counted_and_the_thread_goes_on(
    db_path: Path, held: _Held, caplog: pytest.LogCaptureFixture
) -> None:
    thread: WriterThread[str] = WriterThread(_writer(db_path), held, name="tallyspan-test")
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):
        thread.submit("bad", size=3)
        assert thread.flush(5000) is False
    assert tallyspan.stats()["dropped.test_things"] == 3
    assert tallyspan.stats()["errors.test.prepare"] == 1
    assert _messages(caplog) == ["could not prepare things for the store"]
    thread.submit("good")
    assert thread.flush(5000) is True
    assert _keys(db_path) == ["good"]
    thread.shutdown()


def test_the_thread_outlives_a_base_exception_and_the_flush_it_interrupted_is_false(
    db_path: Path, held: _Held, caplog: pytest.LogCaptureFixture
) -> None:
    thread: WriterThread[str] = WriterThread(_writer(db_path), held, name="tallyspan-test")
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):
        thread.submit("exit")
        assert thread.flush(5000) is False
    assert tallyspan.stats()["errors.test.thread"] == 1
    assert _messages(caplog) == ["the tallyspan-test thread failed"]
    thread.submit("after")
    assert thread.flush(5000) is True
    assert _keys(db_path) == ["after"]
    assert "errors.test.restarted" not in tallyspan.stats()  # the same thread went on
    thread.shutdown()


def test_the_queue_takes_items_up_to_its_limit_exactly_each_time_it_empties(db_path: Path) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), lambda items: _rows(*items), name="tallyspan-test", max_queued=4
    )
    assert thread.submit("a", size=4) is True
    assert thread.flush(5000) is True
    assert thread.submit("b", size=4) is True  # the queue is empty again: room for four
    assert thread.flush(5000) is True
    assert _keys(db_path) == ["a", "b"]
    assert "dropped.test_things" not in tallyspan.stats()
    thread.shutdown()
    tiny: WriterThread[str] = WriterThread(
        _writer(db_path), lambda items: _rows(*items), name="t", max_queued=0
    )
    assert tiny.submit("c", size=2) is False  # a limit below one is one
    assert tiny.submit("c", size=1) is True
    tiny.shutdown()


def test_a_flush_or_a_full_batch_does_not_wait_for_the_schedule_delay(db_path: Path) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), lambda items: _rows(*items), name="tallyspan-test", schedule_delay_millis=60_000
    )
    thread.submit("a")
    started = time.monotonic()
    assert thread.flush(10_000) is True
    assert time.monotonic() - started < 5
    thread.submit("batch", size=512)  # a full batch: written at once, without a flush
    deadline = time.monotonic() + 5
    while "batch" not in _keys(db_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _keys(db_path) == ["a", "batch"]
    thread.shutdown()


def test_the_writer_thread_is_a_daemon_named_for_its_store(db_path: Path) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), lambda items: _rows(*items), name="tallyspan-own"
    )
    thread.submit("a")
    assert thread.flush(5000)
    (running,) = [t for t in threading.enumerate() if t.name == "tallyspan-own"]
    assert running.daemon is True  # it must never keep the app's process alive
    thread.shutdown()


def test_rows_kept_under_a_lock_are_written_by_the_retry_once_it_is_free(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    writer = _writer(db_path, busy_timeout_millis=50)
    thread: WriterThread[str] = WriterThread(writer, lambda items: _rows(*items), name="tallyspan-test")
    lock_holder.execute("BEGIN EXCLUSIVE")
    thread.submit("kept")
    assert thread.flush(200) is False
    time.sleep(1.5)  # a retry comes and goes while the lock is still held
    lock_holder.execute("COMMIT")
    deadline = time.monotonic() + 5
    while "kept" not in _keys(db_path) and time.monotonic() < deadline:
        time.sleep(0.05)  # no write, no flush: the retry writes it
    assert _keys(db_path) == ["kept"]
    assert thread.submit("after") is True
    assert thread.flush(5000) is True
    assert _keys(db_path) == ["kept", "after"]
    assert not any(key.endswith(".restarted") for key in tallyspan.stats())
    thread.shutdown()


def test_flush_and_close_wait_for_the_lock_up_to_the_busy_timeout(db_path: Path) -> None:
    connect(db_path).close()
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    writer = _writer(db_path, busy_timeout_millis=400)
    holder.execute("BEGIN EXCLUSIVE")
    assert writer.write(_rows("a")) is False  # kept after one busy timeout
    threading.Timer(0.1, holder.execute, ("COMMIT",)).start()
    assert writer.flush(5000) is True  # waited for the lock instead of failing at once
    holder.execute("BEGIN EXCLUSIVE")
    assert writer.write(_rows("b")) is False  # kept at once: the store is known to be contended
    threading.Timer(0.1, holder.execute, ("COMMIT",)).start()
    writer.close()  # one last wait for the lock
    holder.close()
    assert _keys(db_path) == ["a", "b"]
    assert writer.lost == 0


def _wait_for(db_path: Path, key: str) -> list[str]:
    deadline = time.monotonic() + 5
    while key not in _keys(db_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _keys(db_path)


def test_a_lone_item_wakes_the_idle_thread_and_is_written_after_the_schedule_delay(db_path: Path) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), lambda items: _rows(*items), name="tallyspan-test", schedule_delay_millis=50
    )
    thread.submit("first")
    assert thread.flush(5000) is True  # the thread now waits for work, with nothing kept: no timer
    thread.submit("alone")
    assert _wait_for(db_path, "alone") == ["first", "alone"]  # no flush asked for it
    thread.shutdown()


def test_a_batch_that_fills_up_is_written_at_once(db_path: Path) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), lambda items: _rows(*items), name="tallyspan-test", schedule_delay_millis=60_000
    )
    thread.submit("first")
    assert thread.flush(5000) is True
    thread.submit("second")
    time.sleep(0.2)  # the thread gathers for the schedule delay: a minute
    thread.submit("rest", size=511)  # 512 items in all: a full batch
    assert _wait_for(db_path, "rest") == ["first", "second", "rest"]
    thread.shutdown()


class _Item:
    """A queued item that can be watched for being let go (a weak reference)."""

    def __init__(self, key: str) -> None:
        self.key = key


def test_the_thread_lets_a_written_batch_go_before_it_waits_for_the_next(db_path: Path) -> None:
    thread: WriterThread[_Item] = WriterThread(
        _writer(db_path), lambda items: _rows(*(item.key for item in items)), name="tallyspan-test"
    )
    item = _Item("written")
    watched = weakref.ref(item)
    thread.submit(item)
    del item
    assert _wait_for(db_path, "written") == ["written"]  # no flush: that would hand the thread new work
    deadline = time.monotonic() + 5
    while watched() is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # the thread returns from the write, then lets go of the batch
    assert watched() is None
    thread.shutdown()


def test_a_flush_with_nothing_to_write_does_not_touch_a_failing_store(tmp_path: Path) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(tmp_path), lambda items: _rows(*items), name="tallyspan-test"
    )
    thread.submit("a", size=3)
    thread.submit("b", size=3)  # still gathering "a": the queue holds 3 of 16384... both queued
    assert thread.flush(5000) is False
    assert tallyspan.stats()["errors.test.write"] == 1
    assert thread.flush(5000) is True  # nothing new, nothing lost, and no attempt to write
    assert tallyspan.stats()["errors.test.write"] == 1
    thread.shutdown()


def test_a_writer_loss_and_a_queue_drop_of_the_same_size_are_both_losses(tmp_path: Path) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(tmp_path), lambda items: _rows(*items), name="tallyspan-test", max_queued=1
    )
    assert thread.submit("a") is True  # gathered for the schedule delay, then lost by the writer
    assert thread.submit("b") is False  # the queue is full meanwhile: dropped
    assert thread.flush(5000) is False  # one lost by the writer and one dropped: two losses, not none
    assert tallyspan.stats()["dropped.test_things"] == 2
    thread.shutdown()


def _locked_message(db_path: Path, max_pending: int) -> str:
    return (
        f"the tallyspan store at {db_path} is locked by another connection; up to {max_pending} things "
        "are kept and written once it is free"
    )


def test_rows_kept_under_a_lock_stay_within_max_pending_and_the_oldest_batches_go_first(
    db_path: Path, lock_holder: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    writer = _writer(db_path, busy_timeout_millis=50, max_pending=4)
    lock_holder.execute("BEGIN EXCLUSIVE")
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):
        assert writer.write(_rows("a1", "a2", "a3")) is False
        assert writer.write(_rows("b1")) is False
        assert (writer.kept, writer.lost) == (4, 0)  # exactly the limit: all kept
        assert writer.write(_rows("c1")) is False
        assert (writer.kept, writer.lost) == (2, 3)  # one over: the oldest batch, all of it, goes
        lock_holder.execute("COMMIT")
        assert writer.flush(5000) is True
        assert _keys(db_path) == ["b1", "c1"]
        lock_holder.execute("BEGIN EXCLUSIVE")
        assert writer.write(_rows("d1", "d2", "d3", "d4", "d5")) is False
        assert (writer.kept, writer.lost) == (5, 3)  # a batch over the limit alone is kept whole
        assert writer.write(_rows("e1", "e2")) is False
        assert (writer.kept, writer.lost) == (2, 8)  # the newest is kept, the one before it goes
        lock_holder.execute("COMMIT")
        assert writer.flush(5000) is True
    assert _keys(db_path) == ["b1", "c1", "e1", "e2"]
    assert (writer.kept, writer.lost) == (0, 8)
    assert losses() == {"dropped.test_things": 8, "errors.test.locked": 5}
    assert _messages(caplog) == [_locked_message(db_path, 4)] * 5
    writer.close()


def test_a_pending_limit_below_one_keeps_the_newest_batch(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    writer = _writer(db_path, busy_timeout_millis=50, max_pending=0)
    lock_holder.execute("BEGIN EXCLUSIVE")
    assert writer.write(_rows("a")) is False
    assert writer.write(_rows("b")) is False
    assert (writer.kept, writer.lost) == (1, 1)
    lock_holder.execute("COMMIT")
    writer.close()
    assert _keys(db_path) == ["b"]


def _release_after(holder: sqlite3.Connection, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, holder.execute, ("COMMIT",))
    timer.start()
    return timer


def test_a_write_waits_out_a_brief_lock_unless_the_store_is_known_contended(db_path: Path) -> None:
    connect(db_path).close()
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    patient = _writer(db_path, busy_timeout_millis=10_000)
    holder.execute("BEGIN EXCLUSIVE")
    _release_after(holder, 0.2).join()
    holder.execute("BEGIN EXCLUSIVE")
    _release_after(holder, 0.2)
    assert patient.write(_rows("first")) is True  # its first write waited for the lock
    writer = _writer(db_path, busy_timeout_millis=300)
    holder.execute("BEGIN EXCLUSIVE")
    assert writer.write(_rows("kept1")) is False  # after its busy timeout
    started = time.monotonic()
    assert writer.write(_rows("kept2")) is False
    assert time.monotonic() - started < 0.25  # known contended: tried once, without waiting
    holder.execute("COMMIT")
    assert writer.flush(5000) is True
    holder.execute("BEGIN EXCLUSIVE")
    _release_after(holder, 0.1)
    assert writer.write(_rows("after")) is True  # written since: it waits for the lock again
    holder.close()
    patient.close()
    writer.close()
    assert _keys(db_path) == ["first", "kept1", "kept2", "after"]
    assert losses() == {"errors.test.locked": 2}


def test_a_flush_waits_for_the_lock_no_longer_than_its_timeout(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    writer = _writer(db_path, busy_timeout_millis=1000)
    lock_holder.execute("BEGIN EXCLUSIVE")
    assert writer.write(_rows("a")) is False
    started = time.monotonic()
    assert writer.flush(100) is False
    assert time.monotonic() - started < 0.6  # its 100 ms, not the busy timeout's second
    lock_holder.execute("COMMIT")
    writer.close()
    assert _keys(db_path) == ["a"]


def test_close_counts_what_it_could_not_write_and_keeps_nothing(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    writer = _writer(db_path, busy_timeout_millis=50)
    lock_holder.execute("BEGIN EXCLUSIVE")
    assert writer.write(_rows("a", "b")) is False
    writer.close()  # one last wait for the lock, in vain
    assert (writer.kept, writer.lost, writer.is_open) == (0, 2, False)
    assert losses() == {"dropped.test_things": 2, "errors.test.locked": 2}
    lock_holder.execute("COMMIT")
    assert _keys(db_path) == []


def test_a_flush_or_shutdown_behind_a_busy_write_does_not_wait_for_the_schedule_delay(
    db_path: Path, held: _Held
) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), held, name="tallyspan-test", schedule_delay_millis=60_000
    )
    thread.submit("hold", size=512)  # a full batch: taken at once
    assert held.entered.wait(10)
    thread.submit("queued")  # behind the busy write; the flush asks for it before the thread looks
    threading.Timer(0.2, held.release.set).start()
    started = time.monotonic()
    assert thread.flush(10_000) is True
    assert time.monotonic() - started < 5
    assert _keys(db_path) == ["hold", "queued"]
    thread.shutdown()
    held.release.clear()
    held.entered.clear()
    other_path = db_path.with_name("other.db")
    other: WriterThread[str] = WriterThread(
        _writer(other_path), held, name="tallyspan-test", schedule_delay_millis=60_000
    )
    other.submit("hold", size=512)
    assert held.entered.wait(10)
    other.submit("last")
    threading.Timer(0.2, held.release.set).start()
    started = time.monotonic()
    other.shutdown(10_000)
    assert time.monotonic() - started < 5
    assert _keys(other_path) == ["hold", "last"]


def test_shutdown_writes_what_was_submitted_before_it_returns_and_flush_then_says_so(db_path: Path) -> None:
    writer = _writer(db_path)
    thread: WriterThread[str] = WriterThread(writer, lambda items: _rows(*items), name="tallyspan-test")
    thread.submit("a")
    thread.shutdown()
    assert _keys(db_path) == ["a"]
    assert thread.flush(100) is True  # nothing queued, nothing kept
    unused = _writer(db_path)
    never: WriterThread[str] = WriterThread(unused, lambda items: _rows(*items), name="tallyspan-test")
    never.shutdown()  # no thread was ever started: the writer is closed all the same
    assert unused.write(_rows("late")) is False
    assert unused.lost == 1


def test_after_fork_the_thread_starts_afresh_with_an_empty_queue(db_path: Path) -> None:
    """What the fork hook does in the child, driven in this process (a mutation tool sees no child):
    the parent's thread, here held for good, is gone there with what it had queued; the child's items
    go through a thread of its own, with the whole queue limit."""
    entered, release = threading.Event(), threading.Event()

    def prepare(items: list[str]) -> Rows:
        if items == ["parents"]:
            entered.set()
            release.wait(10)
            return Rows()  # the parent's batch: nothing this test writes
        return _rows(*items)

    thread: WriterThread[str] = WriterThread(_writer(db_path), prepare, name="tallyspan-test", max_queued=512)
    thread.submit("parents", size=512)  # a full batch: taken at once
    assert entered.wait(10)
    thread.submit("queued", size=512)  # the queue is full
    parents_thread = thread._thread
    assert parents_thread is not None

    thread._reset_after_fork()

    assert thread.submit("b", size=512) is True  # the whole limit again
    assert thread.flush(10_000) is True
    assert _keys(db_path) == ["b"]
    thread.shutdown()
    release.set()  # the parent's thread finds shutdown and ends too, writing nothing
    parents_thread.join(10)
    assert not parents_thread.is_alive()
    # Nothing lost; each full submit gave the thread a turn (the parent's, the stuck one, the child's).
    assert tallyspan.stats() == {"backpressure.test_turns": 3}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_writes_only_its_own_rows_and_leaves_the_parents_kept_rows_to_the_parent(
    db_path: Path, lock_holder: sqlite3.Connection
) -> None:
    writer = _writer(db_path, busy_timeout_millis=500)
    assert writer.write(_rows("parent")) is True  # the parent's connection is open
    lock_holder.execute("BEGIN EXCLUSIVE")
    assert writer.write(_rows("kept-1", "kept-2")) is False  # the parent now knows the store contended
    lock_holder.execute("COMMIT")

    def child_writes() -> bool:
        holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN EXCLUSIVE")
        threading.Timer(0.1, holder.execute, ("COMMIT",)).start()
        written = writer.write(_rows("child"))  # waits for the lock: the parent's contention is not its own
        return written and (writer.kept, writer.lost, _keys(db_path)) == (0, 0, ["parent", "child"])

    def child_closes() -> bool:
        writer.close()  # a prefork worker's shutdown: the parent's kept rows are neither written nor lost
        return (writer.kept, writer.lost) == (0, 0)

    assert run_forked(child_writes) == 0
    assert run_forked(child_closes) == 0
    assert writer.kept == 2  # still the parent's to write
    assert writer.flush(5000) is True
    assert _keys(db_path) == ["parent", "child", "kept-1", "kept-2"]
    writer.close()
    assert "dropped.test_things" not in tallyspan.stats()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_writes_through_a_thread_of_its_own_and_not_what_the_parent_queued(
    db_path: Path,
) -> None:
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), lambda items: _rows(*items), name="tallyspan-test", schedule_delay_millis=60_000
    )
    thread.submit("first")
    assert thread.flush(5000) is True  # the parent's thread runs
    thread.submit("parent")  # gathered for a minute

    def child() -> bool:
        thread.submit("child")
        return thread.flush(30_000) and _keys(db_path) == ["first", "child"]

    assert run_forked(child) == 0
    assert thread.flush(5000) is True
    assert _keys(db_path) == ["first", "child", "parent"]
    assert losses() == {}
    thread.shutdown()


def test_the_threads_flush_waits_for_a_lock_held_a_moment_within_the_flushs_timeout(db_path: Path) -> None:
    connect(db_path).close()
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    thread: WriterThread[str] = WriterThread(
        _writer(db_path, busy_timeout_millis=300), lambda items: _rows(*items), name="tallyspan-test"
    )
    holder.execute("BEGIN EXCLUSIVE")
    thread.submit("a")
    assert thread.flush(1000) is False  # the write, then the flush, wait out the busy timeout in vain
    threading.Timer(0.1, holder.execute, ("COMMIT",)).start()
    assert thread.flush(5000) is True  # known contended, but a flush waits for the lock
    assert _keys(db_path) == ["a"]
    thread.shutdown()
    holder.close()


class _ExitingHandler(logging.Handler):
    """A logging handler of the app's that calls ``sys.exit()`` (a bug elsewhere): raised from our own
    error handling on the writer's thread, it ends the thread."""

    def emit(self, record: logging.LogRecord) -> None:
        raise SystemExit("an app's log handler calls sys.exit()")


# The thread's death is the point: pytest would report the SystemExit that ended it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_died_is_started_again_on_the_next_submit_and_counted(
    db_path: Path, held: _Held
) -> None:
    thread: WriterThread[str] = WriterThread(_writer(db_path), held, name="tallyspan-test")
    handler = _ExitingHandler()
    logger = logging.getLogger("tallyspan_exporters._writer")
    logger.addHandler(handler)
    try:
        thread.submit("exit")  # caught, and its report ends the thread
        assert thread.flush(10_000) is False
        dead = thread._thread
        assert dead is not None
        dead.join(10)
        assert not dead.is_alive()
    finally:
        logger.removeHandler(handler)
    assert thread.submit("after") is True
    assert thread.flush(10_000) is True
    assert _keys(db_path) == ["after"]
    assert thread._thread is not dead
    assert losses() == {"errors.test.thread": 1, "errors.test.restarted": 1}
    thread.shutdown()


def test_a_flush_or_shutdown_tries_rows_kept_under_a_lock_once_each(
    db_path: Path, lock_holder: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tallyspan_exporters._writer as writer_module

    monkeypatch.setattr(writer_module, "RETRY_SECONDS", 3600.0)  # no retry of its own within the test
    writer = _writer(db_path, busy_timeout_millis=50)  # waits for a held lock a moment only
    thread: WriterThread[str] = WriterThread(writer, lambda items: _rows(*items), name="tallyspan-test")
    lock_holder.execute("BEGIN EXCLUSIVE")
    thread.submit("kept")
    assert thread.flush(10_000) is False  # the write, then the flush, each found the lock held
    assert (writer.kept, tallyspan.stats()) == (1, {"errors.test.locked": 2})
    assert thread.flush(10_000) is False  # one more try, by the flush, waiting for the lock
    assert (writer.kept, tallyspan.stats()) == (1, {"errors.test.locked": 3})
    thread.shutdown(10_000)  # one last try, by the writer's close
    assert (writer.kept, writer.lost) == (0, 1)
    assert losses() == {"errors.test.locked": 4, "dropped.test_things": 1}


class _Unclosable(sqlite3.Connection):
    """A connection whose ``close`` fails after closing (a disk gone bad under it)."""

    def close(self) -> None:
        super().close()
        raise sqlite3.OperationalError("disk I/O error")


def test_a_connection_that_fails_to_close_is_logged_and_counted_and_close_still_ends_the_writer(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    connect(db_path).close()
    writer = _writer(db_path)
    # What the writer's first write would open, but failing to close (a stand-in for a broken one).
    writer._db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False, factory=_Unclosable)
    assert writer.write(_rows("a")) is True
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):
        writer.close()
    assert writer.is_open is False
    assert losses() == {"errors.test.close": 1}
    assert _messages(caplog) == [f"could not close the tallyspan store at {db_path}"]
    assert writer.write(_rows("b")) is False  # closed all the same
    assert _keys(db_path) == ["a"]


class _LockedReports(logging.Handler):
    """Counts the writer's reports of a held lock, and lets a test wait for the n-th."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._condition = threading.Condition()
        self._seen = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.DEBUG and "is locked by another connection" in record.getMessage():
            with self._condition:
                self._seen += 1
                self._condition.notify_all()

    def wait_for(self, reports: int) -> bool:
        with self._condition:
            return self._condition.wait_for(lambda: self._seen >= reports, timeout=30)


def test_a_flush_past_its_deadline_tries_kept_rows_without_waiting_for_the_lock(
    db_path: Path,
    lock_holder: sqlite3.Connection,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import tallyspan_exporters._writer as writer_module

    monkeypatch.setattr(writer_module, "RETRY_SECONDS", 3600.0)  # no retry of its own within the test
    writer = _writer(db_path, busy_timeout_millis=3_600_000)  # an hour: only a flush's deadline cuts it short
    writer._contended = True  # as after a write that waited out the busy timeout: later ones try at once
    thread: WriterThread[str] = WriterThread(writer, lambda items: _rows(*items), name="tallyspan-test")
    reports = _LockedReports()
    logger = logging.getLogger("tallyspan_exporters._writer")
    logger.addHandler(reports)
    lock_holder.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):  # the reports are debug
            thread.submit("kept")
            assert reports.wait_for(1)  # kept, tried once without waiting
            assert thread.flush(0) is False  # no time at all: the thread's flush must not wait for the lock
            assert reports.wait_for(2)  # tried without waiting, not for the hour of the busy timeout
    finally:
        lock_holder.execute("COMMIT")
        logger.removeHandler(reports)
    assert thread.flush(30_000) is True
    assert _keys(db_path) == ["kept"]
    assert losses() == {"errors.test.locked": 2}
    thread.shutdown()


def _sqlite_memory_used() -> int:
    """Bytes SQLite holds in this process, all connections together (its page caches, mostly)."""
    import _sqlite3

    library = _CDLL(_sqlite3.__file__)  # the SQLite that module is linked with
    library.sqlite3_memory_used.restype = ctypes.c_int64
    return int(library.sqlite3_memory_used())


def test_a_pause_after_1024_items_gives_memory_back_once_and_one_after_1023_does_not(
    db_path: Path, c_library: Callable[..., CLibrary]
) -> None:
    library = c_library()
    writer = _writer(db_path)
    thread: WriterThread[str] = WriterThread(
        writer, lambda items: _rows(*items), name="tallyspan-test", release_idle_millis=0
    )
    for index in range(1023):
        assert thread.submit(f"k{index}") is True
    assert thread.flush(5000) is True
    assert thread._idle.wait(10)  # nothing to do and nothing due
    assert (thread.memory_releases, library.calls) == (0, [])
    cached = _sqlite_memory_used()
    assert thread.submit("k1023") is True
    assert thread.flush(5000) is True  # a flush alone gives nothing back: the pause after it does
    assert thread._idle.wait(10)
    assert (thread.memory_releases, library.calls) == (1, [(0,)])
    # SQLite let its page cache go: at least the four 16 KiB pages the 1,023 rows filled.
    assert _sqlite_memory_used() <= cached - 4 * 16384
    assert thread.submit("after") is True  # the shrunk connection goes on writing
    assert thread.flush(5000) is True
    assert thread._idle.wait(10)
    assert thread.memory_releases == 1  # one item since: no busy spell
    assert _keys(db_path) == [*(f"k{index}" for index in range(1024)), "after"]
    assert losses() == {}
    thread.shutdown()


def test_items_lost_to_a_failing_store_count_towards_a_busy_spell_too(
    tmp_path: Path, c_library: Callable[..., CLibrary]
) -> None:
    library = c_library()
    (tmp_path / "a-file").write_text("")
    writer = _writer(tmp_path / "a-file" / "store.db")  # its folder is a file: nothing can be written
    thread: WriterThread[str] = WriterThread(
        writer, lambda items: _rows(*items), name="tallyspan-test", release_idle_millis=0
    )
    for index in range(1024):
        thread.submit(f"k{index}")
    assert thread.flush(5000) is False
    assert thread._idle.wait(10)
    # Their rows were made and dropped all the same; with no connection there is no cache to shrink.
    assert (thread.memory_releases, library.calls) == (1, [(0,)])
    assert tallyspan.stats()["dropped.test_things"] == 1024
    thread.shutdown()


def test_shrinking_a_writer_that_never_wrote_opens_nothing(db_path: Path) -> None:
    writer = _writer(db_path)
    writer.shrink_memory()
    assert not db_path.exists()
    assert writer.is_open is False
    assert losses() == {}


def test_a_connection_that_cannot_shrink_is_logged_and_counted_and_the_writer_goes_on(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = _writer(db_path)
    assert writer.write(_rows("a")) is True
    assert writer._db is not None
    writer._db.close()  # what a broken connection answers: ProgrammingError
    with caplog.at_level(logging.DEBUG, logger="tallyspan_exporters._writer"):
        writer.shrink_memory()
    assert losses() == {"errors.test.shrink": 1}
    assert _messages(caplog) == [f"could not shrink the tallyspan store's cache at {db_path}"]


class _BusyPrepare:
    """A ``prepare`` that costs the thread about as much pure-Python CPU per item as the store's rows do."""

    def __init__(self) -> None:
        self.items = 0

    def __call__(self, items: list[str]) -> Rows:
        for _ in items:
            total = 0
            for number in range(1500):
                total += number
        self.items += len(items)
        return Rows()


def test_a_caller_that_keeps_the_gil_busy_gives_the_thread_turns_instead_of_dropping_items(
    db_path: Path,
) -> None:
    """Behind a caller that holds the GIL and lets go of it only for short moments, CPython would starve
    the writer's thread (see tallyspan.plugin.Turns): from 512 // 16 queued items on, the caller waits
    for it to run."""
    prepare = _BusyPrepare()
    thread: WriterThread[str] = WriterThread(
        _writer(db_path), prepare, name="tallyspan-test", max_queued=512, schedule_delay_millis=0
    )
    for index in range(4000):
        assert thread.submit(str(index)), f"item {index} was dropped"
        total = 0
        for number in range(2000):
            total += number
        os.urandom(16)  # a short release of the GIL, as the app's socket calls
    assert thread.flush(30_000)
    assert prepare.items == 4000
    stats = tallyspan.stats()
    assert "dropped.test_things" not in stats
    thread.shutdown()


def test_a_stuck_thread_costs_its_caller_one_turn_per_step_of_its_backlog_not_one_per_item(
    db_path: Path, held: _Held
) -> None:
    thread: WriterThread[str] = WriterThread(_writer(db_path), held, name="tallyspan-test", max_queued=32)
    thread.submit("hold", size=2)  # 32 // 16 = 2 items wait: a turn, which the thread takes
    assert held.entered.wait(10)
    assert tallyspan.stats()["backpressure.test_turns"] == 1
    for index in range(20):
        thread.submit(str(index))  # turns the held thread never takes: at 2 items queued, 4, ..., 20
    assert tallyspan.stats()["backpressure.test_turns"] == 11
    held.release.set()
    assert thread.flush(10_000)
    thread.submit("a", size=2)  # the thread ran since: the next turn is given
    assert tallyspan.stats()["backpressure.test_turns"] == 12
    assert thread.flush(10_000)
    thread.shutdown()


def test_rows_report_progress_after_each_statement(db_path: Path) -> None:
    rows = _rows(*[f"k{number}" for number in range(100)])  # 100 rows: 64 + 32 + 4, one statement
    rows.add(f"DELETE FROM {SELF_STATS} WHERE key = ?", [("k3",), ("k4",)])
    steps: list[int] = []
    db = connect(db_path)
    try:
        with db:
            rows.write(db, progress=lambda: steps.append(len(steps)))
    finally:
        db.close()
    assert steps == [0, 1]  # after the INSERT's statements, after the DELETE's
    assert len(_keys(db_path)) == 98


def test_a_backlog_is_written_in_parts_of_a_batch_each_answering_turns(db_path: Path, held: _Held) -> None:
    """Behind a busy app one transaction of a whole queue (16,384 spans) kept the thread from answering
    the turns it was given for seconds; the backlog goes in parts of DEFAULT_BATCH_ITEMS, in order."""
    parts: list[list[str]] = []

    def prepare(items: list[str]) -> Rows:
        parts.append(items)
        return held(items)

    thread: WriterThread[str] = WriterThread(
        _writer(db_path), prepare, name="tallyspan-test", max_queued=4096, schedule_delay_millis=0
    )
    thread.submit("hold")
    assert held.entered.wait(10)
    backlog = [f"k{number}" for number in range(1300)]
    for key in backlog:
        thread.submit(key)
    held.release.set()
    assert thread.flush(30_000)
    thread.shutdown()
    assert [len(part) for part in parts] == [
        1,
        DEFAULT_BATCH_ITEMS,
        DEFAULT_BATCH_ITEMS,
        1300 - 2 * DEFAULT_BATCH_ITEMS,
    ]
    assert _keys(db_path) == ["hold", *backlog]
