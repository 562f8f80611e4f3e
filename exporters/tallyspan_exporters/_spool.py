"""The OTLP spool: records that must reach the backend wait here, on disk, until it has accepted them.

Usage::

    spool = Spool(".tallyspan/tallyspan.spool.db", max_bytes=64 << 20, max_age_s=7 * 86400)
    seqs = spool.append("traces", [(span_id_hex, json_text)])   # before the first export attempt
    rows = spool.claim("traces", 512)                             # oldest first, ours or orphaned
    spool.delete([row.seq for row in rows])                       # once the backend accepted them
    spool.release()                                               # at shutdown: the next start sends them

One SQLite file (WAL, ``synchronous=NORMAL``: durable across a crash of the process, not of the
machine), shared by every process that uses it (a pool of workers, the next start of the app). Each row
belongs to the process that wrote or claimed it for a lease, renewed while that process lives; a row
whose owner released it, died (a process id on this host that no longer exists) or stopped renewing its
lease is taken over by the next process that claims, so nothing is sent by two live processes and
nothing waits on a dead one.

The wall clock is not trusted to tell a lease that ran out: it jumps (a VM resumed after a pause, an
NTP step, an operator), and a jump forward made every live process's lease look expired at once, so
its rows in flight were claimed and sent by another process too, and evicted and counted as lost while
they were being delivered. A lease runs out when the claimer, on its own monotonic clock, has seen it
unchanged for ``LEASE_S`` (its owner renews it every ``LEASE_S / 3``); the age limit alone reads the
wall clock, since a record's age is wall time.

Bounded: the records together at most ``max_bytes`` (the oldest beyond it evicted, counted in
``dropped.otlp.<signal>.spool_full``), none older than ``max_age_s`` (``...spool_expired``). A row
being sent (claimed, its export not yet answered) is never evicted: the spool may hold one batch per
sender beyond ``max_bytes`` for the length of an export, so that a record is either delivered or
counted as dropped, never both.

Every failure (a locked, full or broken file) is logged once and counted, and reported to the caller
as a value; nothing here raises. A spool that fails (a full disk, an I/O error) is left alone for
``RETRY_S`` after each failure: its operations answer None at once, and the outbox delivers from
memory meanwhile. A damaged file (SQLite finds it malformed, or not a database at all) is set aside,
renamed to ``<name>.damaged-<time>-<pid>`` (never deleted), and a fresh spool takes its place with every
record that could still be read; each record known to have been there that could not be read is
counted in ``dropped.otlp.<signal>.spool_damaged``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from opentelemetry.instrumentation.utils import suppress_instrumentation

from tallyspan.plugin import count, renew_lock_after_fork, swallowed
from tallyspan.plugin.exporters import is_locked
from tallyspan_exporters._writer import (
    insert_sql,
    many_rows_sql,
    rows_per_statement,
    statement_chunks,
    transaction,
)

__all__ = ["LEASE_S", "RETRY_S", "Spool", "SpooledRow", "shared_spool"]

_logger = logging.getLogger(__name__)

T = TypeVar("T")

LEASE_S: Final = 30.0
"""How long a claimed or written row stays its owner's without a renewal (the owner renews every 10 s)."""
_DEAD_OWNER_SCAN_S: Final = 5.0
"""How often owners of other processes are checked for being alive and renewing (``time.monotonic()``)."""
_BUSY_TIMEOUT_MS: Final = 1000
"""How long a statement waits for another process's transaction: the spool's are all short."""
RETRY_S: Final = 1.0
"""How long a spool that failed (a full disk, an I/O error) is left alone before it is tried again."""
_SQLITE_CORRUPT: Final = 11
_SQLITE_NOTADB: Final = 26

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    signal TEXT NOT NULL,
    record_id TEXT NOT NULL,
    body TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_unix_nano INTEGER NOT NULL,
    owner TEXT,
    lease_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    sending INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_by_signal ON records (signal, seq);
