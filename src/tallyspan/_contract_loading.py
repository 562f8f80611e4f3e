"""``tallyspan.load_contracts``: the contracts loaded as configured.

The contracts themselves (``tallyspan._contract``) read no environment and log nothing: this is where
the runtime gives them the file size limit of ``TALLYSPAN_CONTRACTS_MAX_BYTES`` and warns about a file
that holds no contracts. ``instrument()``, ``tallyspan doctor``, ``tallyspan check`` and ``tallyspan
export`` load through it, so a file means the same to each.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tallyspan._config import ENV_CONTRACTS_MAX_BYTES, resolve_contracts_max_bytes, warn_once
from tallyspan._contract._contract_files import MAX_FILE_BYTES

if TYPE_CHECKING:
    from tallyspan._contract._contracts import ContractSet

__all__ = ["load_contracts"]


def load_contracts(source: Any) -> ContractSet:
    """Load contracts from a file path (YAML or TOML), a mapping, a list, or a ``ContractSet``.

    A file is read within bounds (``tallyspan._contract._contract_files``: a regular UTF-8 file of at most
    ``TALLYSPAN_CONTRACTS_MAX_BYTES``, 1 MiB by default, nesting and size limited) and its patterns
    are checked before they are compiled (``tallyspan._contract._patterns``).

    Args:
        source: a ``str``/``PathLike`` path to ``.yaml``/``.yml``/``.toml``; a mapping in the file's
            form (``{"contracts": {...}, "default": ..., "match": [...]}``) or just ``{stage: contract}``;
            a list of ``Contract`` objects or mappings, each with a ``stage`` key (for mappings) or
            used in order as ``stage_0``...; or a ``ContractSet``.

    Returns:
        The validated, compiled ``ContractSet``.

    Raises:
        ContractError: naming the file, the stage, the field and (YAML) the line.
    """
    # Imported here, as instrument() always did: the models (pydantic, regex) load with the first contract,
    # and a build without them fails on this import only.
    from tallyspan._contract._contracts import load_contracts as contracts_from

    if not isinstance(source, (str, os.PathLike)):
        return contracts_from(source)  # no file: no limit to read, no file to warn about
    contracts = contracts_from(
        source,
        max_bytes=resolve_contracts_max_bytes(MAX_FILE_BYTES),
        limit_setting=ENV_CONTRACTS_MAX_BYTES,
    )
    if not (contracts.contracts or contracts.default or contracts.match):
        file = str(Path(source))
        warn_once(
            ("contracts.empty", file),
            "the contracts file %s holds no contracts: no output will be checked against one",
            file,
        )
    return contracts
