"""The double-entry ledger: what the agent did (observed) against what it says it did (claimed).

Usage::

    from tallyspan import ledger

    result = ledger.reconcile(
        [ledger.Observed("c1", "book_flight", "succeeded", seq=0)],
        [ledger.Claim("c1", "book_flight", "succeeded", "booked HAT001", seq=1)],
    )
    assert result.balanced and result.protocol_ok

    ledger.claim("c1", "book_flight", "succeeded")   # for agents that log in code, not via log_action

The rules are in :mod:`tallyspan._books._ledger` and ARCHITECTURE.md ("Double-entry ledger").
"""

from tallyspan._books._ledger import (
    BALANCE_TYPES,
    DEFAULT_LOG_TOOL,
    OUTCOMES,
    PROTOCOL_TYPES,
    Claim,
    Discrepancy,
    LogToolSpec,
    Observed,
    Reconciliation,
    normalize_outcome,
    parse_log_arguments,
    reconcile,
)
from tallyspan._books._ledger_api import LedgerEntry, LedgerRecord, LedgerSink
from tallyspan._claim import claim

__all__ = [
    "BALANCE_TYPES",
    "DEFAULT_LOG_TOOL",
    "OUTCOMES",
    "PROTOCOL_TYPES",
    "Claim",
    "Discrepancy",
    "LedgerEntry",
    "LedgerRecord",
    "LedgerSink",
    "LogToolSpec",
    "Observed",
    "Reconciliation",
    "claim",
    "normalize_outcome",
    "parse_log_arguments",
    "reconcile",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = __name__
del _name, _obj
