"""The one SQLite writer of the embedded store, shared by the span store and the ledger sink.

Usage::

    writer = StoreWriter(path, name="store", unit="spans", lost_key="dropped.store_spans")
    rows = Rows(items=2)
    rows.add("INSERT INTO spans (...) VALUES (...)", [(...), (...)])
    writer.write(rows)                  # on the caller's thread (SQLiteSpanExporter.export)

    thread = WriterThread(writer, Rows.joined, name="tallyspan-ledger-store")
    thread.submit(rows, rows.items)     # queued; written on the writer's own thread (the ledger sink)
    thread.flush(5000)                  # True once everything submitted before is committed

What both writers of the store had to get right, in one place:

- one connection per process, opened on the first write; a forked child opens its own and never
  closes (or writes through) its parent's;
- the writer's locks renewed in a forked child, so a fork in the middle of a write cannot freeze it;
- a busy timeout; while another connection (``tallyspan prune``, a backup) holds the write lock past
  it, the rows are kept, at most ``max_pending`` items, and written with the next write that gets the
  lock; until then each write tries once without waiting, so a long lock costs one busy timeout;
- every item that cannot be written (the store cannot be opened, more than the pending limit, a full
  queue, shutdown) counted under ``lost_key`` in ``tallyspan.stats()``, every failure logged once;
- our own SQL never traced by a database instrumentation of the app (``suppress_instrumentation``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from tallyspan.plugin import (
    HandOvers,
    Turns,
    after_fork_in_child,
    count,
    release_free_memory,
    renew_lock_after_fork,
    start_thread,
    swallowed,
    turn_threshold,
)
from tallyspan.plugin.exporters import BUSY_TIMEOUT_MS, connect, is_locked

if TYPE_CHECKING:
    import sqlite3  # loads with the first connection (tallyspan.plugin.exporters.connect), on the writer thread

__all__ = [
    "DEFAULT_BATCH_ITEMS",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_MAX_QUEUED",
    "DEFAULT_RELEASE_IDLE_MILLIS",
    "DEFAULT_SCHEDULE_DELAY_MILLIS",
    "RETRY_SECONDS",
    "Rows",
    "StoreWriter",
    "WriterThread",
    "delete_sql",
    "insert_sql",
    "many_rows_sql",
    "rows_per_statement",
    "span_hex",
    "statement_chunks",
    "trace_hex",
    "transaction",
]

_logger = logging.getLogger(__name__)

T = TypeVar("T")


@contextmanager
def suppress_instrumentation() -> Iterator[None]:
    """OpenTelemetry's ``suppress_instrumentation()``, imported with the first write (on the writer's
    thread): its module loads the propagators (about 3 ms), which ``instrument()`` need not wait for."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation as suppressed

    with suppressed():
        yield


DEFAULT_MAX_PENDING: Final = 16384
"""Items (spans, ledger rows) kept while another connection holds the write lock; the oldest beyond
this are dropped and counted."""
DEFAULT_MAX_QUEUED: Final = 16384
"""Items a writer thread queues at most: as many as the chain's worker queue (8192) and then some, so a
burst the worker accepted is not dropped here; beyond it they are dropped and counted."""
DEFAULT_SCHEDULE_DELAY_MILLIS: Final = 500
"""How long a writer thread gathers a batch when the app is busy but no batch is full."""
DEFAULT_BATCH_ITEMS: Final = 512
"""Items that make a writer thread write at once, without waiting for the schedule delay."""
RETRY_SECONDS: Final = 1.0
"""How often a writer thread tries again to write rows kept under another connection's lock."""
RELEASE_AFTER_ITEMS: Final = 1024
"""Items written since the last release that make a pause worth giving memory back for."""
DEFAULT_RELEASE_IDLE_MILLIS: Final = 1000
"""How long a writer thread waits with nothing to write, after ``RELEASE_AFTER_ITEMS`` items or more,
before it gives the memory of its batches and SQLite's page cache back."""


@contextmanager
def transaction(db: sqlite3.Connection, begin: str = "BEGIN") -> Iterator[sqlite3.Connection]:
    """Run the block in one transaction of ``db`` (autocommit mode): committed, or rolled back on any error."""
    db.execute(begin)
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


