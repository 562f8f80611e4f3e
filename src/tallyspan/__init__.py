"""tallyspan: OpenTelemetry instrumentation for LLM agents that makes silent failures visible.

Usage::

    import tallyspan
    tallyspan.instrument(contracts="contracts.yaml")   # the one line

    with tallyspan.stage("weekly_report"):
        client.chat.completions.create(...)            # a "chat" span, checked against the contract
"""

from types import FunctionType
from typing import TYPE_CHECKING, Any

from tallyspan._engine._taxonomy import FAILURE_CLASS_OF, FailureClass, ViolationType
from tallyspan._errors import ConfigError, ContractError, Rejected, TallyspanError
from tallyspan._selfstats import reset_stats, stats
from tallyspan._stage import StageInfo, current_stage, stage
from tallyspan._version import __version__ as __version__

if TYPE_CHECKING:
    from tallyspan import ledger
    from tallyspan._contract._contracts import Contract, ContractSet
    from tallyspan._contract_loading import load_contracts
    from tallyspan._engine._checks import CheckResult, Violation, check
    from tallyspan._instrument import (
        DEFAULT_STORE,
        Instrumentation,
        instrument,
        instrumentation,
        uninstrument,
    )
    from tallyspan._tool import run, tool

# Loaded on first use, so that what needs only a part of the core does not pay for the rest: an
# instrumentor (which imports tallyspan.semconv and tallyspan.plugin) never loads the wiring of
# instrument(), the ledger or the tool decorator; the check engine and the contracts (regex, YAML,
# jsonschema, pydantic models) load with the first contract or check.
_ENGINE, _CONTRACTS = f"{__name__}._engine._checks", f"{__name__}._contract._contracts"
_INSTRUMENT, _TOOL = f"{__name__}._instrument", f"{__name__}._tool"
_LAZY = {
    "CheckResult": _ENGINE,
    "Violation": _ENGINE,
    "check": _ENGINE,
    "Contract": _CONTRACTS,
    "ContractSet": _CONTRACTS,
    "load_contracts": f"{__name__}._contract_loading",  # the contracts with the file limit of the environment
    "DEFAULT_STORE": _INSTRUMENT,
    "Instrumentation": _INSTRUMENT,
    "instrument": _INSTRUMENT,
    "instrumentation": _INSTRUMENT,
    "uninstrument": _INSTRUMENT,
    "run": _TOOL,
    "tool": _TOOL,
    "ledger": f"{__name__}.ledger",  # the public submodule itself
}

__all__ = [
    "DEFAULT_STORE",
    "FAILURE_CLASS_OF",
    "CheckResult",
    "ConfigError",
    "Contract",
    "ContractError",
    "ContractSet",
    "FailureClass",
    "Instrumentation",
    "Rejected",
    "StageInfo",
    "TallyspanError",
    "Violation",
    "ViolationType",
    "check",
    "current_stage",
    "instrument",
    "instrumentation",
    "ledger",
    "load_contracts",
    "reset_stats",
    "run",
    "stage",
    "stats",
    "tool",
    "uninstrument",
]


def _as_ours(obj: Any) -> Any:
    if isinstance(obj, type | FunctionType):
        obj.__module__ = "tallyspan"
    return obj


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tallyspan' has no attribute {name!r}")
    import importlib

    module_name = _LAZY[name]
    module = importlib.import_module(module_name)
    if module_name == f"{__name__}.{name}":  # a submodule: importing it bound it here already
        return module
    for lazy_name, lazy_module in _LAZY.items():  # one module gives several names: bind them all
        if lazy_module == module_name:
            globals()[lazy_name] = _as_ours(getattr(module, lazy_name))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


for _name in __all__:
    if _name not in _LAZY:
        _as_ours(globals()[_name])
del _name
