"""Backpressure between a thread that hands work over and the thread of ours that does it, under the GIL.

CPython makes a thread that waits for the GIL wait a whole switch interval (5 ms) before it asks the
running thread to let go, and every short release by the running thread (a socket call, ``os.urandom``,
a lock, an SQLite call) starts that wait again. So a thread of ours that only waits for the GIL can
starve for seconds behind a busy thread, and its queue grows (measured: the chain's worker handled none
of 3,000 spans while a mock-transport OpenAI loop ran; the store's writer queue reached its 16,384).

The fix is for the producer to let go of the GIL until the consumer runs, once the consumer is behind;
the consumer then keeps the GIL for a switch interval, enough for dozens of items::

    turns = Turns("backpressure.worker_turns")
    # producer, after queueing:   if queued >= limit: turns.give(queued)
    # consumer, once per item:    turns.taken()
    #   (a consumer whose item lets go of the GIL itself, as an SQLite write does at every statement,
    #   answers after each such step: a busy producer takes the GIL back at each one)

A consumer that waits for more items between batches (the chain's worker, for its batch delay) is also
due to run at a known time; from then on it waits for the GIL like a starved one, and each of the
producer's short releases wakes it to lose the race again (measured: 0.7-0.9 futile wake-ups of the
worker per app call). So the producer's next item hands the GIL over (``hand_over``): one wait, not
counted unless the consumer does not run within ``TURN_TIMEOUT_S``, and while the last turn is not
taken, none until the backlog doubled (a consumer whose batch outlasts the wait loses the GIL mid-batch,
and starves again unless handed it again). The consumer answers a turn once it has worked for
``TURN_SLICE_S`` or ran out of items::

    # producer, after queueing:   if now >= consumer_due: turns.hand_over(queued)
    # consumer:                   turns.taken() when its queue is empty, and every TURN_SLICE_S

``give`` waits at most ``TURN_TIMEOUT_S``. While a turn is not taken (the consumer is stuck, or another
thread took the GIL the producer let go of, or the OS did not run the consumer in time) it waits again
each time the backlog has grown by as much as it was at the first turn not taken: with turns from a
sixteenth of the queue, a stuck consumer costs the producer at most 16 waits before the queue is full,
not one per item, and a consumer that missed its turn gets another soon. (Waiting again only once the
backlog doubled gave a starved consumer five chances before its queue was full, and the worker dropped
780-9,933 of 20,000 spans in 4 of 10 runs with OTLP export on; with a wait per step, none in 10.) The
consumer's own thread never waits for itself. Each wait is counted under the key given.

A consumer whose producer is another thread of ours (the store's writer, fed by the worker) starves the
same way behind the app, but no app thread hands items to it. ``instrument()`` links the two: one
``HandOvers`` per instrumentation (``Settings.hand_overs``), which the writer joins
(``take_hand_overs_from``) and which the chain's head calls on the app's thread at each span it ends;
the consumer keeps ``due`` up to date::

    # consumer:       turns.take_hand_overs_from(hand_overs) when it starts; turns.due = when its wait
    #                 ends (0 while it works), turns.taken() on getting the GIL and before each wait
    # app thread:     hand_overs(), at each span
"""

from __future__ import annotations

import math
import threading
import time
from typing import Final

from tallyspan._selfstats import count

__all__ = [
    "TURN_AT_QUEUE_FRACTION",
    "TURN_SLICE_S",
    "TURN_TIMEOUT_S",
    "HandOvers",
    "Turns",
    "turn_threshold",
]

TURN_TIMEOUT_S: Final = 0.01
"""How long a producer waits at most for the consumer to take its turn."""
TURN_SLICE_S: Final = 0.005
"""How long a consumer works through a turn before the producer that gave it may go on: the producer
then takes the GIL back after CPython's switch interval (also 5 ms), so a turn lasts twice as long."""
TURN_AT_QUEUE_FRACTION: Final = 16
"""The share of a queue from which its producer gives the consumer turns: the worker's 8,192 then holds
about 512 spans (a few MB of content) behind a busy app, instead of filling up and dropping."""