LOWEST_VARIABLES_LIMIT: Final = 999
"""SQLite's lowest limit of bound parameters in one statement (builds before 3.32): used where the limit
of the SQLite at hand cannot be read (Python 3.10 with an SQLite before 3.32)."""
MAX_VARIABLES_PER_STATEMENT: Final = 8192
"""Bound parameters one multi-row statement takes at most (where SQLite allows as many: 32,766 since
3.32). A prepared statement costs about 100 bytes of SQLite's memory per parameter, and each row count
is kept prepared in the connection's cache: 8,192 keep the largest at about 800 KB."""
MAX_ROWS_PER_STATEMENT: Final = 256
"""Rows one multi-row statement writes at most. Each statement is a release of the GIL, and behind a
busy app the writer needs about a switch interval and several futile wake-ups to win it back: at 32 span
rows a statement (999 parameters), the writer fell 3,000-6,400 rows behind a mock-transport OpenAI loop
(RSS peak 135-172 MB over 20,000 calls); at 256, at most about 1,000 (peak 92 MB), with a fifth of the
backpressure turns."""
#: A placeholder of ``insert_sql``: ``?``, or ``CAST(? AS TEXT)`` for UTF-8 bytes into a TEXT column.
_PLACEHOLDER: Final = r"(?:\?|CAST\(\? AS TEXT\))"
_ONE_ROW_OF_PLACEHOLDERS: Final = re.compile(rf"\bVALUES (\((?:{_PLACEHOLDER}, )*{_PLACEHOLDER}\))\)*$")


@functools.cache
def variables_per_statement() -> int:
    """The bound parameters one statement may take here: this process's SQLite limit, read once, at
    most ``MAX_VARIABLES_PER_STATEMENT``."""
    import sqlite3  # here, not at import: an instrumentor alone never loads it

    if sys.version_info >= (3, 11):
        probe = sqlite3.connect(":memory:")
        try:
            limit = probe.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        finally:
            probe.close()
    else:  # no getlimit: SQLite's default limit for its version
        limit = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else LOWEST_VARIABLES_LIMIT
    return max(1, min(limit, MAX_VARIABLES_PER_STATEMENT))


