"""Turns: a producer lets go of the GIL until our consumer thread runs; while a turn is not taken, again
each time the backlog grew by its size at the first turn not taken; never on the consumer's own thread."""

from __future__ import annotations

import threading
import time

import pytest

import tallyspan
from tallyspan import _turns as _turns_module
from tallyspan.plugin import HandOvers, Turns


def _turns() -> int:
    return tallyspan.stats().get("backpressure.test_turns", 0)


def test_a_turn_not_taken_is_given_again_each_time_the_backlog_grew_by_its_first_size() -> None:
    turns = Turns("backpressure.test_turns")
    turns.give(10)  # no consumer runs: waits its timeout once
    assert _turns() == 1
    for queued in range(10, 20):
        turns.give(queued)
    assert _turns() == 1
    turns.give(20)
    assert _turns() == 2
    turns.give(29)
    assert _turns() == 2
    turns.give(30)  # a step of 10 again, not a doubling (40)
    assert _turns() == 3
    turns.taken()
    turns.give(3)  # taken: a new series, whose step is 3
    turns.give(5)
    assert _turns() == 4
    turns.give(6)
    assert _turns() == 5


def test_once_the_consumer_took_its_turn_the_next_is_given_at_any_backlog() -> None:
    turns = Turns("backpressure.test_turns")
    turns.give(100)
    turns.taken()
    turns.give(1)
    assert _turns() == 2
    turns.give(1)  # not taken, not grown by another step
    assert _turns() == 2


def test_the_consumers_own_thread_never_waits_for_itself() -> None:
    turns = Turns("backpressure.test_turns")
    turns.consumer_started()
    turns.give(10)
    turns.give(1000)
    assert _turns() == 0
    other = threading.Thread(target=turns.give, args=(10,))
    other.start()
    other.join(10)
    assert _turns() == 1


def test_after_fork_no_turn_is_owed_and_no_thread_is_the_consumer() -> None:
    turns = Turns("backpressure.test_turns")
    turns.consumer_started()
    other = threading.Thread(target=turns.give, args=(100,))
    other.start()
    other.join(10)  # a turn given at a backlog of 100 and never taken
    turns.reset_after_fork()
    turns.give(10)  # this thread is not the consumer any more, and the old turn is forgotten
    assert _turns() == 2


def test_a_hand_over_waits_until_the_consumer_runs_and_only_one_that_times_out_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    turns = Turns("backpressure.test_turns")
    consumer_ran = threading.Event()

    def consumer() -> None:
        turns.consumer_started()
        consumer_ran.wait(10)  # runs once the producer let go of the GIL and handed over
        turns.taken()

    # A loaded host may not run the consumer within the production wait (10 ms): the turn taken in time
    # is tested with a wait no scheduler misses, the turn nobody takes with the real one.
    monkeypatch.setattr(_turns_module, "TURN_TIMEOUT_S", 30.0)
    thread = threading.Thread(target=consumer)
    thread.start()
    consumer_ran.set()
    turns.hand_over()  # taken in time: a regular turn, not counted
    thread.join(10)
    assert _turns() == 0
    monkeypatch.undo()
    turns.hand_over()  # nobody takes it: waits the timeout once, counted
    assert _turns() == 1
    turns.hand_over()  # the last one is not taken yet: no second wait for a consumer that does not run
    assert _turns() == 1


def test_a_hand_over_not_taken_is_given_again_once_the_backlog_doubled() -> None:
    """A consumer that got the GIL but worked past the timeout lost it again mid-batch: left alone, it
    would starve behind the app until backpressure; a stuck one costs a wait per doubling only."""
    turns = Turns("backpressure.test_turns")
    turns.hand_over(10)  # nobody takes it: counted
    assert _turns() == 1
    turns.hand_over(19)  # not taken yet, the backlog not doubled: no wait
    assert _turns() == 1
    turns.hand_over(20)  # doubled: handed over again (and, not taken, counted)
    assert _turns() == 2
    turns.hand_over(39)
    assert _turns() == 2
    turns.hand_over(0)  # a producer that does not see the backlog never hands over again
    assert _turns() == 2
    turns.taken()
    turns.hand_over(1)  # taken since: a regular hand-over at any backlog
    assert _turns() == 3


