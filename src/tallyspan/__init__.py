"""tallyspan: OpenTelemetry instrumentation for LLM agents that makes silent failures visible.

Usage::

    import tallyspan
    tallyspan.instrument(contracts="contracts.yaml")   # the one line

    with tallyspan.stage("weekly_report"):
        client.chat.completions.create(...)            # a "chat" span, checked against the contract
"""

from tallyspan import ledger
from tallyspan._checks import CheckResult, Violation, check
from tallyspan._contracts import Contract, ContractSet, load_contracts
from tallyspan._errors import ConfigError, ContractError, Rejected, TallyspanError
from tallyspan._instrument import DEFAULT_STORE, Instrumentation, instrument, instrumentation, uninstrument
from tallyspan._selfstats import reset_stats, stats
from tallyspan._stage import StageInfo, current_stage, stage
from tallyspan._taxonomy import FAILURE_CLASS_OF, FailureClass, ViolationType
from tallyspan._tool import run, tool
from tallyspan._version import __version__ as __version__

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


for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and isinstance(_obj, type | type(instrument)):
        _obj.__module__ = "tallyspan"
del _name, _obj
