"""The embedded SQLite store: its schema and migrations, and every read of it.

``_store_schema`` (``connect()``, the tables, the numbered idempotent migrations), ``_store_queries``
(the read side: plain dataclasses for the ``tallyspan`` command and for scripts), ``_store_ledger``
(the ledger as the store holds it, re-exported by ``_store_queries``) and ``_store_traces`` (whole
traces as read back, which the dataset exports read from the store or from an OTLP file). The one
writer is a plugin (``tallyspan_exporters._writer``), which takes the schema through ``tallyspan.plugin``.

It may import the rooms below it (``tallyspan._books``, ``tallyspan._engine``) and the top's leaf
modules (``_errors``, ``_selfstats``, ``_fork``, ``_version``, ``semconv``, ``_extensions``); never the
contracts or the runtime. ``tests/core/test_layers.py`` holds the rule (docs/architecture.md, "Layout
of the core").
"""
