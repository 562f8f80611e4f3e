"""The check engine: one model output against one contract, as pure functions of plain data.

``_checks`` (``check()`` and its rules) and the modules it calls: the language checks (``_language``,
``_scripts``, ``_hanzi_table`` and the optional C module ``_scan``), refusals, reasoning leaks and claims
(``_refusal``, ``_literals``), relevance (``_relevance``), repetition (``_repetition``), JSON Schema
(``_jsonschema``), and the violation taxonomy (``_taxonomy``). The CLI, a pytest test and the checks
processor call the same code.

It reads no environment and knows no OpenTelemetry and no configuration (whether to use the C scans
it asks once, at import, of the leaf ``tallyspan._extensions``). It may import the standard library,
``regex``, ``jsonschema`` and, of the core, only itself, the contracts below it (``tallyspan._contract``:
the ``Contract`` it checks against, the pattern budget, the languages a contract may require) and the
top's leaf modules, which import nothing of the core but each other (``_errors``, ``_selfstats``,
``_fork``, ``_version``, ``semconv``, ``_extensions``). The ledger, the store and the runtime may import
it. ``tests/core/test_layers.py`` holds the rule (docs/architecture.md, "Layout of the core").
"""
