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
whose owner released it, let its lease run out, or died (a process id on this host that no longer
exists) is taken over by the next process that claims, so nothing is sent by two live processes and
nothing waits on a dead one.

Bounded: the records together at most ``max_bytes`` (the oldest beyond it evicted, counted in
``dropped.otlp.<signal>.spool_full``), none older than ``max_age_s`` (``...spool_expired``). Every
failure (a locked, full or broken file) is logged once and counted, and reported to the caller as a
value; nothing here raises.
"""

from __future__ import annotations

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

from tallyspan.plugin import count, is_locked, renew_lock_after_fork, swallowed
from tallyspan_exporters._writer import (
    insert_sql,
    many_rows_sql,
    rows_per_statement,
    statement_chunks,
    transaction,
)

__all__ = ["LEASE_S", "Spool", "SpooledRow", "shared_spool"]

_logger = logging.getLogger(__name__)

T = TypeVar("T")

LEASE_S: Final = 30.0
"""How long a claimed or written row stays its owner's without a renewal (the owner renews every 10 s)."""
_DEAD_OWNER_SCAN_S: Final = 5.0
"""How often owners of other processes are checked for being alive."""
_BUSY_TIMEOUT_MS: Final = 1000
"""How long a statement waits for another process's transaction: the spool's are all short."""

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
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_by_signal ON records (signal, seq);
CREATE INDEX IF NOT EXISTS records_by_created ON records (created_unix_nano, signal);
CREATE INDEX IF NOT EXISTS records_by_size ON records (size);
CREATE INDEX IF NOT EXISTS records_by_owner ON records (owner);
"""
# Each append evicts what expired and sums the sizes, and the owners are looked up every few seconds:
# without the last three indexes each read every row, its body included (the columns lie behind it),
# and an append's cost grew with the spool (bench/bench_spool.py: 5.5 ms for 17 records at 2,000 rows,
# 61 ms at 18,000, a full spool; now 0.4 and 0.9 ms), most of all during the outages the spool is for.


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
        self._next_dead_scan = 0.0
        self._users = 1  # the outboxes sharing it (``shared_spool``): the last one releases and closes

    # --- what the sender uses --------------------------------------------------------------------------

    def append(self, signal: str, records: Sequence[tuple[str, str]]) -> list[int] | None:
        """Add ``(record_id, body)`` records, owned by this process; their seqs, or None on failure.

        Makes room first: records past the age limit, then the oldest beyond the size limit, are
        evicted and counted. A record larger than the whole spool is not kept (counted, seq 0).
        """
        if not records:
            return []
        now_ns = time.time_ns()
        lease = time.time() + LEASE_S

        def write(db: sqlite3.Connection) -> list[int]:
            self._evict_expired(db, now_ns)
            incoming = sum(len(body) for _, body in records if len(body) <= self._max_bytes)
            self._evict_for(db, incoming)
            kept = []
            for record_id, body in records:
                if len(body) > self._max_bytes:
                    count(f"dropped.otlp.{signal}.spool_full")
                else:
                    kept.append((signal, record_id, body, len(body), now_ns, self._owner, lease))
            written = iter(_insert_records(db, kept))
            return [0 if len(body) > self._max_bytes else next(written) for _, body in records]

        return self._transaction("append", write)

    def claim(self, signal: str, limit: int) -> list[SpooledRow] | None:
        """Take up to ``limit`` of the oldest rows of ``signal`` this process may send (its own, released,
        expired, or a dead process's), for a lease; None on failure."""
        now = time.time()
        scan = now >= self._next_dead_scan

        def take(db: sqlite3.Connection) -> list[SpooledRow]:
            if scan:
                self._release_dead_owners(db)
            rows = db.execute(
                "SELECT seq, record_id, body FROM records WHERE signal = ?"
                " AND (owner = ? OR owner IS NULL OR lease_until < ?) ORDER BY seq LIMIT ?",
                (signal, self._owner, now, max(1, limit)),
            ).fetchall()
            for chunk in statement_chunks([int(row[0]) for row in rows], _SEQS_PER_STATEMENT):
                db.execute(
                    f"UPDATE records SET owner = ?, lease_until = ?, attempts = attempts + 1 WHERE {_seqs_in(chunk)}",
                    (self._owner, now + LEASE_S, *chunk),
                )
            return [SpooledRow(int(row[0]), str(row[1]), str(row[2])) for row in rows]

        taken = self._transaction("claim", take)
        if scan and taken is not None:
            self._next_dead_scan = now + _DEAD_OWNER_SCAN_S
        return taken

    def delete(self, seqs: Iterable[int]) -> bool:
        """Remove rows the backend accepted (or that can never be sent); False on failure."""
        keys = [seq for seq in seqs if seq]
        if not keys:
            return True
        return self._transaction("delete", lambda db: _delete_records(db, keys)) is not None

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
                "UPDATE records SET owner = NULL, lease_until = NULL WHERE owner = ?", (self._owner,)
            ),
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
                count(f"dropped.otlp.{signal}.spool_expired", number)
            db.execute("DELETE FROM records WHERE created_unix_nano < ?", (cutoff,))

    def _evict_for(self, db: sqlite3.Connection, incoming: int) -> None:
        """Evict the oldest records until ``incoming`` more bytes fit under the size limit."""
        total = int(db.execute("SELECT COALESCE(SUM(size), 0) FROM records").fetchone()[0])
        excess = total + incoming - self._max_bytes
        if excess <= 0:
            return
        evicted: list[int] = []
        for seq, size, signal in db.execute("SELECT seq, size, signal FROM records ORDER BY seq"):
            if excess <= 0:
                break
            evicted.append(int(seq))
            excess -= int(size)
            count(f"dropped.otlp.{signal}.spool_full")
        _delete_records(db, evicted)

    def _release_dead_owners(self, db: sqlite3.Connection) -> None:
        owners = [
            str(row[0])
            for row in db.execute(
                "SELECT DISTINCT owner FROM records WHERE owner IS NOT NULL AND owner != ?", (self._owner,)
            )
        ]
        dead = [(owner,) for owner in owners if _is_dead(owner, self._host)]
        db.executemany("UPDATE records SET owner = NULL, lease_until = NULL WHERE owner = ?", dead)

    # --- the connection ---------------------------------------------------------------------------------

    def _transaction(self, operation: str, work: Callable[[sqlite3.Connection], T]) -> T | None:
        with suppress_instrumentation(), self._lock:
            if self._closed:
                return None
            self._adopt_process()
            try:
                # IMMEDIATE: take the write lock first, so a claim cannot race another process's claim.
                with transaction(self._db or self._open(), "BEGIN IMMEDIATE") as db:
                    result = work(db)
            except sqlite3.OperationalError as error:
                if is_locked(error):
                    swallowed(
                        _logger,
                        "spool.locked",
                        f"the tallyspan spool at {self.path} is locked by another connection; its records "
                        "wait and are tried again",
                    )
                    return None
                self._broken(operation)
                return None
            except Exception:  # the spool must never break the app: report, reopen next time
                self._broken(operation)
                return None
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
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _broken(self, operation: str) -> None:
        swallowed(_logger, f"spool.{operation}", f"the tallyspan spool at {self.path} failed ({operation})")
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