CREATE INDEX IF NOT EXISTS records_by_created ON records (created_unix_nano, signal);
CREATE INDEX IF NOT EXISTS records_by_size ON records (size);
CREATE INDEX IF NOT EXISTS records_by_owner_lease ON records (owner, lease_until);
DROP INDEX IF EXISTS records_by_owner;
CREATE TABLE IF NOT EXISTS record_counts (signal TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
"""
# Each append evicts what expired and sums the sizes, and the owners are looked up every few seconds:
# without the last three indexes each read every row, its body included (the columns lie behind it),
# and an append's cost grew with the spool (bench/bench_spool.py: 5.5 ms for 17 records at 2,000 rows,
# 61 ms at 18,000, a full spool; now 0.4 and 0.9 ms), most of all during the outages the spool is for.
# ``sending`` marks the rows of an export in flight (claimed, not yet answered): the size limit does not
# evict them (added to the spools of earlier versions when they are opened). The owner index holds the
# lease too, so the look for owners that stopped renewing reads it alone. ``record_counts`` holds how
# many rows of each signal there are, kept in the transaction that adds or removes them: one small page
# near the file's start, so that when a damaged file hides some rows from every b-tree, how many were
# lost is still known, by signal.
_COLUMNS: Final = (
    "seq", "signal", "record_id", "body", "size", "created_unix_nano", "owner", "lease_until", "attempts"
)  # fmt: skip


@dataclass(frozen=True)
class SpooledRow:
    """One record taken from the spool to be sent."""

    seq: int
    record_id: str
    body: str


def _owner_name() -> str:
    return f"{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:12]}"


def _is_dead(owner: str, host: str) -> bool:
    """True when ``owner`` names a process on this host that no longer exists."""
    owner_host, _, rest = owner.partition("|")
    pid_text = rest.partition("|")[0]
    if owner_host != host or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: alive, someone else's
        return False
    return False


_shared: dict[tuple[Path, int, float], Spool] = {}
_shared_lock = threading.Lock()


def _renew_shared_lock() -> None:
    global _shared_lock
    _shared_lock = threading.Lock()  # a fork while another thread held it must not freeze the child


os.register_at_fork(after_in_child=_renew_shared_lock)


def shared_spool(path: str | os.PathLike[str], *, max_bytes: int, max_age_s: float) -> Spool:
    """The process's open spool at ``path`` (made on first use), shared by its outboxes (traces and the
    ledger's logs): one connection and one lock, so they wait for each other in Python, not on SQLite's
    busy timeout, which a transaction of ours starved of the GIL behind a busy app could outlast
    (``errors.spool.locked`` from our own two connections). Each user closes it once."""
    key = (Path(path).absolute(), max_bytes, max_age_s)
    with _shared_lock:
        spool = _shared.get(key)
        if spool is not None:
            with spool._lock:
                if not spool._closed:
                    spool._users += 1
                    return spool
        spool = _shared[key] = Spool(path, max_bytes=max_bytes, max_age_s=max_age_s)
        return spool


class Spool:
    """Records waiting for the backend, in the SQLite file at ``path`` (opened on first use).

    Thread-safe; a forked child opens the file afresh and owns only what it writes or claims.

    Args:
        path: the spool file (created with its folder).
        max_bytes: the records' bodies together at most; the oldest beyond it are evicted (counted).
        max_age_s: a record older than this is evicted (counted).
    """

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int, max_age_s: float) -> None:
        self.path = Path(path)
        self._max_bytes = max(1, max_bytes)
        self._max_age_ns = int(max(0.0, max_age_s) * 1e9)
        self._lock = threading.Lock()
        renew_lock_after_fork(self)  # a fork in the middle of a statement must not freeze the child
        self._db: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._owner = _owner_name()
        self._host = socket.gethostname()
        self._closed = False
        self._next_dead_scan = 0.0  # monotonic
        self._leases_seen: dict[str, tuple[float | None, float]] = {}  # owner: (lease, monotonic when seen)
        self._users = 1  # the outboxes sharing it (``shared_spool``): the last one releases and closes
        self._down_until = 0.0  # monotonic: after a failure, the spool is not tried again before this
        self._file_id: tuple[int, int] | None = None  # (device, inode) of the file the connection opened
        self._uncommitted: Counter[str] = Counter()  # losses of the transaction under way: counted at commit

    # --- what the sender uses --------------------------------------------------------------------------

    def append(self, signal: str, records: Sequence[tuple[str, str]]) -> list[int] | None:
        """Add ``(record_id, body)`` records, owned by this process; their seqs, or None on failure.

        Makes room first: records past the age limit, then the oldest beyond the size limit, are
        evicted and counted. A record larger than the whole spool is not kept (counted, seq 0).
        """
        if not records:
            return []
        now_ns = time.time_ns()
        lease = time.time() + LEASE_S  # only ever compared for a change: see the module's docstring

        def write(db: sqlite3.Connection) -> list[int]:
            self._evict_expired(db, now_ns)
            incoming = sum(len(body) for _, body in records if len(body) <= self._max_bytes)
            self._evict_for(db, incoming)
            kept = []
            for record_id, body in records:
                if len(body) > self._max_bytes:
                    self._uncommitted[f"dropped.otlp.{signal}.spool_full"] += 1
                else:
                    kept.append((signal, record_id, body, len(body), now_ns, self._owner, lease))
            written = iter(_insert_records(db, kept))
            _add_counts(db, Counter({signal: len(kept)}))
            return [0 if len(body) > self._max_bytes else next(written) for _, body in records]

        return self._transaction("append", write)

    def claim(self, signal: str, limit: int) -> list[SpooledRow] | None:
        """Take up to ``limit`` of the oldest rows of ``signal`` this process may send (its own, released,
        or a dead or silent process's), for a lease; None on failure."""
        now = time.time()
        scan = time.monotonic() >= self._next_dead_scan

        def take(db: sqlite3.Connection) -> list[SpooledRow]:
            if scan:
                self._release_gone_owners(db)
            rows = db.execute(
                "SELECT seq, record_id, body FROM records WHERE signal = ?"
                " AND (owner = ? OR owner IS NULL) ORDER BY seq LIMIT ?",
                (signal, self._owner, max(1, limit)),
            ).fetchall()
            for chunk in statement_chunks([int(row[0]) for row in rows], _SEQS_PER_STATEMENT):
                db.execute(
                    "UPDATE records SET owner = ?, lease_until = ?, attempts = attempts + 1, sending = 1"
                    f" WHERE {_seqs_in(chunk)}",
                    (self._owner, now + LEASE_S, *chunk),
                )
            return [SpooledRow(int(row[0]), str(row[1]), str(row[2])) for row in rows]

        taken = self._transaction("claim", take)
        if scan and taken is not None:
            self._next_dead_scan = time.monotonic() + _DEAD_OWNER_SCAN_S
        return taken

    def delete(self, seqs: Iterable[int], *, now: bool = False) -> bool:
        """Remove rows the backend accepted (or that can never be sent); False on failure.

        ``now``: try the file even within ``RETRY_S`` of a failure (the last try at shutdown)."""
        keys = [seq for seq in seqs if seq]
        if not keys:
            return True
        return self._transaction("delete", lambda db: _delete_counted(db, keys), now=now) is not None

    def unclaim(self, seqs: Iterable[int]) -> bool:
        """Rows whose export failed are no longer being sent: the size limit may evict them again."""
        keys = [seq for seq in seqs if seq]
        if not keys:
            return True

        def settle(db: sqlite3.Connection) -> None:
            for chunk in statement_chunks(keys, _SEQS_PER_STATEMENT):
                db.execute(f"UPDATE records SET sending = 0 WHERE {_seqs_in(chunk)}", chunk)

        return self._transaction("unclaim", settle) is not None

    def available(self) -> float:
        """When the spool may be tried again (``time.monotonic()``): in the past unless it just failed."""
        return self._down_until

    def renew(self) -> None:
        """Extend the lease of every row this process owns (called while it lives)."""
        lease = time.time() + LEASE_S
        self._transaction(
            "renew",
            lambda db: db.execute("UPDATE records SET lease_until = ? WHERE owner = ?", (lease, self._owner)),
        )

    def release(self) -> None:
        """Give up this process's rows: the next process that claims sends them, without waiting.

        Nothing while another outbox still shares this spool: they are its rows too."""
        with self._lock:
            if self._users > 1:
                return
        self._transaction(
            "release",
            lambda db: db.execute(
                "UPDATE records SET owner = NULL, lease_until = NULL, sending = 0 WHERE owner = ?",
                (self._owner,),
            ),
            now=True,  # the last chance: a disk that was full a moment ago may have room again
        )

    def pending(self, signal: str) -> int | None:
        """How many rows of ``signal`` are waiting, whoever owns them; None on failure."""
        found = self._transaction(
            "count",
            lambda db: db.execute("SELECT count(*) FROM records WHERE signal = ?", (signal,)).fetchone(),
        )
        return None if found is None else int(found[0])

    def close(self) -> None:
        """Close the file once its last user closes it; later calls fail (and report it)."""
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            self._closed = True
            db, self._db = self._db, None
            if db is not None and self._pid == os.getpid():
                try:
                    db.close()
                except Exception:  # closing a broken connection is best effort
                    swallowed(_logger, "spool.close", f"could not close the tallyspan spool at {self.path}")

    # --- inside a transaction ---------------------------------------------------------------------------

    def _evict_expired(self, db: sqlite3.Connection, now_ns: int) -> None:
        if not self._max_age_ns:
            return
        cutoff = now_ns - self._max_age_ns
        # Read from the index, then counted here: grouped by signal in SQL, the planner read every row.
        expired = Counter(
            str(row[0])
            for row in db.execute("SELECT signal FROM records WHERE created_unix_nano < ?", (cutoff,))
        )
        if expired:
            for signal, number in expired.items():
                self._uncommitted[f"dropped.otlp.{signal}.spool_expired"] += number
            db.execute("DELETE FROM records WHERE created_unix_nano < ?", (cutoff,))
            _add_counts(db, Counter({signal: -number for signal, number in expired.items()}))

    def _evict_for(self, db: sqlite3.Connection, incoming: int) -> None:
        """Evict the oldest records until ``incoming`` more bytes fit under the size limit.

        Not a row being sent by its owner: evicted (and counted) and then accepted by the backend, it was
        counted as lost and delivered. It stays; the spool is over its limit until its export ends, or
        until its owner is found dead or silent (then its rows are released, ``sending`` cleared)."""
        total = int(db.execute("SELECT COALESCE(SUM(size), 0) FROM records").fetchone()[0])
        excess = total + incoming - self._max_bytes
        if excess <= 0:
            return
        evicted: list[int] = []
        signals: Counter[str] = Counter()
        for seq, size, signal in db.execute(
            "SELECT seq, size, signal FROM records WHERE sending = 0 OR owner IS NULL ORDER BY seq"
        ):
            if excess <= 0:
                break
            evicted.append(int(seq))
            excess -= int(size)
            signals[str(signal)] -= 1
            self._uncommitted[f"dropped.otlp.{signal}.spool_full"] += 1
        _delete_records(db, evicted)
        _add_counts(db, signals)

    def _release_gone_owners(self, db: sqlite3.Connection) -> None:
        """Release the rows of owners that died (on this host) or have not renewed their lease for
        ``LEASE_S`` of this process's monotonic clock (hung, a reused process id, or gone on another host)."""
        now = time.monotonic()
        leases = {
            str(row[0]): row[1]
            for row in db.execute(
                "SELECT owner, MAX(lease_until) FROM records WHERE owner IS NOT NULL AND owner != ?"
                " GROUP BY owner",
                (self._owner,),
            )
        }
        gone = []
        for owner, lease in leases.items():
            seen = self._leases_seen.get(owner)
            if _is_dead(owner, self._host) or (
                seen is not None and seen[0] == lease and now - seen[1] >= LEASE_S
            ):
                gone.append(owner)
            elif seen is None or seen[0] != lease:
                self._leases_seen[owner] = (lease, now)
        self._leases_seen = {
            owner: seen for owner, seen in self._leases_seen.items() if owner in leases and owner not in gone
        }
        db.executemany(
            "UPDATE records SET owner = NULL, lease_until = NULL, sending = 0 WHERE owner = ?",
            [(owner,) for owner in gone],
        )

    # --- the connection ---------------------------------------------------------------------------------

    def _transaction(
        self, operation: str, work: Callable[[sqlite3.Connection], T], *, now: bool = False
    ) -> T | None:
        with suppress_instrumentation(), self._lock:
            if self._closed:
                return None
            self._adopt_process()
            if not now and time.monotonic() < self._down_until:
                return None  # it failed a moment ago: the outbox delivers from memory meanwhile
            for attempt in range(2):
                try:
                    return self._run(work)
                except sqlite3.OperationalError as error:
                    if is_locked(error):
                        swallowed(
                            _logger,
                            "spool.locked",
                            f"the tallyspan spool at {self.path} is locked by another connection; its "
                            "records wait and are tried again",
                        )
                        return None
                    self._broken(operation)
                    return None
                except sqlite3.DatabaseError as error:
                    if attempt or not _is_damaged(error):
                        self._broken(operation)
                        return None
                    swallowed(
                        _logger,
                        "spool.damaged",
                        f"the tallyspan spool at {self.path} is damaged: set aside (renamed, not deleted), "
                        "a fresh spool holds what could be read, what could not is counted as "
                        "dropped.otlp.<signal>.spool_damaged",
                    )
                    if not self._set_aside():
                        self._broken(operation)
                        return None
                except Exception:  # the spool must never break the app: report, reopen next time
                    self._broken(operation)
                    return None
            return None

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        # IMMEDIATE: take the write lock first, so a claim cannot race another process's claim.
        self._uncommitted.clear()
        with transaction(self._db or self._open(), "BEGIN IMMEDIATE") as db:
            result = work(db)
        # Evictions count only once committed: rolled back (a full disk), the rows are still there.
        for key, number in self._uncommitted.items():
            count(key, number)
        self._uncommitted.clear()
        self._down_until = 0.0
        return result

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(
            os.fspath(self.path),
            timeout=_BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.executescript(_SCHEMA)
            if "sending" not in {str(row[1]) for row in db.execute("PRAGMA table_info(records)")}:
                try:
                    db.execute("ALTER TABLE records ADD COLUMN sending INTEGER NOT NULL DEFAULT 0")
                except sqlite3.OperationalError as error:
                    if "duplicate column" not in str(error):
                        raise  # else another process added it a moment ago
            if db.execute("SELECT count(*) FROM record_counts").fetchone()[0] == 0:
                with transaction(db, "BEGIN IMMEDIATE"):  # a spool of an earlier version: count it once
                    if db.execute("SELECT count(*) FROM record_counts").fetchone()[0] == 0:
                        db.execute(
                            "INSERT INTO record_counts SELECT signal, count(*) FROM records GROUP BY signal"
                        )
                        db.execute("INSERT OR IGNORE INTO record_counts VALUES ('traces', 0), ('logs', 0)")
            status = os.stat(self.path)
        except BaseException:
            db.close()
            raise
        self._db = db
        self._file_id = (status.st_dev, status.st_ino)
        return db

    def _broken(self, operation: str) -> None:
        swallowed(_logger, f"spool.{operation}", f"the tallyspan spool at {self.path} failed ({operation})")
        if not self._down_until:
            # Said once for each time it stops working, and counted: delivery goes on from memory.
            swallowed(
                _logger,
                "spool.memory_only",
                f"the tallyspan spool at {self.path} does not work (a full disk?): records are delivered "
                f"from memory only (at most TALLYSPAN_OTLP_QUEUE_SIZE of each signal; beyond it dropped "
                f"and counted) and the spool is tried again every {RETRY_S:g} s",
            )
        self._down_until = time.monotonic() + RETRY_S
        self._close_connection()

    def _close_connection(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception:  # a broken connection may fail to close too; it is dropped either way
                swallowed(_logger, "spool.close", f"could not close the tallyspan spool at {self.path}")

    def _adopt_process(self) -> None:
        # A forked child must not use its parent's connection (closing it could disturb the parent's
        # locks): it opens its own, and owns only the rows it writes or claims from now on.
        if self._pid != os.getpid():
            self._db, self._pid = None, os.getpid()
            self._owner = _owner_name()
            self._next_dead_scan = 0.0
            self._leases_seen = {}
            self._down_until = 0.0

    # --- a damaged file -----------------------------------------------------------------------------------

    def _set_aside(self) -> bool:
        """Rename the damaged file (with its journal) and start a fresh one holding what could be read
        from it; count what could not. False when that failed too (the spool is then left alone for a
        while, like any failing one)."""
        self._close_connection()
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            status = None
        if status is None or (self._file_id is not None and (status.st_dev, status.st_ino) != self._file_id):
            self._file_id = None
            return True  # another process set it aside already: a fresh spool (or none yet) is there
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        try:
            os.rename(self.path, aside)
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.rename(f"{self.path}{suffix}", f"{aside}{suffix}")
        except OSError:
            swallowed(
                _logger, "spool.set_aside", f"could not set the damaged tallyspan spool {self.path} aside"
            )
            return False
        _logger.warning("tallyspan: the damaged spool %s was set aside as %s", self.path, aside)
        rows, lost, next_seq = _salvage(aside)
        try:
            with transaction(self._open(), "BEGIN IMMEDIATE") as db:
                _insert_salvaged(db, rows, next_seq)
        except Exception:  # the fresh file cannot take them: they stay readable in the one set aside
            swallowed(_logger, "spool.salvage", f"could not write the records salvaged from {aside}")
            for row in rows:
                lost[str(row[1])] += 1
        for signal, number in lost.items():
            count(f"dropped.otlp.{signal}.spool_damaged", number)
        return True


# --- many rows per statement ------------------------------------------------------------------------------
# ``sqlite3`` lets go of the GIL at every statement, and behind a busy app each release can cost the
# thread a switch interval or more (see tallyspan_exporters._writer.Rows.write): a batch of 512 records
# is written, claimed and deleted in a handful of statements, not one per record.

_INSERT_RECORD: Final = insert_sql(
    "records", ("signal", "record_id", "body", "size", "created_unix_nano", "owner", "lease_until")
)
_SEQS_PER_STATEMENT: Final = 256
"""Seqs one ``IN (...)`` lists at most (within SQLite's lowest limit of 999 bound parameters)."""


def _seqs_in(chunk: Sequence[int]) -> str:
    return f"seq IN ({', '.join('?' * len(chunk))})"


def _insert_records(db: sqlite3.Connection, rows: Sequence[tuple[object, ...]]) -> list[int]:
    """Insert ``rows`` (the columns of ``_INSERT_RECORD``), many per statement; their seqs, in order.

    ``seq`` is AUTOINCREMENT and the transaction holds the write lock, so the rows of one statement get
    consecutive seqs in the order of its VALUES, the last one its ``lastrowid``.
    """
    seqs: list[int] = []
    for chunk in statement_chunks(rows, rows_per_statement(_INSERT_RECORD)):
        sql = many_rows_sql(_INSERT_RECORD, len(chunk))
        last = int(db.execute(sql, [value for row in chunk for value in row]).lastrowid or 0)
        seqs.extend(range(last - len(chunk) + 1, last + 1))
    return seqs


def _delete_records(db: sqlite3.Connection, seqs: Sequence[int]) -> int:
    """Delete the records of ``seqs``; how many there were."""
    deleted = 0
    for chunk in statement_chunks(seqs, _SEQS_PER_STATEMENT):
        deleted += db.execute(f"DELETE FROM records WHERE {_seqs_in(chunk)}", chunk).rowcount
    return deleted


# --- a damaged file ---------------------------------------------------------------------------------------


def _is_damaged(error: sqlite3.DatabaseError) -> bool:
    """True when SQLite says the file is malformed or not a database (not busy, full or unreadable)."""
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(error)
    return "malformed" in text or "not a database" in text


#: Every b-tree that lists the seqs of the rows (with their signal where it holds it): a damaged page
#: hides the rows below it from one of them, rarely from all.
_SEQ_SOURCES: Final = (
    "SELECT seq, signal FROM records INDEXED BY records_by_signal",
    "SELECT seq, signal FROM records INDEXED BY records_by_created",
    "SELECT seq, NULL FROM records INDEXED BY records_by_owner_lease",
    "SELECT seq, NULL FROM records INDEXED BY records_by_owner",  # a spool of an earlier version
    "SELECT seq, NULL FROM records INDEXED BY records_by_size",
    "SELECT seq, signal FROM records NOT INDEXED",
)


def _salvage(path: Path) -> tuple[list[tuple[object, ...]], Counter[str], int]:
    """What can be read from the damaged spool at ``path`` (opened read-only: it stays as it was).

    Returns the readable rows (the columns of ``_COLUMNS``), how many rows known to be there could not be
    read (by signal; ``unknown`` where no b-tree still says which), and the first seq a fresh spool may
    give (past every seq the damaged one gave, so a seq never names two records).
    """
    known: dict[int, str | None] = {}
    rows: list[tuple[object, ...]] = []
    lost: Counter[str] = Counter()
    counted: dict[str, int] | None = None
    last_seq = 0
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return rows, lost, last_seq
    try:
        with contextlib.suppress(sqlite3.Error):
            # A file cut short is smaller than its header says: SQLite refuses to read any of it, unless
            # told to read what is there (nothing is written: the connection is read-only).
            db.execute("PRAGMA writable_schema = ON")
        with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
            found = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
            last_seq = int(found[0]) if found else 0
        with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
            counted = {str(signal): int(n) for signal, n in db.execute("SELECT signal, n FROM record_counts")}
        for sql in _SEQ_SOURCES:
            with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
                for seq, signal in db.execute(sql):
                    if isinstance(seq, int) and (signal is not None or seq not in known):
                        known[seq] = signal if isinstance(signal, str) else known.get(seq)
        columns = ", ".join(_COLUMNS)
        for seq in sorted(known):
            try:
                row = db.execute(f"SELECT {columns} FROM records WHERE seq = ?", (seq,)).fetchone()
            except sqlite3.Error:
                row = None
            if row is not None and _plausible(row):
                rows.append(tuple(row))
            else:
                lost[
                    known[seq] or (str(row[1]) if row is not None and isinstance(row[1], str) else "unknown")
                ] += 1
    finally:
        db.close()
    if counted:
        # The counts say how many rows there were, even those no b-tree can still point to.
        salvaged = Counter(str(row[1]) for row in rows)
        lost = Counter(
            {signal: n - salvaged[signal] for signal, n in counted.items() if n > salvaged[signal]}
        )
    return rows, lost, max(last_seq, max(known, default=0))


def _plausible(row: Sequence[object]) -> bool:
    """A row whose columns have the types the spool writes (a damaged page can read as other values)."""
    seq, signal, record_id, body, size, created, _owner, _lease, attempts = row
    return (
        isinstance(seq, int)
        and signal in ("traces", "logs")
        and isinstance(record_id, str)
        and isinstance(body, str)
        and size == len(body)
        and isinstance(created, int)
        and isinstance(attempts, int)
    )


def _insert_salvaged(db: sqlite3.Connection, rows: Sequence[tuple[object, ...]], last_seq: int) -> None:
    """Put salvaged rows in the fresh spool under their own seqs (what an outbox knows them by)."""
    sql = insert_sql("records", _COLUMNS)
    for chunk in statement_chunks(rows, rows_per_statement(sql)):
        db.execute(many_rows_sql(sql, len(chunk)), [value for row in chunk for value in row])
    _add_counts(db, Counter(str(row[1]) for row in rows))
    db.execute("DELETE FROM sqlite_sequence WHERE name = 'records'")
    db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?)", (last_seq,))


def _add_counts(db: sqlite3.Connection, changes: Counter[str]) -> None:
    """Add ``changes`` (by signal, negative for rows removed) to ``record_counts``."""
    for signal, change in changes.items():
        if (
            change
            and not db.execute(
                "UPDATE record_counts SET n = n + ? WHERE signal = ?", (change, signal)
            ).rowcount
        ):
            db.execute("INSERT INTO record_counts VALUES (?, ?)", (signal, change))


def _delete_counted(db: sqlite3.Connection, seqs: Sequence[int]) -> int:
    """Delete the records of ``seqs`` and take them off ``record_counts``; how many there were."""
    signals: Counter[str] = Counter()
    for chunk in statement_chunks(seqs, _SEQS_PER_STATEMENT):
        signals.update(
            str(row[0]) for row in db.execute(f"SELECT signal FROM records WHERE {_seqs_in(chunk)}", chunk)
        )
    deleted = _delete_records(db, seqs)
    _add_counts(db, Counter({signal: -number for signal, number in signals.items()}))
    return deleted
