"""Turns: a producer lets go of the GIL until our consumer thread runs; once per turn, never for itself."""

from __future__ import annotations

import threading

import tallyspan
from tallyspan.plugin import Turns


def test_a_turn_is_counted_and_no_second_one_is_given_until_the_consumer_took_it() -> None:
    turns = Turns("backpressure.test_turns")
    turns.give()  # no consumer runs: waits its timeout once
    assert tallyspan.stats() == {"backpressure.test_turns": 1}
    turns.give()
    turns.give()
    assert tallyspan.stats() == {"backpressure.test_turns": 1}
    turns.taken()
    turns.give()
    assert tallyspan.stats() == {"backpressure.test_turns": 2}


def test_the_consumers_own_thread_never_waits_for_itself() -> None:
    turns = Turns("backpressure.test_turns")
    turns.consumer_started()
    turns.give()
    assert "backpressure.test_turns" not in tallyspan.stats()
    other = threading.Thread(target=turns.give)
    other.start()
    other.join(10)
    assert tallyspan.stats() == {"backpressure.test_turns": 1}


def test_after_fork_no_turn_is_owed_and_no_thread_is_the_consumer() -> None:
    turns = Turns("backpressure.test_turns")
    turns.consumer_started()
    other = threading.Thread(target=turns.give)
    other.start()
    other.join(10)  # a turn given and never taken
    turns.reset_after_fork()
    turns.give()  # this thread is not the consumer any more, and the old turn is forgotten
    assert tallyspan.stats() == {"backpressure.test_turns": 2}
