"""The embedded SQLite store: ``connect()``, the schema and its numbered, idempotent migrations.

The store lives in the core, not in ``tallyspan_exporters``, because the ``tallyspan`` command (core)
reads it and the core never imports the plugin packages; the exporter (a plugin) imports it from here.

Schema (every id is lower-case hex: trace ids 32 characters, span ids 16; times are Unix nanoseconds;
``*_types`` and ``attributes`` columns hold JSON)::

    table                   one row per                          columns
    ----------------------  -----------------------------------  ---------------------------------------
    runs                    run span: invoke_agent,              trace_id, span_id, name, operation,
                            invoke_workflow, or a local root     agent_name, run_name, start/end_unix_nano,
                                                                 status_code
    spans                   exported span                        trace_id, span_id, parent_span_id, name,
                                                                 kind, operation, provider, request_model,
                                                                 response_model, stage, start/end_unix_nano,
                                                                 duration_ns, status_code,
                                                                 status_description, error_type,
                                                                 input_tokens, output_tokens,
                                                                 violation_count, violation_types,
                                                                 failure_class, service_name, attributes
    violations              ``tallyspan.violation`` event (or,   trace_id, span_id, stage, type,
                            without events, entry of             failure_class, detail
                            ``tallyspan.violation_types``)
    ledger_entries          entry of either side of the books    trace_id, run_span_id, side
                            (written by the ledger sink)         (observed|claimed), seq, call_id,
                                                                 tool_name, outcome, summary, span_id,
                                                                 time_unix_nano
    ledger_reconciliations  reconciled run (ledger sink)         trace_id, run_span_id, run_name, balanced,
                                                                 protocol_ok, discrepancy_types (JSON
                                                                 array), discrepancies (JSON array of
                                                                 {type, call_id, detail}), observed_count,
                                                                 claimed_count, time_unix_nano
    self_stats              counter of ``tallyspan.stats()``     pid, started_unix_nano, service_name, key,
                            of one writing process (its latest   value, time_unix_nano
                            value)
    _tallyspan_migrations   applied migration                    name, applied_at

The two ledger tables have exactly the columns above (no surrogate key; SQLite's rowid keeps the order
of insertion) because the ledger sink of ``tallyspan_exporters`` inserts into them by column name. A
run's balance is stored once, in ``ledger_reconciliations`` (the ledger's own record); ``runs`` says
only that the run happened (``m002`` moved the copies ``runs`` kept there).

``spans.attributes`` holds the attributes exactly as exported, so message content is there only when
the user opted in to capturing it. Re-exporting a span replaces its rows (primary key trace/span id).

Migrations are functions ``mNNN_what(db)`` decorated with ``@migration``; ``connect()`` applies those
not yet recorded in ``_tallyspan_migrations``, each in its own transaction, so it is safe to call on
every open, from several processes at once. Never edit an applied migration: add the next one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    # sqlite3 (about 2 ms) loads with the first connection, on the writer's thread: an instrumentor
    # imports this module (through tallyspan.plugin) and never opens a store.
    import sqlite3

__all__ = [
    "BUSY_TIMEOUT_MS",
    "LEDGER_ENTRIES",
    "LEDGER_RECONCILIATIONS",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "PAGE_SIZE",
    "RUNS",
    "SELF_STATS",
    "SPANS",
    "VIOLATIONS",
    "applied_migrations",
    "connect",
    "is_locked",
    "migrate",
    "migration",
]

RUNS: Final = "runs"
SPANS: Final = "spans"
VIOLATIONS: Final = "violations"
LEDGER_ENTRIES: Final = "ledger_entries"
LEDGER_RECONCILIATIONS: Final = "ledger_reconciliations"
SELF_STATS: Final = "self_stats"
MIGRATIONS_TABLE: Final = "_tallyspan_migrations"

BUSY_TIMEOUT_MS: Final = 5000
"""How long a writer waits for another process's transaction before giving up."""
PAGE_SIZE: Final = 16384
"""The page size of a new store, in bytes (SQLite's default is 4096)."""
_SQLITE_BUSY: Final = 5  # primary result codes: another connection holds the lock
_SQLITE_LOCKED: Final = 6


def is_locked(error: sqlite3.OperationalError) -> bool:
    """True when ``error`` says another connection holds the lock (a wait may succeed), not a broken store."""
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(error) or "busy" in str(error)


Migration = Callable[["sqlite3.Connection"], None]

