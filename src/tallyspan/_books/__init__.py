"""The double-entry ledger: what the agent did (observed) against what it says it did (claimed).

``_ledger`` (the entries and their reconciliation: pure functions over dataclasses), ``_ledger_api``
(``claim()``, ``LedgerSink`` and the records the sinks receive: the plugin boundary) and ``_runs`` (what
an agent run is: the one rule the ledger, the store and the CLI share). Its public face is
``tallyspan.ledger``.

It may import the engine (``tallyspan._engine``: the ledger's violation types) and the top's leaf
modules (``_errors``, ``_selfstats``, ``_fork``, ``_version``, ``semconv``); never the contracts, the
store or the runtime. The imports that still break this rule are listed in docs/architecture.md
("Layout of the core").
"""