def test_a_backlog_after_a_hand_over_not_taken_starts_a_new_series_of_turns() -> None:
    turns = Turns("backpressure.test_turns")
    turns.give(4)  # not taken: counted
    turns.taken()
    turns.hand_over()  # not taken either (counted): the turns' step must not stay 4 after it
    assert _turns() == 2
    turns.give(100)  # a new series: step 100
    assert _turns() == 3
    turns.give(150)
    assert _turns() == 3
    turns.give(200)
    assert _turns() == 4


def test_the_consumers_own_thread_never_hands_over_to_itself() -> None:
    turns = Turns("backpressure.test_turns")
    turns.consumer_started()
    turns.hand_over()
    turns.hand_over()
    assert _turns() == 0


def test_app_threads_hand_over_to_a_registered_consumer_only_once_it_is_due() -> None:
    hand_overs = HandOvers()
    turns = Turns("backpressure.test_turns")
    ran: list[str] = []
    registered, release = threading.Event(), threading.Event()

    def consumer() -> None:
        turns.consumer_started()
        turns.take_hand_overs_from(hand_overs)
        registered.set()
        while not release.is_set():
            if not turns._ran.is_set():  # handed over: the producer let go of the GIL for us
                ran.append("turn")
                turns.taken()
            time.sleep(0.001)
        turns.stop_taking_hand_overs()

    thread = threading.Thread(target=consumer)
    thread.start()
    assert registered.wait(10)
    try:
        turns.due = time.monotonic() + 3600  # waits for work for another hour: not due
        hand_overs()
        assert turns._ran.is_set()  # no turn is owed
        assert ran == []
        turns.due = 0.0  # waiting for the GIL now
        hand_overs()
        # A turn is owed, and the consumer takes it: during the hand-over's wait, or, on a host too busy
        # to run it within TURN_TIMEOUT_S, as soon as the OS does (the wait is then counted).
        deadline = time.monotonic() + 10
        while ran != ["turn"] and time.monotonic() < deadline:
            time.sleep(0.001)
        assert ran == ["turn"]
        assert _turns() <= 1
    finally:
        release.set()
        thread.join(10)
    turns.due = 0.0
    hand_overs()  # it stopped taking hand-overs: nobody is waited for
    assert ran == ["turn"]
    assert _turns() == 0


def test_after_fork_a_consumer_takes_no_hand_overs_until_it_starts_again() -> None:
    hand_overs = HandOvers()
    turns = Turns("backpressure.test_turns")
    turns.take_hand_overs_from(hand_overs)
    turns.due = 0.0
    turns.reset_after_fork()  # the child has no consumer thread
    hand_overs()
    assert _turns() == 0


def test_a_consumer_gone_back_to_waiting_for_work_before_its_hand_over_is_not_waited_for() -> None:
    # As when the consumer runs between an app thread's look at `due` and its hand-over: it set `due`
    # to the end of its wait, answered (nothing) and went to sleep; waiting for it would take 10 ms.
    turns = Turns("backpressure.test_turns")
    turns.due = time.monotonic() + 3600
    turns.hand_over(while_due=True)
    assert _turns() == 0
    turns.due = 0.0  # due, and nobody answers: the turn was not left given by the one above
    turns.hand_over(while_due=True)
    assert _turns() == 1


def test_hand_overs_are_a_link_of_one_instrumentation_not_of_the_process() -> None:
    """Two instrumentations' writers are handed the GIL by their own chain's head only."""
    ours, theirs = HandOvers(), HandOvers()
    turns = Turns("backpressure.test_turns")
    turns.take_hand_overs_from(theirs)
    turns.due = 0.0
    ours()  # nobody took hand-overs from this link: nobody is waited for
    assert _turns() == 0
    theirs()  # nobody runs the consumer: waited for, timed out, counted
    assert _turns() == 1
    turns.taken()
    turns.take_hand_overs_from(ours)  # moving to another link leaves the first
    theirs()
    assert _turns() == 1