def turn_threshold(capacity: int) -> int:
    """The backlog of a queue of ``capacity`` items from which its producer gives turns."""
    return max(1, capacity // TURN_AT_QUEUE_FRACTION)


class Turns:
    """Turns a producer gives one consumer thread (see the module docstring).

    Args:
        key: the counter of ``tallyspan.stats()`` each wait is counted under.
    """

    __slots__ = ("_consumer", "_handed_over", "_key", "_link", "_ran", "_step", "_unanswered_at", "due")

    def __init__(self, key: str) -> None:
        self._key = key
        self.due = math.inf
        """For a consumer fed by another of our threads (:meth:`take_hand_overs_from`): the time
        from which it waits for the GIL (infinite while it waits for work); the consumer sets it."""
        self._ran = threading.Event()
        self._ran.set()  # no turn is owed yet
        self._consumer: int | None = None
        self._unanswered_at = 0  # the backlog when the last turn was given
        self._step = 0  # the backlog when the first of the turns not taken since was given
        self._handed_over = False  # the turn not taken yet (if any) was a hand-over, not backpressure
        self._link: HandOvers | None = None  # the app threads' hand-overs this consumer takes

    def consumer_started(self) -> None:
        """Called on the consumer's thread when it starts: that thread never waits for itself."""
        self._consumer = threading.get_ident()

    def give(self, queued: int) -> None:
        """On the producer's thread, with ``queued`` items waiting: let go of the GIL until the consumer
        runs, at most ``TURN_TIMEOUT_S``; nothing if the last turn is not taken yet and the backlog has
        not grown by another step (the backlog at the first turn not taken) since."""
        ran = self._ran
        if threading.get_ident() == self._consumer:
            return
        if ran.is_set() or self._handed_over:
            self._step = queued  # a new series of turns: the next unanswered one after as many more
            self._handed_over = False
        elif queued < self._unanswered_at + self._step:
            return
        ran.clear()
        self._unanswered_at = queued
        count(self._key)
        ran.wait(TURN_TIMEOUT_S)

    def hand_over(self, queued: int = 0, *, while_due: bool = False) -> None:
        """On the producer's thread, with ``queued`` items waiting, when the consumer is due to run (its
        wait for more items is over): let go of the GIL until it does, at most ``TURN_TIMEOUT_S``. Not
        counted unless it times out: it is the consumer's regular turn, handed over at once rather than
        fought for (see the module docstring), not a sign that it fell behind.

        While a turn given before is not taken, nothing, until the backlog has doubled since that turn
        (a ``queued`` of 0, as app threads pass for a consumer whose queue they do not see: never). A
        consumer that is stuck costs the producer a few waits before backpressure takes over, not one
        per item; one that got the GIL but worked past the timeout (a batch of slow checks) and lost it
        again, mid-batch, is handed it again instead of starving behind the app until its queue forces
        turns (measured on 3.10: the worker's backlog reached 511 in every run, and the app waited for
        it 29 times; with a new hand-over at each doubling, the backlog stayed near a batch delay's).

        ``while_due`` (app threads handing over to a consumer of :meth:`take_hand_overs_from`): look
        at ``due`` again once the turn is given. The consumer sets ``due`` before it answers (``taken``)
        and waits, so this tells a consumer that will answer from one that went back to waiting for
        work since the app's first look, which is not waited for (nor counted)."""
        ran = self._ran
        if threading.get_ident() == self._consumer:
            return
        if not ran.is_set() and (not queued or queued < 2 * self._unanswered_at):
            return
        ran.clear()
        if while_due and time.monotonic() < self.due:
            ran.set()
            return
        self._handed_over = True
        self._unanswered_at = max(queued, 1)
        if not ran.wait(TURN_TIMEOUT_S):
            count(self._key)

    def take_hand_overs_from(self, hand_overs: HandOvers) -> None:
        """On the consumer's thread, when it starts: app threads hand it the GIL once it is due (each
        span they end calls ``hand_overs``), until :meth:`stop_taking_hand_overs`.

        For a consumer whose producer is not the app's thread (the store's writer, fed by the worker):
        once its wait is over it waits for the GIL behind the app like the worker would, woken at each
        of the app's short releases to lose the race again (measured: half a futile wake-up of the
        writer per app call, and about 35 us more per call on the app's thread than without it)."""
        self.stop_taking_hand_overs()
        self._link = hand_overs
        hand_overs.add(self)

    def stop_taking_hand_overs(self) -> None:
        """On the consumer's thread, when it stops."""
        link, self._link = self._link, None
        if link is not None:
            link.remove(self)

    def taken(self) -> None:
        """On the consumer's thread, once it runs: the producer waiting for it may go on."""
        if not self._ran.is_set():
            self._ran.set()

    def reset_after_fork(self) -> None:
        """A forked child has no consumer thread yet and owes no turn."""
        self._ran = threading.Event()
        self._ran.set()
        self._consumer = None
        self._unanswered_at = 0
        self._handed_over = False
        self.due = math.inf
        self.stop_taking_hand_overs()


class HandOvers:
    """The consumers that app threads hand the GIL to once they are due (usually one: the store's writer),
    linked to the chain's head by ``instrument()`` through ``Settings.hand_overs``. Calling it, on an app
    thread at each span it ends, hands the GIL to each consumer that is due."""

    __slots__ = ("consumers",)

    def __init__(self) -> None:
        self.consumers: tuple[Turns, ...] = ()
        """Replaced whole, never changed in place: app threads read it without a lock. A caller that
        already read the clock may go through it itself (``hand_over(while_due=True)`` to each that is
        due), as the chain's head does, rather than call this."""

    def add(self, turns: Turns) -> None:
        if turns not in self.consumers:
            self.consumers = (*self.consumers, turns)

    def remove(self, turns: Turns) -> None:
        self.consumers = tuple(consumer for consumer in self.consumers if consumer is not turns)

    def __call__(self) -> None:
        consumers = self.consumers
        if consumers:
            now = time.monotonic()
            for turns in consumers:
                if now >= turns.due:
                    turns.hand_over(while_due=True)
