"""Turns: a producer lets go of the GIL until our consumer thread runs; while a turn is not taken, again
each time the backlog grew by its size at the first turn not taken; never on the consumer's own thread."""

from __future__ import annotations

import threading

import tallyspan
from tallyspan.plugin import Turns


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
