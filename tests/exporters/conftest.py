"""Fixtures of the exporter tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.otlp_faults import FaultyReceiver

from tallyspan._store._store_schema import connect


@pytest.fixture
def lock_holder(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A second connection to a migrated store, as ``tallyspan prune`` or a backup script would hold it."""
    connect(db_path).close()
    holder = sqlite3.connect(db_path, isolation_level=None)
    yield holder
    if holder.in_transaction:
        holder.execute("ROLLBACK")
    holder.close()


@pytest.fixture
def receiver() -> Iterator[FaultyReceiver]:
    """A real OTLP/HTTP receiver on 127.0.0.1 whose faults a test switches on."""
    backend = FaultyReceiver()
    yield backend
    backend.close()
