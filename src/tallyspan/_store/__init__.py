"""The embedded SQLite store: its schema and migrations, and every read of it.

``_store_schema`` (``connect()``, the tables, the numbered idempotent migrations), ``_store_queries``
(the read side: plain dataclasses for the ``tallyspan`` command and for scripts) and ``_store_ledger``
(the ledger as the store holds it, re-exported by ``_store_queries``). The one writer is a plugin
(``tallyspan_exporters._writer``), which takes the schema through ``tallyspan.plugin``.

It may import the rooms below it (``tallyspan._books``, ``tallyspan._engine``) and the top's leaf
modules (``_errors``, ``_selfstats``, ``_fork``, ``_version``, ``semconv``); never the contracts or the
runtime. The imports that still break this rule are listed in docs/architecture.md ("Layout of the
core").
"""
