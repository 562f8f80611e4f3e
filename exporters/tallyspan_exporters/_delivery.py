"""Delivery to an OTLP backend that may be slow, down, or hostile: the spool, retries, and every loss counted.

Usage::

    outbox = Outbox(exporter, signal="traces", codec=SPAN_CODEC, spool=spool, settings=export_settings,
                    budget=settings.shutdown_budget, attempts=observer)
    outbox.submit(span, durable=True)     # a span with a verdict: spooled before it is sent
    outbox.submit(span, durable=False)    # a clean span: kept in memory, dropped (counted) under pressure
    outbox.force_flush(5000)              # True once all submitted before is accepted by the backend

Two threads of its own, so neither the app nor the chain's worker ever waits on the backend or the disk:

- **intake** writes each durable record (a ledger record, a span with a verdict) to the spool as soon
  as it is submitted, before any export is tried, and puts clean spans in a bounded memory queue;
- **sender** exports, through the OpenTelemetry exporter it wraps, the oldest spooled records first
  (this process's, then what a dead or finished process left), then the memory queue; a record leaves
  the spool only when the backend accepted it. A failure (refused, timed out, 5xx, 429) is counted by
  cause (``errors.otlp.<signal>.<cause>``) and retried after a wait that doubles up to
  ``retry_max_s``, or the backend's ``Retry-After``. A batch the backend rejects as malformed (400) or
  too large (413) is split until the record at fault is alone, which is dropped and counted.

Losses are counted in ``tallyspan.stats()`` under ``dropped.otlp.<signal>.<cause>``: ``queue_full``
(clean spans beyond ``queue_size``, oldest first), ``rejected`` (the backend refused a record for
good), ``unspooled`` (a durable record the spool could not take and memory could not keep),
``shutdown`` (memory records not delivered within the shutdown budget), ``undecodable`` (a spooled record
this version cannot read), and the spool's ``spool_full`` / ``spool_expired``.

A spool that fails (a full disk, an I/O error: ``Spool`` leaves it alone for ``RETRY_S`` after each
failure) does not stop delivery: durable records the intake cannot write wait in memory with the clean
ones (bounded by ``queue_size``, beyond it ``unspooled``), and the sender sends memory while it cannot
claim; what the spool already holds waits there, durable, until it works again. A batch the backend
accepted whose rows the spool cannot delete is remembered: nothing is claimed until those rows are
deleted, so they are not sent twice by this process.

Records are sent at least once; the receiver tells a repeat by its id (a span's span id, a ledger
record's ``tallyspan.ledger.record_id``). A repeat only happens when the process ends between the
backend's acceptance and the spool's delete (or with a disk still too full to delete at exit).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

from tallyspan.plugin import ShutdownBudget, after_fork_in_child, count, start_thread, swallowed
from tallyspan.plugin.exporters import ExportSettings
from tallyspan_exporters._spool import LEASE_S, Spool, SpooledRow

__all__ = ["Attempt", "AttemptObserver", "Codec", "Outbox", "RetryHeldError"]

_logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BATCH: Final = 512
"""Records per export at most (the OpenTelemetry batch processors' default)."""
SCHEDULE_DELAY_S: Final = 0.2
"""How long the sender gathers a batch when records trickle in (one request for many records)."""
INTAKE_GATHER_S: Final = 0.02
"""How long the intake gathers records before it writes them to the spool (one transaction for many);
the most a durable record waits in memory before it is on disk."""
FIRST_RETRY_S: Final = 0.5
"""The first wait after a failed export; it doubles with each failure in a row, up to ``retry_max_s``."""
RETRY_AFTER_CAP_S: Final = 600.0
"""The longest ``Retry-After`` honoured."""
_RENEW_S: Final = LEASE_S / 3
_ORPHAN_SCAN_S: Final = 10.0
"""How often an idle sender looks for records another process left in the spool."""
_MESSAGE_CHARS: Final = 300
"""How much of a backend's partial-success message is logged."""
_PERMANENT: Final = frozenset({"http_400", "http_413", "unsent"})
"""Causes that another try of the same batch cannot fix: split it, drop the record at fault alone."""


@dataclass
class Attempt:
    """What the last export's requests met: a cause for the counters and the backend's ``Retry-After``."""

    cause: str | None = None
    """``http_<status>``, ``timeout``, ``connection``; None when no request was made."""
    retry_after_s: float | None = None
    rejected: int = 0
    """Records the backend said it rejected in an answer that accepted the request (OTLP partial
    success: ``rejected_spans`` / ``rejected_log_records``)."""
    message: str = ""
    """The backend's ``partial_success.error_message``, when it gave one."""


class RetryHeldError(Exception):
    """Raised by an observer instead of sending a request the backend asked to wait for: an exporter's own
    retry within one export, sooner than the ``Retry-After`` of its last answer (OpenTelemetry's HTTP
    exporters before the shared OTLP client retry on their own backoff whatever the header says). The
    export has failed with the attempt already observed; the outbox waits as the backend asked."""


class AttemptObserver(Protocol):
    """Sees the requests an exporter makes (``_otlp`` installs one in its HTTP session)."""

    def reset(self) -> None: ...

    def last(self) -> Attempt: ...


@dataclass(frozen=True)
class Codec(Generic[T]):
    """How records of one signal are spooled and told apart."""

    encode: Callable[[T], str]
    decode: Callable[[str], T]
    record_id: Callable[[T], str]


class _Exporter(Protocol):
    def export(self, batch: Sequence[Any], /) -> Any: ...

    def shutdown(self) -> Any: ...


@dataclass
class _Item(Generic[T]):
    ticket: int
    record: T
    durable: bool


@dataclass
class _Row(Generic[T]):
    seq: int
    record: T


@dataclass
class _Entry(Generic[T]):
    """One record of a batch: from the spool (``seq``) or from memory (``seq`` 0)."""

    ticket: int
    """The order it was submitted in this process; 0 for what another process left."""
    record: T
    seq: int


def _ticket(entry: _Item[Any] | _Entry[Any]) -> int:
    return entry.ticket


_TICKET: Final = _ticket


class _Flush:
    __slots__ = ("done", "result", "ticket")

    def __init__(self, ticket: int) -> None:
        self.ticket = ticket
        self.done = threading.Event()
        self.result = False


class Outbox(Generic[T]):
    """Deliver the records of one signal through ``exporter``, spooling the durable ones.

    Args:
        exporter: an OpenTelemetry span or log record exporter (its ``export`` takes a batch).
        signal: ``traces`` or ``logs``, for the counters and the spool.
        codec: how a record is written to the spool and read back.
        spool: where durable records wait; None keeps them in memory (bounded like clean ones).
        settings: the retry limit and the memory queue size.
        budget: the shutdown budget of the instrumentation this outbox belongs to.
        attempts: sees the exporter's requests, for the failure cause and ``Retry-After``.
    """

    def __init__(
        self,
        exporter: _Exporter,
        *,
        signal: str,
        codec: Codec[T],
        spool: Spool | None,
        settings: ExportSettings,
        budget: ShutdownBudget,
        attempts: AttemptObserver | None = None,
    ) -> None:
        self._exporter = exporter
        self._signal = signal
        self._codec = codec
        self._spool = spool
        self._retry_max_s = max(0.01, settings.retry_max_s)
        self._queue_size = max(1, settings.queue_size)
        self._budget = budget
        self._attempts = attempts
        self._condition = threading.Condition()
        self._reset_state()
        self._stopping = False
        self._closed = False
        after_fork_in_child(self, Outbox._after_fork)
        if spool is not None:
            with self._condition:
                self._ensure_threads()  # records an earlier process left are sent without waiting for new ones

    def _reset_state(self) -> None:
        self._incoming: list[_Item[T]] = []
        self._durable: deque[_Item[T]] = deque()  # durable records the spool could not take
        self._clean: deque[_Item[T]] = deque()
        self._spooled: dict[int, int] = {}  # seq -> ticket of the rows this process spooled
        self._unsettled: list[int] = []  # seqs the backend accepted that the spool could not delete yet
        self._outstanding: set[int] = set()
        self._next_ticket = 1
        self._flushes: list[_Flush] = []
        self._in_flight: set[int] = set()  # tickets of the memory records being exported now
        self._losses = 0
        self._losses_at_flush = 0
        self._failures = 0
        self._next_attempt = 0.0
        self._gather_until = 0.0
        self._retry_after_until = 0.0
        self._batch_limit = MAX_BATCH
        self._failed_while_stopping = False
        self._partial_logged = False
        self._look_for_orphans = self._spool is not None
        self._next_orphan_scan = 0.0
        self._next_renew = time.monotonic() + _RENEW_S
        self._intake: threading.Thread | None = None
        self._sender: threading.Thread | None = None
        self._pid = os.getpid()

    # --- the caller's side ------------------------------------------------------------------------------

    def submit(self, record: T, *, durable: bool) -> None:
        """Queue ``record`` for delivery; never blocks. After shutdown it is dropped and counted."""
        with self._condition:
            if self._stopping:
                self._lose(1, "after_shutdown")
                return
            self._ensure_threads()
            ticket = self._next_ticket
            self._next_ticket += 1
            self._outstanding.add(ticket)
            self._incoming.append(_Item(ticket, record, durable))
            if len(self._incoming) == 1:
                self._condition.notify_all()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Try to deliver everything submitted before now; True when the backend accepted all of it and
        nothing was lost since the last flush answered. Fails fast: the first failed export answers
        False (the records stay spooled or queued and are retried), as does a backend that asked us to
        wait (``Retry-After``)."""
        deadline = time.monotonic() + max(0, timeout_millis) / 1000
        with self._condition:
            ticket = self._next_ticket - 1
            if not any(t <= ticket for t in self._outstanding):
                return self._answer_flush()
            if self._stopping or time.monotonic() < self._retry_after_until:
                return False
            threaded = self._ensure_threads()
            if not threaded:
                request = None
            else:
                request = _Flush(ticket)
                self._flushes.append(request)
                self._condition.notify_all()
        if request is None:
            delivered = self._deliver_here(deadline)
            with self._condition:
                return self._answer_flush() and delivered
        done = request.done.wait(max(0.0, deadline - time.monotonic()))
        with self._condition:
            if not done and request in self._flushes:
                self._flushes.remove(request)
        return done and request.result

    def shutdown(self) -> None:
        """Spool what is queued, try to deliver within the shutdown budget, then stop.

        What the spool holds stays there for the next start; what only memory held is counted as
        ``dropped.otlp.<signal>.shutdown``. The exporter is shut down (which ends its own retries).
        """
        with self._condition:
            if self._stopping:
                return
            self._stopping = True
            self._condition.notify_all()
            intake, sender = self._intake, self._sender
        deadline = self._budget.start()
        if intake is None and sender is None:
            self._deliver_here(deadline)  # no thread was ever started for them (at exit, from 3.12)
        if intake is not None:
            # Writing the last records to the local spool gets the local disk's grace past the budget.
            intake.join(self._budget.local_remaining())
        if sender is not None:
            sender.join(max(0.0, deadline - time.monotonic()))
        with self._condition:
            unsettled, self._unsettled = self._unsettled, []
        if unsettled and self._spool is not None:
            # Accepted while the spool could not delete them: one last try, or the next start sends them again.
            self._spool.delete(unsettled, now=True)
        with self._condition:
            self._closed = True
            left = len(self._incoming) + len(self._durable) + len(self._clean)
            self._incoming.clear()
            self._durable.clear()
            self._clean.clear()
            self._lose(left, "shutdown")
            for request in self._flushes:
                request.done.set()
            self._flushes.clear()
        try:
            self._exporter.shutdown()
        except Exception:  # a broken exporter must not keep the app from exiting
            swallowed(
                _logger,
                f"otlp.{self._signal}.shutdown",
                f"the OTLP {self._signal} exporter failed to shut down",
            )
        if self._spool is not None:
            self._spool.release()
            self._spool.close()

    # --- bookkeeping (under the condition) --------------------------------------------------------------

    def _lose(self, number: int, cause: str) -> None:
        if number > 0:
            self._losses += number
            count(f"dropped.otlp.{self._signal}.{cause}", number)

    def _resolve(self, tickets: Sequence[int]) -> None:
        self._outstanding.difference_update(tickets)
        if self._flushes:
            waiting = min(self._outstanding, default=None)
            for request in list(self._flushes):
                if waiting is None or waiting > request.ticket:
                    request.result = self._answer_flush()
                    request.done.set()
                    self._flushes.remove(request)

    def _answer_flush(self) -> bool:
        clean = self._losses == self._losses_at_flush
        self._losses_at_flush = self._losses
        return clean

    def _fail_flushes(self) -> None:
        for request in self._flushes:
            request.result = False
            request.done.set()
        self._flushes.clear()

    def _ensure_threads(self) -> bool:
        """Start the intake and the sender unless they run; False where the interpreter refuses a thread
        (at exit, from Python 3.12): ``shutdown`` and ``force_flush`` then do their work themselves."""
        if self._pid != os.getpid():
            return True  # _after_fork has not run yet in this child
        if self._intake is None or not self._intake.is_alive():
            intake = threading.Thread(
                target=self._run_intake, name=f"tallyspan-otlp-{self._signal}-intake", daemon=True
            )
            if not start_thread(intake):
                return False
            self._intake = intake
        if self._sender is None or not self._sender.is_alive():
            sender = threading.Thread(
                target=self._run_sender, name=f"tallyspan-otlp-{self._signal}", daemon=True
            )
            if not start_thread(sender):
                return False
            self._sender = sender
        return True

    def _deliver_here(self, deadline: float) -> bool:
        """The intake's and the sender's work on the calling thread, until ``deadline``, the first failure
        or nothing left: no thread could be started for it. True when nothing of ours is left."""
        with self._condition:
            items, self._incoming = self._incoming, []
        if items:
            self._take_in(items)
        while time.monotonic() < deadline:
            with self._condition:
                failures = self._failures
                now = time.monotonic()
                if not (self._pending() and self._sendable(now)) or now < self._retry_after_until:
                    break
            self._send_one_batch()
            with self._condition:
                if self._failures != failures:
                    break
        with self._condition:
            return not self._pending() and not self._incoming

    def _after_fork(self) -> None:
        # Our threads did not survive fork(): the child starts with empty queues and threads of its own
        # on its first record; what the parent held is the parent's to deliver.
        self._condition = threading.Condition()
        self._reset_state()

    # --- intake: durable records to the spool at once ---------------------------------------------------

    def _run_intake(self) -> None:
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            while True:
                with self._condition:
                    while not self._incoming and not self._stopping:
                        self._condition.wait()
                    if len(self._incoming) < MAX_BATCH and not (self._stopping or self._flushes):
                        # A moment to gather what trickles in: one transaction for many records.
                        self._condition.wait(INTAKE_GATHER_S)
                    items, self._incoming = self._incoming, []
                    stopping = self._stopping
                try:
                    self._take_in(items)
                except BaseException:  # even sys.exit() from a bug: the records are still counted below
                    swallowed(_logger, f"otlp.{self._signal}.intake", "the OTLP intake thread failed")
                    with self._condition:
                        self._lose(len(items), "unspooled")
                        self._resolve([item.ticket for item in items])
                if stopping:
                    return
        finally:
            detach(token)

    def _take_in(self, items: list[_Item[T]]) -> None:
        durable = [item for item in items if item.durable]
        seqs: list[int] | None = None
        if durable and self._spool is not None:
            encoded = []
            for item in durable:
                try:
                    encoded.append((self._codec.record_id(item.record), self._codec.encode(item.record)))
                except Exception:  # a record we cannot write down is still sent from memory
                    swallowed(_logger, f"otlp.{self._signal}.encode", "could not write a record to the spool")
                    encoded.append(("", ""))
            seqs = self._spool.append(self._signal, [pair for pair in encoded if pair[1]])
        with self._condition:
            if not self._pending():
                self._gather_until = time.monotonic() + SCHEDULE_DELAY_S
            if seqs is not None:
                written = iter(seqs)
                for item, (_, body) in zip(durable, encoded, strict=True):
                    seq = next(written) if body else -1
                    if seq > 0:
                        self._spooled[seq] = item.ticket
                    elif seq == 0:
                        # Larger than the whole spool: lost. The spool counted it (``spool_full``); it is
                        # a loss the next flush must answer False for, like every other.
                        self._losses += 1
                        self._resolve([item.ticket])
                    else:
                        self._durable.append(item)
            else:
                self._durable.extend(durable)
            self._clean.extend(item for item in items if not item.durable)
            self._bound_memory()
            self._condition.notify_all()

    def _bound_memory(self) -> None:
        """Drop the oldest records beyond the queue size: clean ones first, never one being sent."""
        excess = len(self._clean) + len(self._durable) - self._queue_size
        if excess <= 0:
            return
        dropped: list[int] = []
        for queue, cause in ((self._clean, "queue_full"), (self._durable, "unspooled")):
            kept: deque[_Item[T]] = deque()
            for item in queue:
                if len(dropped) < excess and item.ticket not in self._in_flight:
                    dropped.append(item.ticket)
                    self._lose(1, cause)
                else:
                    kept.append(item)
            queue.clear()
            queue.extend(kept)
        if dropped:
            self._resolve(dropped)

    # --- sender: export, retry, forget only what was accepted ------------------------------------------

    def _run_sender(self) -> None:
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            while self._wait_for_work():
                try:
                    self._send_one_batch()
                except BaseException:  # even sys.exit() from a bug: the sender must outlive it
                    swallowed(_logger, f"otlp.{self._signal}.sender", "the OTLP sender thread failed")
                    with self._condition:
                        self._note_failure("exception", None)
        finally:
            detach(token)

    def _pending(self) -> int:
        return len(self._spooled) + len(self._durable) + len(self._clean)

    def _sendable(self, now: float) -> bool:
        """True when a batch could go now: memory holds records, or the spool works and holds some."""
        if self._durable or self._clean:
            return True
        if self._spool is None or not (self._spooled or self._look_for_orphans or self._unsettled):
            return False
        return now >= self._spool.available()

    def _wait_for_work(self) -> bool:
        """Wait until a batch should be tried; False when the sender should stop.

        While shutting down it tries without waiting between batches, and stops at the first failure,
        when the budget runs out, or when everything of this process is delivered.
        """
        while True:
            renew = False
            with self._condition:
                now = time.monotonic()
                if self._stopping:
                    self._look_for_orphans = False  # only our own records are worth the budget
                    if now >= self._budget.start() or self._failed_while_stopping:
                        return False
                    if self._sendable(now):
                        return now >= self._retry_after_until
                    if self._intake is None or not self._intake.is_alive():
                        return False
                    self._condition.wait(0.05)  # the intake is still spooling the last records
                    continue
                if self._spool is not None and not self._look_for_orphans and now >= self._next_orphan_scan:
                    self._look_for_orphans = True
                timeout: float | None = None
                if self._sendable(now):
                    forced = bool(self._flushes) and now >= self._retry_after_until
                    gathering = now < self._gather_until and 0 < self._pending() < self._batch_limit
                    if forced or (now >= self._next_attempt and not gathering):
                        return True
                    timeout = max(self._next_attempt, self._gather_until if gathering else 0.0) - now
                    if self._spool is not None and now >= self._next_renew:
                        self._next_renew = now + _RENEW_S
                        renew = True
                    else:
                        timeout = min(timeout, max(0.0, self._next_renew - now))
                elif self._spool is not None and (
                    self._pending() or self._look_for_orphans or self._unsettled
                ):
                    # The spool failed a moment ago and memory is empty: wait for the spool's next try, and
                    # a flush waiting for spooled records answers False now rather than at its timeout.
                    self._fail_flushes()
                    timeout = max(0.0, self._spool.available() - now)
                elif self._spool is not None:
                    timeout = max(0.0, self._next_orphan_scan - now)
                if not renew:
                    self._condition.wait(timeout)
            if renew and self._spool is not None:
                self._spool.renew()

    def _send_one_batch(self) -> None:
        """Export the oldest records: spooled ones (this process's and orphans) merged with the memory
        queue in the order they were submitted, so a healthy backend sees them as they came."""
        with self._condition:
            limit = self._batch_limit
            unsettled, self._unsettled = self._unsettled, []
            from_spool = self._spool is not None and (bool(self._spooled) or self._look_for_orphans)
        if unsettled and self._spool is not None and not self._spool.delete(unsettled):
            # Accepted rows the spool still cannot delete: claiming now would send them again.
            with self._condition:
                self._unsettled = unsettled + self._unsettled
            from_spool = False
        rows: list[_Row[T]] = []
        claimed_count = 0
        if from_spool and self._spool is not None:
            claimed = self._spool.claim(self._signal, limit)
            if claimed is None:
                # The spool fails (a full disk?): what it holds waits there, memory is sent meanwhile.
                from_spool = False
            else:
                claimed_count = len(claimed)
                rows = self._readable(claimed)
        batch: list[_Entry[T]] = []
        with self._condition:
            if from_spool and claimed_count < limit:
                self._look_for_orphans = False
                self._next_orphan_scan = time.monotonic() + _ORPHAN_SCAN_S
            if from_spool and claimed_count == 0 and self._spooled:
                # Our rows are gone: another process evicted them for the limits (it counted them).
                self._losses += len(self._spooled)
                tickets = list(self._spooled.values())
                self._spooled.clear()
                self._resolve(tickets)
            batch = [_Entry(self._spooled.get(row.seq, 0), row.record, row.seq) for row in rows]
            # Memory records submitted before the newest spooled one go with it; all of them when the
            # spool had no more than this batch.
            newest = max((entry.ticket for entry in batch), default=0)
            spool_drained = claimed_count < limit
            for item in sorted((*self._durable, *self._clean), key=_TICKET):
                if len(batch) >= limit or not (spool_drained or item.ticket < newest):
                    break
                batch.append(_Entry(item.ticket, item.record, 0))
            self._in_flight = {entry.ticket for entry in batch if not entry.seq}
            verdicts = any(entry.seq for entry in batch) or any(
                item.ticket in self._in_flight for item in self._durable
            )
        if not batch:
            return
        batch.sort(key=_TICKET)
        seqs = [entry.seq for entry in batch if entry.seq]
        outcome, rejected = "failed", 0
        try:
            outcome, rejected = self._export([entry.record for entry in batch])
            if outcome == "partial" and verdicts and rejected < len(batch):
                # The backend accepted the request but rejected some of its records for good, without
                # saying which: like a 400, the batch is sent again in halves until the records at
                # fault are alone (the others arrive again, with their ids), so a record with a verdict
                # leaves the spool only once it is accepted or found to be one of the rejected.
                outcome = "rejected"
                with self._condition:
                    self._batch_limit = max(1, len(batch) // 2)
        finally:
            if outcome == "failed" or (outcome == "rejected" and len(batch) > 1):
                with self._condition:
                    self._in_flight = set()  # retried later (a rejected batch in smaller pieces)
                if seqs and self._spool is not None:
                    self._spool.unclaim(seqs)  # not being sent now: the size limit may evict them again
        if outcome == "failed" or (outcome == "rejected" and len(batch) > 1):
            return
        deleted = not seqs or self._spool is None or self._spool.delete(seqs)
        with self._condition:
            self._in_flight = set()
            if not deleted:
                # Delivered, but still spooled: deleted before the next claim, which would send them again.
                self._unsettled.extend(seqs)
            if outcome == "rejected":
                self._lose(1, "rejected")
            elif outcome == "partial":
                self._lose(min(rejected, len(batch)), "partial_rejected")
            delivered = {entry.ticket for entry in batch if not entry.seq}
            if delivered:
                # The intake may have dropped some of them meanwhile (a full queue): take what is left.
                self._durable = deque(item for item in self._durable if item.ticket not in delivered)
                self._clean = deque(item for item in self._clean if item.ticket not in delivered)
            tickets = [self._spooled.pop(seq, 0) for seq in seqs]
            self._resolve([ticket for ticket in (*tickets, *delivered) if ticket])

    def _readable(self, rows: list[SpooledRow]) -> list[_Row[T]]:
        """The claimed rows decoded; one that cannot be read is deleted and counted (it never can be)."""
        readable: list[_Row[T]] = []
        unreadable: list[int] = []
        for row in rows:
            try:
                readable.append(_Row(row.seq, self._codec.decode(row.body)))
            except Exception:  # written by another version, or damaged: it can never be sent
                swallowed(_logger, f"otlp.{self._signal}.decode", "a spooled record could not be read")
                unreadable.append(row.seq)
        if unreadable and self._spool is not None and self._spool.delete(unreadable):
            with self._condition:
                self._lose(len(unreadable), "undecodable")
                self._resolve([ticket for seq in unreadable if (ticket := self._spooled.pop(seq, 0))])
        return readable

    def _export(self, records: Sequence[T]) -> tuple[str, int]:
        """Export one batch: ``accepted``, ``partial`` (accepted, but the backend rejected the number of
        records given, without saying which), ``rejected`` (for good: split it), or ``failed`` (retry
        later)."""
        if self._attempts is not None:
            self._attempts.reset()
        try:
            result = self._exporter.export(records)
        except RetryHeldError:  # the answer before it failed the export, and is the attempt to count
            result = None
        except Exception:  # an exporter that raises is a failed export, retried like any other
            swallowed(_logger, f"otlp.{self._signal}.export", f"the OTLP {self._signal} exporter raised")
            result = None
        attempt = self._attempts.last() if self._attempts is not None else Attempt("failed")
        with self._condition:
            if getattr(result, "name", None) == "SUCCESS":
                self._failures = 0
                self._next_attempt = 0.0
                # What came in during the export is gathered into the next batch like records trickling
                # in: sent at once, a steady stream went out one request per export's round trip.
                self._gather_until = time.monotonic() + SCHEDULE_DELAY_S
                self._batch_limit = min(MAX_BATCH, self._batch_limit * 2)
                rejected = min(max(0, attempt.rejected), len(records))
                if rejected or attempt.message:
                    self._note_partial(rejected, len(records), attempt.message)
                return ("partial", rejected) if rejected else ("accepted", 0)
            cause = attempt.cause or (
                "unsent" if self._attempts is not None and result is not None else "failed"
            )
            count(f"errors.otlp.{self._signal}.{cause}")
            if cause in _PERMANENT:
                self._batch_limit = max(1, len(records) // 2)
                return "rejected", 0
            self._note_failure(cause, attempt.retry_after_s)
            return "failed", 0

    def _note_partial(self, rejected: int, sent: int, message: str) -> None:
        """Count a partial success and log the backend's message, once per outbox (under the condition)."""
        if rejected:
            count(f"errors.otlp.{self._signal}.partial_success")
        if self._partial_logged:
            return
        self._partial_logged = True
        # The message is the backend's text: shown quoted and cut short, never as a format string.
        _logger.warning(
            "the OTLP backend accepted %s but rejected %d of %d records; it said: %r "
            "(counted in dropped.otlp.%s.partial_rejected; logged once)",
            self._signal,
            rejected,
            sent,
            message[:_MESSAGE_CHARS],
            self._signal,
        )

    def _note_failure(self, cause: str, retry_after_s: float | None) -> None:
        """Wait before the next try (under the condition); flushes waiting for it answer False now."""
        del cause
        self._failures += 1
        wait = min(self._retry_max_s, FIRST_RETRY_S * 2 ** min(self._failures - 1, 20))
        wait *= random.uniform(0.8, 1.2)
        now = time.monotonic()
        if retry_after_s is not None:
            honoured = min(RETRY_AFTER_CAP_S, max(0.0, retry_after_s))
            self._retry_after_until = now + honoured
            wait = max(wait, honoured)
        self._next_attempt = now + wait
        self._failed_while_stopping = self._stopping
        self._fail_flushes()
