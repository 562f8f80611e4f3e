"""The embedded SQLite store as an OpenTelemetry exporter (the schema and ``connect`` live in the core)."""

from __future__ import annotations

from tallyspan._store_schema import MIGRATIONS, connect, migration

__all__ = ["MIGRATIONS", "connect", "migration"]
