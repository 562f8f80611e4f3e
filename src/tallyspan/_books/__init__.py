"""The double-entry ledger: what the agent did (observed) against what it says it did (claimed).

``_ledger`` (the entries and their reconciliation: pure functions over dataclasses), ``_ledger_api``
(``LedgerSink`` and the records the sinks receive: the plugin boundary) and ``_runs`` (what an agent run
is: the one rule the ledger, the store and the CLI share). Its public face is ``tallyspan.ledger``, whose
``claim()`` reads the running state and so lives in the runtime (``tallyspan._claim``).

It may import the engine (``tallyspan._engine``: the ledger's violation types) and the top's leaf
modules (``_errors``, ``_selfstats``, ``_fork``, ``_version``, ``semconv``, ``_extensions``); never the
contracts, the store or the runtime. ``tests/core/test_layers.py`` holds the rule (docs/architecture.md,
"Layout of the core").
"""
