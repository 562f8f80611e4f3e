"""The contracts: what a stage's deliverable must look like, and reading them safely.

``_contracts`` (the pydantic models, ``ContractSet``, ``load_contracts``), ``_contract_files`` (a
contracts file read within bounds, errors that name the file, the stage and the field),
``_contract_yaml`` (the bounded YAML loader, imported only for a YAML file) and ``_patterns`` (patterns
checked before they are compiled, and searched under a time budget).

It may import the engine (``tallyspan._engine``: the taxonomy's languages, the repetition default, the
JSON Schema compiler) and the top's leaf modules (``_errors``, ``_selfstats``, ``_fork``, ``_version``,
``semconv``); never the ledger, the store or the runtime. The imports that still break this rule are
listed in docs/architecture.md ("Layout of the core").
"""