MIGRATIONS: list[Migration] = []
"""Every migration, in the order they are applied."""


def migration(function: Migration) -> Migration:
    """Register ``function`` as the next migration; its ``__name__`` is recorded once applied."""
    MIGRATIONS.append(function)
    return function


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating it and its folder if needed) the store at ``path``, migrated to the latest schema.

    The connection is in autocommit mode (use ``with db:`` or ``BEGIN`` for transactions), WAL
    journaling, pages of ``PAGE_SIZE`` bytes in a new file, a busy timeout of ``BUSY_TIMEOUT_MS``,
    rows as ``sqlite3.Row``, and may be used from several threads as long as the caller serialises
    access.

    Args:
        path: the database file, or ``":memory:"``.

    Returns:
        The open connection.

    Raises:
        sqlite3.Error: the file cannot be opened or is not a database; OSError: the folder cannot be made.
    """
    import sqlite3

    name = os.fspath(path)
    if name != ":memory:":
        Path(name).parent.mkdir(parents=True, exist_ok=True)
    # The writers run each statement in a few multi-row shapes (tallyspan_exporters Rows.write): room
    # for all of them in the statement cache, which SQLite would otherwise parse again.
    db = sqlite3.connect(
        name,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
        cached_statements=256,
    )
    try:
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Only a new, empty file takes it, so it must come before WAL (which writes the header); an
        # existing store keeps its page size. A chat span with captured content is a ~4 KB row: on
        # 4 KiB pages each spills into an overflow page, on 16 KiB pages four share one, which about
        # halves the writer's cost of inserting and committing it.
        db.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        db.execute("PRAGMA journal_mode = WAL")
        # WAL plus NORMAL is durable against application crashes, and much faster than FULL.
        db.execute("PRAGMA synchronous = NORMAL")
        migrate(db)
    except BaseException:
        db.close()
        raise
    return db


def applied_migrations(db: sqlite3.Connection) -> list[str]:
    """Return the names of the migrations applied to ``db``, in the order they were applied."""
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    return [row[0] for row in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY rowid")]


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet recorded in ``db``; return the names of those applied now."""
    done = set(applied_migrations(db))
    applied: list[str] = []
    for function in MIGRATIONS:
        if function.__name__ in done:
            continue
        # IMMEDIATE takes the write lock first, so two processes cannot apply the same migration.
        db.execute("BEGIN IMMEDIATE")
        try:
            recorded = db.execute(
                f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = ?", (function.__name__,)
            ).fetchone()
            if recorded is None:
                function(db)
                db.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES (?, ?)",
                    (function.__name__, datetime.now(timezone.utc).isoformat()),
                )
                applied.append(function.__name__)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return applied


@migration
def m001_initial(db: sqlite3.Connection) -> None:
    """Runs, spans, violations and the two sides of the ledger."""
    db.execute(
        f"""CREATE TABLE {RUNS} (
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            name TEXT NOT NULL,
            operation TEXT,
            agent_name TEXT,
            run_name TEXT,
            start_unix_nano INTEGER,
            end_unix_nano INTEGER,
            status_code TEXT NOT NULL,
            ledger_balanced INTEGER,
            ledger_protocol_ok INTEGER,
            ledger_discrepancy_types TEXT NOT NULL DEFAULT '[]',
            PRIMARY KEY (trace_id, span_id)
        )"""
    )
    db.execute(
        f"""CREATE TABLE {SPANS} (
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            parent_span_id TEXT,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            operation TEXT,
            provider TEXT,
            request_model TEXT,
            response_model TEXT,
            stage TEXT,
            start_unix_nano INTEGER,
            end_unix_nano INTEGER,
            duration_ns INTEGER,
            status_code TEXT NOT NULL,
            status_description TEXT,
            error_type TEXT,
            input_tokens INTEGER,
            output_tokens INTEGER,
            violation_count INTEGER NOT NULL DEFAULT 0,
            violation_types TEXT NOT NULL DEFAULT '[]',
            failure_class TEXT,
            service_name TEXT,
            attributes TEXT NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (trace_id, span_id)
        )"""
    )
    db.execute(f"CREATE INDEX {SPANS}_start ON {SPANS} (start_unix_nano)")
    db.execute(f"CREATE INDEX {SPANS}_stage ON {SPANS} (stage)")
    db.execute(
        f"""CREATE TABLE {VIOLATIONS} (
            id INTEGER PRIMARY KEY,
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            stage TEXT,
            type TEXT NOT NULL,
            failure_class TEXT,
            detail TEXT
        )"""
    )
    db.execute(f"CREATE INDEX {VIOLATIONS}_span ON {VIOLATIONS} (trace_id, span_id)")
    db.execute(
        f"""CREATE TABLE {LEDGER_ENTRIES} (
            trace_id TEXT,
            run_span_id TEXT,
            side TEXT,
            seq INTEGER,
            call_id TEXT,
            tool_name TEXT,
            outcome TEXT,
            summary TEXT,
            span_id TEXT,
            time_unix_nano INTEGER
        )"""
    )
    db.execute(f"CREATE INDEX {LEDGER_ENTRIES}_run ON {LEDGER_ENTRIES} (trace_id, run_span_id)")
    db.execute(
        f"""CREATE TABLE {LEDGER_RECONCILIATIONS} (
            trace_id TEXT,
            run_span_id TEXT,
            run_name TEXT,
            balanced INTEGER,
            protocol_ok INTEGER,
            discrepancy_types TEXT,
            discrepancies TEXT,
            observed_count INTEGER,
            claimed_count INTEGER,
            time_unix_nano INTEGER
        )"""
    )
    db.execute(
        f"CREATE INDEX {LEDGER_RECONCILIATIONS}_run ON {LEDGER_RECONCILIATIONS} (trace_id, run_span_id)"
    )


