"""tallyspan: OpenTelemetry instrumentation for LLM agents that makes silent failures visible.

Usage::

    import tallyspan
    tallyspan.instrument(contracts="contracts.yaml")   # the one line

    with tallyspan.stage("weekly_report"):
        client.chat.completions.create(...)            # a "chat" span, checked against the contract
"""

from typing import TYPE_CHECKING, Any

from tallyspan import ledger
from tallyspan._errors import ConfigError, ContractError, Rejected, TallyspanError
from tallyspan._instrument import DEFAULT_STORE, Instrumentation, instrument, instrumentation, uninstrument
from tallyspan._selfstats import reset_stats, stats
from tallyspan._stage import StageInfo, current_stage, stage
from tallyspan._taxonomy import FAILURE_CLASS_OF, FailureClass, ViolationType
from tallyspan._tool import run, tool
from tallyspan._version import __version__ as __version__

if TYPE_CHECKING:
    from tallyspan._checks import CheckResult, Violation, check
    from tallyspan._contracts import Contract, ContractSet, load_contracts

# The check engine and the contracts (regex, YAML, jsonschema, pydantic models) load on first use, so
# an instrumentor alone, or an app that never loads a contract, does not pay for their import.
_ENGINE, _CONTRACTS = f"{__name__}._checks", f"{__name__}._contracts"
_LAZY = {
    "CheckResult": _ENGINE,
    "Violation": _ENGINE,
    "check": _ENGINE,
    "Contract": _CONTRACTS,
    "ContractSet": _CONTRACTS,
    "load_contracts": _CONTRACTS,
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
    if hasattr(obj, "__module__") and isinstance(obj, type | type(instrument)):
        obj.__module__ = "tallyspan"
    return obj


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tallyspan' has no attribute {name!r}")
    import importlib

    for lazy_name, module_name in _LAZY.items():  # one module gives several names: bind them all
        if module_name == _LAZY[name]:
            globals()[lazy_name] = _as_ours(getattr(importlib.import_module(module_name), lazy_name))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


for _name in __all__:
    if _name not in _LAZY:
        _as_ours(globals()[_name])
del _name
