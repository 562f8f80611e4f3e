"""The contracts: what a stage's deliverable must look like, and reading them safely.

``_contracts`` (the pydantic models, ``ContractSet``, ``load_contracts``), ``_contract_files`` (a
contracts file read within bounds, errors that name the file, the stage and the field),
``_contract_yaml`` (the bounded YAML loader, imported only for a YAML file) and ``_patterns`` (patterns
checked before they are compiled, and searched under a time budget).

The bottom room of the core: it owns its vocabulary (the languages a contract may require, the default
repetition share, the JSON Schema compiler), reads no environment (the file limit comes from its
caller: ``tallyspan.load_contracts``, in the runtime) and imports only itself and the top's leaf modules
(``_errors``, ``_selfstats``, ``_fork``, ``_version``, ``semconv``, ``_extensions``); never the engine,
the ledger, the store or the runtime. Inside, loading goes one way: ``_contracts`` imports
``_contract_files`` and ``_contract_yaml``, ``_contract_yaml`` imports ``_contract_files``.
``tests/core/test_layers.py`` holds the rule (docs/architecture.md, "Layout of the core").
"""