@functools.lru_cache(maxsize=256)
def rows_per_statement(sql: str) -> int:
    """How many rows one run of ``sql`` may write: a power of two when ``sql`` ends in one row of
    placeholders holding all its parameters (an INSERT's VALUES, a DELETE's ``IN (VALUES ...)``), else 1."""
    found = _ONE_ROW_OF_PLACEHOLDERS.search(sql)
    if found is None or sql.count("?") != found[1].count("?"):
        return 1
    fits = min(MAX_ROWS_PER_STATEMENT, variables_per_statement() // found[1].count("?"))
    return 1 << (fits.bit_length() - 1) if fits >= 1 else 1


def statement_chunks(values: Sequence[T], per_statement: int) -> Iterator[Sequence[T]]:
    """``values`` in the parts one statement each takes: ``per_statement`` (a power of two) at a time,
    the rest in falling powers of two, so a statement comes in a few shapes that stay in SQLite's cache."""
    start, left = 0, len(values)
    while left:
        size = per_statement if left >= per_statement else 1 << (left.bit_length() - 1)
        yield values[start : start + size]
        start, left = start + size, left - size


@functools.lru_cache(maxsize=512)
def many_rows_sql(sql: str, rows: int) -> str:
    """``sql`` (one that ``rows_per_statement`` allows more than one row) for ``rows`` rows."""
    found = _ONE_ROW_OF_PLACEHOLDERS.search(sql)
    assert found is not None
    group = found[1]
    start, end = found.span(1)
    return f"{sql[:start]}{', '.join([group] * rows)}{sql[end:]}"


def delete_sql(table: str, columns: Sequence[str]) -> str:
    """``DELETE FROM table WHERE (columns) IN (SELECT ... FROM (VALUES (?, ...)))``: deletes the rows
    matching any parameter row, many in one statement (``Rows.write``), through an index on ``columns``
    (a bare ``IN (VALUES ...)`` scans the table)."""
    names = ", ".join(columns)
    selected = ", ".join(f"column{index}" for index in range(1, len(columns) + 1))
    placeholders = ", ".join("?" for _ in columns)
    return f"DELETE FROM {table} WHERE ({names}) IN (SELECT {selected} FROM (VALUES ({placeholders})))"


def insert_sql(
    table: str, columns: Sequence[str], verb: str = "INSERT", text_bytes: Collection[str] = ()
) -> str:
    """``{verb} INTO table (columns) VALUES (?, ...)``; the columns in ``text_bytes`` are bound as UTF-8
    bytes and stored as TEXT (``CAST(? AS TEXT)``): SQLite takes bytes as they are, where a ``str`` is
    encoded again while it is bound."""
    placeholders = ", ".join("CAST(? AS TEXT)" if column in text_bytes else "?" for column in columns)
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({placeholders})"


def trace_hex(trace_id: int) -> str:
    """A trace id as the store spells it: 32 lower-case hex digits."""
    return format(trace_id, "032x")


def span_hex(span_id: int) -> str:
    """A span id as the store spells it: 16 lower-case hex digits."""
    return format(span_id, "016x")


class Rows:
    """Statements for one transaction, and how many items (spans, ledger rows) they write.

    ``items`` is what a loss of these rows costs, in the unit of the writer's ``lost_key``.
    """

    __slots__ = ("items", "statements")

    def __init__(self, items: int = 0) -> None:
        self.items = items
        self.statements: list[tuple[str, Sequence[Sequence[Any]]]] = []

    def add(self, sql: str, parameters: Sequence[Sequence[Any]]) -> None:
        """Run ``sql`` once per parameter tuple, after the statements added before."""
        if parameters:
            self.statements.append((sql, parameters))

    def write(self, db: sqlite3.Connection, progress: Callable[[], object] | None = None) -> None:
        """Run every statement, in order, inside the caller's transaction; ``progress`` after each.

        A statement that ends in one row of placeholders (``... VALUES (?, ?)``, or ``delete_sql``'s
        ``... FROM (VALUES (?, ?)))``) runs for many rows at once, as ``VALUES (?, ?), (?, ?), ...``:
        ``sqlite3`` lets go of the GIL around every step, and behind a busy app each release can cost
        the writer a whole switch interval before it runs again, so one step per row starved the
        store's writer (21,405 of 60,000 spans dropped behind a saturated app). The rows go in the
        order given, as with one statement per row: a span exported twice still ends with its later row.
        """
        for sql, parameters in self.statements:
            per_statement = rows_per_statement(sql)
            if per_statement == 1 or len(parameters) == 1:
                db.executemany(sql, parameters)
            else:
                for chunk in statement_chunks(parameters, per_statement):
                    db.execute(many_rows_sql(sql, len(chunk)), [value for row in chunk for value in row])
            if progress is not None:
                progress()

    @classmethod
    def joined(cls, parts: Iterable[Rows]) -> Rows:
        """One ``Rows`` running the statements of ``parts`` in order."""
        whole = cls()
        for part in parts:
            whole.items += part.items
            whole.statements.extend(part.statements)
        return whole


class StoreWriter:
    """Write ``Rows`` into the store at ``path``, one transaction per write; thread-safe, never raises.

    Args:
        path: the database file (created and migrated on the first write).
        name: the key of its errors in ``tallyspan.stats()``: ``errors.<name>.write`` and
            ``errors.<name>.locked``.
        unit: what an item is, for the log (``spans``, ``ledger rows``).
        lost_key: the counter of the items that could not be written (``dropped.store_spans``).
        busy_timeout_millis: how long a write waits for another connection's lock.
        max_pending: items kept while the store is locked; the oldest beyond this are dropped.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str,
        unit: str,
        lost_key: str,
        busy_timeout_millis: int = BUSY_TIMEOUT_MS,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self.path = path
        self.lost_key = lost_key
        self.unit = unit
        self.name = name
        self._busy_timeout_millis = max(0, busy_timeout_millis)
        self._max_pending = max(1, max_pending)
        self._lock = threading.Lock()
        renew_lock_after_fork(self)  # a fork while another thread writes must not freeze the child
        self._db: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._closed = False
        self._pending: list[Rows] = []
        self._pending_items = 0
        self.lost = 0
        """Items this writer could not write, since it was made (they are also counted in ``lost_key``)."""
        self._contended = False
        """True after a write found the database locked: later writes try once without waiting."""

    @property
    def kept(self) -> int:
        """Items kept for a later write (the store was locked)."""
        return self._pending_items

    @property
    def is_open(self) -> bool:
        """True while the writer holds a connection: it has written, and no write failed since."""
        return self._db is not None and not self._closed

    def write(self, rows: Rows, progress: Callable[[], object] | None = None) -> bool:
        """Keep ``rows`` and write everything kept in one transaction; False if not written (yet).

        ``progress`` is called after each statement (the writer thread answers a turn there)."""
        with suppress_instrumentation(), self._lock:
            if self._closed:
                self._count_lost(rows.items)
                return False
            self._adopt_process()
            self._keep(rows)
            return self._write_pending(wait=not self._contended, progress=progress)

    def flush(self, timeout_millis: int = 30000) -> bool:
        """Write the rows kept while the store was locked, waiting for the lock up to the busy timeout
        (and ``timeout_millis``); True when nothing is left unwritten."""
        with suppress_instrumentation(), self._lock:
            self._adopt_process()
            if not self._pending:
                return True
            return self._write_pending(wait=True, timeout_millis=timeout_millis)

    def shrink_memory(self) -> None:
        """Let SQLite free its page cache (about 2 MB once full), which it otherwise keeps for the
        connection's life; the next write reads back the few pages it needs."""
        with suppress_instrumentation(), self._lock:
            db = self._db
            if db is None or self._closed or self._pid != os.getpid():
                return
            try:
                db.execute("PRAGMA shrink_memory")
            except Exception:  # only memory is at stake: the writes must go on whatever SQLite says
                swallowed(
                    _logger,
                    f"{self.name}.shrink",
                    f"could not shrink the tallyspan store's cache at {self.path}",
                )

    def close(self) -> None:
        """Write what is still kept (one last wait for the lock), count the rest, close the connection.

        Later writes fail and count their items. A forked child never closes its parent's connection.
        """
        with suppress_instrumentation(), self._lock:
            if self._closed:
                return
            self._closed = True
            self._adopt_process()
            if self._pending:
                self._write_pending(wait=True)
            if self._pending_items:
                self._count_lost(self._pending_items)
            self._pending, self._pending_items = [], 0
            self._close_connection()

    def _count_lost(self, items: int) -> None:
        if items:
            self.lost += items
            count(self.lost_key, items)

    def _adopt_process(self) -> None:
        # A forked child must not use its parent's SQLite connection: abandon it (closing it could
        # disturb the parent's locks) and open its own. The rows it kept are the parent's to write.
        if self._pid != os.getpid():
            self._db, self._pid = None, os.getpid()
            self._pending, self._pending_items, self._contended = [], 0, False

    def _keep(self, rows: Rows) -> None:
        if not rows.statements:
            return  # nothing new: only the rows kept before are written
        self._pending.append(rows)
        self._pending_items += rows.items
        while self._pending_items > self._max_pending and len(self._pending) > 1:
            oldest = self._pending.pop(0)
            self._pending_items -= oldest.items
            self._count_lost(oldest.items)

    def _write_pending(
        self,
        *,
        wait: bool,
        timeout_millis: int | None = None,
        progress: Callable[[], object] | None = None,
    ) -> bool:
        """Write every kept batch in one transaction (under ``self._lock``); False if it failed."""
        import sqlite3  # loaded by connect() already: a lookup

        try:
            if self._db is None:
                self._db = connect(self.path)
            db = self._db
            busy_millis = self._busy_timeout_millis if wait else 0
            if timeout_millis is not None:
                busy_millis = min(busy_millis, max(0, timeout_millis))
            db.execute(f"PRAGMA busy_timeout = {int(busy_millis)}")
            with transaction(db):
                for rows in self._pending:
                    rows.write(db, progress)
        except sqlite3.OperationalError as error:
            if not is_locked(error):
                return self._lost()
            self._contended = True
            swallowed(
                _logger,
                f"{self.name}.locked",
                f"the tallyspan store at {os.fspath(self.path)} is locked by another connection; up to "
                f"{self._max_pending} {self.unit} are kept and written once it is free",
            )
            return False
        except Exception:  # the store is a convenience: losing it must never break the app or the chain
            return self._lost()
        self._pending, self._pending_items, self._contended = [], 0, False
        return True

    def _lost(self) -> bool:
        swallowed(
            _logger,
            f"{self.name}.write",
            f"could not write {self.unit} to the tallyspan store at {os.fspath(self.path)}",
        )
        self._count_lost(self._pending_items)
        self._pending, self._pending_items = [], 0
        # A connection that failed other than by a lock may be broken: open afresh next time.
        self._close_connection()
        return False

    def _close_connection(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception:  # closing a broken connection must not raise out of a write or shutdown
                swallowed(
                    _logger, f"{self.name}.close", f"could not close the tallyspan store at {self.path}"
                )


class _Flush:
    __slots__ = ("deadline", "done", "result")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.done = threading.Event()
        self.result = False


class WriterThread(Generic[T]):
    """Write through a ``StoreWriter`` from a thread of its own, so a held lock or a slow disk never
    holds up the thread that hands the rows over (the chain's worker, which runs the checks).

    ``submit`` only queues; the thread gathers what is queued (up to the schedule delay), turns it into
    ``Rows`` with ``prepare`` and writes it in one transaction. Rows kept under another connection's
    lock are tried again every ``RETRY_SECONDS`` and with every write. ``flush`` is exact: it returns
    True once everything submitted before it is committed. The thread starts on the first submit, and
    again in a forked child.

    The thread needs the GIL at its start of each batch and after each statement (SQLite lets go of it
    for the statement). Behind a busy app it would wait for it, woken at each of the app's short
    releases to lose the race again; it takes hand-overs from the app's thread instead
    (``tallyspan.plugin.Turns.take_hand_overs_from``, through the instrumentation's ``HandOvers``),
    keeping ``Turns.due`` to when it needs the GIL: at the end of its waits, and at once while it writes.

    After ``RELEASE_AFTER_ITEMS`` items or more, a pause of ``release_idle_millis`` with nothing to
    write gives memory back: SQLite's page cache and the C heap's free pages. The chain's worker trims
    when its queue runs empty, before this thread has written (and let go of) the last batches; a
    steady stream never pauses, so it never pays for it.

    Args:
        writer: the store's writer; the thread is the only one to use it.
        prepare: turns the queued items into rows, on the thread (a failure loses and counts them).
        name: the thread's name.
        max_queued: items waiting at most (``submit``'s ``size``); more are dropped and counted.
        schedule_delay_millis: how long the thread gathers a batch before it writes.
        release_idle_millis: how long a pause after a busy spell lasts before memory is given back.
        hand_overs: the instrumentation's link from the app's threads (``Settings.hand_overs``); without
            it the thread takes no hand-overs.
    """

    def __init__(
        self,
        writer: StoreWriter,
        prepare: Callable[[list[T]], Rows],
        *,
        name: str,
        max_queued: int = DEFAULT_MAX_QUEUED,
        schedule_delay_millis: int = DEFAULT_SCHEDULE_DELAY_MILLIS,
        release_idle_millis: int = DEFAULT_RELEASE_IDLE_MILLIS,
        hand_overs: HandOvers | None = None,
    ) -> None:
        self._writer = writer
        self._hand_overs = hand_overs
        self._prepare = prepare
        self._name = name
        self._max_queued = max(1, max_queued)
        self._delay_s = max(0, schedule_delay_millis) / 1000
        self._condition = threading.Condition()
        self._queue: list[tuple[T, int]] = []  # (item, its size)
        self._queued_items = 0
        self._flushes: list[_Flush] = []
        self._thread: threading.Thread | None = None
        self._running = False  # set before the thread starts, cleared when it returns
        self._stopping = False
        self._pid = os.getpid()
        self._turn_at = turn_threshold(self._max_queued)
        self._turns = Turns(f"backpressure.{writer.name}_turns")
        self._dropped = 0  # items dropped before they reached the writer (queue full, not preparable)
        self._losses_at_flush = 0  # the writer's and our losses when the last flush answered
        self._release_idle_s = max(0, release_idle_millis) / 1000
        self._unreleased = 0  # items handled since memory was last given back (the thread's own)
        self._memory_releases = 0
        # Set while the thread waits with nothing to do and nothing due (no retry, no release).
        self._idle = threading.Event()
        # The thread does not survive fork(): the child gets a fresh lock and queue, and a thread of
        # its own on its first submit. What the parent had queued is the parent's to write.
        after_fork_in_child(self, WriterThread._reset_after_fork)

    @property
    def memory_releases(self) -> int:
        """How often the thread gave memory back after a busy spell and a pause."""
        return self._memory_releases

    def submit(self, item: T, size: int = 1) -> bool:
        """Queue ``item`` (``size`` items, for the limit and the count of losses); False if dropped.

        Once ``max_queued // 16`` items wait, the caller lets go of the GIL until the thread runs
        (``tallyspan.plugin.Turns``): behind a busy app the thread could starve while its queue grows."""
        with self._condition:
            if self._stopping or self._queued_items + size > self._max_queued:
                self._drop(size)
                return False
            threaded = self._ensure_thread()
            self._queue.append((item, size))
            self._queued_items += size
            if len(self._queue) == 1 or self._queued_items >= DEFAULT_BATCH_ITEMS:
                self._condition.notify()
                self._turns.due = 0.0  # woken, it waits for the GIL: the app's next span hands it over
            queued = self._queued_items
        if not threaded:
            self._write_here()
        elif queued >= self._turn_at:
            self._turns.give(queued)
        return True

    def flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until everything submitted before is written; True if it was, within ``timeout_millis``,
        and nothing was lost since the previous flush answered."""
        deadline = time.monotonic() + max(0, timeout_millis) / 1000
        with self._condition:
            if self._stopping:
                return not self._queue and self._writer.kept == 0
            if self._thread is None and not self._queue:
                return True  # nothing was ever submitted in this process
            threaded = self._ensure_thread()
            request = _Flush(deadline)
            self._flushes.append(request)
            self._condition.notify()
        if not threaded:
            self._write_here()
        return request.done.wait(max(0.0, deadline - time.monotonic())) and request.result

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Write what is queued and kept (one last wait for the lock), close the writer; later submits
        are dropped and counted. Waits for the thread at most ``timeout_millis``."""
        with self._condition:
            if self._stopping:
                return
            self._stopping = True
            thread = self._thread
            self._condition.notify()
        if thread is None:
            self._write_here()  # what no thread could be started for (at exit), then close
        else:
            thread.join(max(0, timeout_millis) / 1000)

    def _ensure_thread(self) -> bool:
        """Start the thread if it is not running (first submit, or a forked child); under the condition.
        False where the interpreter refuses a thread (at exit, from Python 3.12): the caller then writes
        on its own thread (``_write_here``)."""
        # The flag the thread clears on its way out, not Thread.is_alive() (Python-level calls and a lock,
        # on every submit): a forked child starts with it cleared (_reset_after_fork).
        if self._running:
            return True
        if self._thread is not None and self._pid == os.getpid():
            count(f"errors.{self._writer.name}.restarted")  # it died: a bug of ours; the rows still go out
        self._pid = os.getpid()
        thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._running = True
        if not start_thread(thread):
            self._running = False
            return False
        self._thread = thread
        return True

    def _write_here(self) -> None:
        """Write what is queued, answer the flushes waiting and, once stopping, close the writer, all on
        the calling thread: no thread could be started for it."""
        with self._condition:
            if self._running:
                return  # a thread took over meanwhile
            items, size = self._queue, self._queued_items
            self._queue, self._queued_items = [], 0
            flushes, self._flushes = self._flushes, []
            stopping = self._stopping
        with suppress_instrumentation():
            try:
                self._write(items, size, flushes, stopping)
            except Exception:
                swallowed(_logger, f"{self._writer.name}.thread", f"the {self._name} writes failed")
            finally:
                for request in flushes:
                    request.done.set()

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._running = False

    def _serve(self) -> None:
        self._turns.consumer_started()
        if self._hand_overs is not None:
            self._turns.take_hand_overs_from(self._hand_overs)
        try:
            self._serve_until_stopped()
        finally:
            self._turns.stop_taking_hand_overs()

    def _serve_until_stopped(self) -> None:
        # Our own SQL must not be traced by a database instrumentation the app installed.
        with suppress_instrumentation():
            while True:
                items, size, flushes, stopping = self._next()
                self._turns.taken()  # we hold the GIL now: a caller waiting for our turn may go on
                try:
                    self._write(items, size, flushes, stopping)
                except BaseException:  # even sys.exit() from a bug: the thread must outlive it
                    swallowed(_logger, f"{self._writer.name}.thread", f"the {self._name} thread failed")
                finally:
                    for request in flushes:
                        request.done.set()
                if stopping:
                    return
                # Let the batch go now: held while the thread waits, it kept up to a whole queue of
                # spans (their content included) alive after a backlog, until the next write came.
                items, flushes = [], []

    def _next(self) -> tuple[list[tuple[T, int]], int, list[_Flush], bool]:
        """Wait for work: queued items (gathered up to the schedule delay), a flush, shutdown, the time
        to try kept rows again or to give memory back; then take it all."""
        with self._condition:
            while not (self._queue or self._flushes or self._stopping):
                if self._writer.kept:
                    timeout: float | None = RETRY_SECONDS
                elif self._unreleased >= RELEASE_AFTER_ITEMS:
                    timeout = self._release_idle_s
                else:
                    timeout = None
                    self._idle.set()
                if not self._wait(timeout) and timeout is not None:
                    return [], 0, [], False
            self._idle.clear()
            if (
                self._queue
                and not (self._flushes or self._stopping)
                and self._queued_items < DEFAULT_BATCH_ITEMS
            ):
                self._wait(self._delay_s)
            self._turns.due = 0.0  # until the next wait: between statements it waits for the GIL again
            items, size = self._queue, self._queued_items
            self._queue, self._queued_items = [], 0
            flushes, self._flushes = self._flushes, []
            return items, size, flushes, self._stopping

    def _wait(self, timeout: float | None) -> bool:
        """``self._condition.wait(timeout)`` (held) as a consumer of the app's hand-overs: due (waiting
        for the GIL) once the wait is over, sooner if a submit wakes us; a hand-over given while we
        worked is answered before, one given while we woke up after."""
        turns = self._turns
        turns.due = math.inf if timeout is None else time.monotonic() + timeout
        turns.taken()
        woken = self._condition.wait(timeout)
        turns.taken()
        return woken

    def _write(self, items: list[tuple[T, int]], size: int, flushes: list[_Flush], stopping: bool) -> None:
        writer = self._writer
        if items:
            self._unreleased += size
            # A backlog in transactions of DEFAULT_BATCH_ITEMS, and a turn given while we work answered
            # after each step (preparing, each statement), not only at the next batch: SQLite lets go of
            # the GIL at every statement, a busy app takes it back, and a caller whose turn went
            # unanswered gives the next only once the backlog grew by another step.
            for start in range(0, len(items), DEFAULT_BATCH_ITEMS):
                self._write_part(items[start : start + DEFAULT_BATCH_ITEMS])
        elif writer.kept and not flushes and not stopping:
            writer.write(Rows())  # nothing new: try the kept rows again (without waiting if still locked)
        elif self._unreleased >= RELEASE_AFTER_ITEMS and not flushes and not stopping:
            self._release_memory()  # a pause after a busy spell
        for request in flushes:
            written = writer.flush(int((request.deadline - time.monotonic()) * 1000))
            with self._condition:
                losses = writer.lost + self._dropped
                # False when anything was lost since the last flush answered: not all was delivered.
                request.result = written and losses == self._losses_at_flush
                self._losses_at_flush = losses
        if stopping:
            writer.close()

    def _write_part(self, part: list[tuple[T, int]]) -> None:
        try:
            rows = self._prepare([item for item, _ in part])
        except Exception:  # items we cannot turn into rows must not stop the ones behind them
            swallowed(
                _logger,
                f"{self._writer.name}.prepare",
                f"could not prepare {self._writer.unit} for the store",
            )
            with self._condition:
                self._drop(sum(size for _, size in part))
            return
        self._turns.taken()
        self._writer.write(rows, progress=self._turns.taken)

    def _release_memory(self) -> None:
        self._unreleased = 0
        self._writer.shrink_memory()
        release_free_memory()
        self._memory_releases += 1

    def _drop(self, size: int) -> None:
        """Count ``size`` items lost before they reached the writer (under the condition)."""
        if size:
            self._dropped += size
            count(self._writer.lost_key, size)

    def _reset_after_fork(self) -> None:
        self._condition = threading.Condition()
        self._queue, self._queued_items, self._flushes = [], 0, []
        self._idle, self._unreleased = threading.Event(), 0
        self._turns.reset_after_fork()
        self._thread = None
        self._running = False