_RUN_COLUMNS_SINCE_M002: Final = (
    "trace_id, span_id, name, operation, agent_name, run_name, start_unix_nano, end_unix_nano, status_code"
)


@migration
def m002_run_balance_only_in_reconciliations(db: sqlite3.Connection) -> None:
    """A run's balance is stored once: ``runs`` loses its ``ledger_*`` copies of the reconciliation.

    A run whose balance only its span carried (a store written without the ledger sink) keeps it: it
    gets a reconciliation row, with no discrepancies or counts (the span never carried them).
    """
    db.execute(
        f"""INSERT INTO {LEDGER_RECONCILIATIONS} (trace_id, run_span_id, run_name, balanced, protocol_ok,
                discrepancy_types, discrepancies, observed_count, claimed_count, time_unix_nano)
            SELECT trace_id, span_id, COALESCE(run_name, agent_name, name), ledger_balanced,
                   ledger_protocol_ok, ledger_discrepancy_types, '[]', NULL, NULL,
                   COALESCE(end_unix_nano, start_unix_nano)
            FROM {RUNS} AS run
            WHERE (ledger_balanced IS NOT NULL OR ledger_protocol_ok IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM {LEDGER_RECONCILIATIONS} AS done
                              WHERE done.trace_id = run.trace_id AND done.run_span_id = run.span_id)
            ORDER BY start_unix_nano"""
    )
    # Rebuilt rather than ALTER TABLE ... DROP COLUMN, which needs SQLite 3.35 (older Pythons ship older).
    db.execute(
        f"""CREATE TABLE {RUNS}_m002 (
            trace_id TEXT NOT NULL, span_id TEXT NOT NULL, name TEXT NOT NULL, operation TEXT,
            agent_name TEXT, run_name TEXT, start_unix_nano INTEGER, end_unix_nano INTEGER,
            status_code TEXT NOT NULL, PRIMARY KEY (trace_id, span_id)
        )"""
    )
    db.execute(
        f"INSERT INTO {RUNS}_m002 ({_RUN_COLUMNS_SINCE_M002}) SELECT {_RUN_COLUMNS_SINCE_M002} FROM {RUNS}"
    )
    db.execute(f"DROP TABLE {RUNS}")
    db.execute(f"ALTER TABLE {RUNS}_m002 RENAME TO {RUNS}")


@migration
def m003_self_stats(db: sqlite3.Connection) -> None:
    """The drop and error counters of each process that writes the store (``tallyspan.stats()``), so
    ``tallyspan doctor`` shows them after the process is gone. One row per process and counter."""
    db.execute(
        f"""CREATE TABLE {SELF_STATS} (
            pid INTEGER NOT NULL,
            started_unix_nano INTEGER NOT NULL,
            service_name TEXT,
            key TEXT NOT NULL,
            value INTEGER NOT NULL,
            time_unix_nano INTEGER NOT NULL,
            PRIMARY KEY (pid, started_unix_nano, key)
        )"""
    )
    db.execute(f"CREATE INDEX {SELF_STATS}_time ON {SELF_STATS} (time_unix_nano)")
