"""The violation taxonomy of ARCHITECTURE.md: stable, machine-readable names and their failure classes."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

__all__ = [
    "FAILURE_CLASS_OF",
    "LEDGER_BALANCE_TYPES",
    "LEDGER_PROTOCOL_TYPES",
    "FailureClass",
    "ViolationType",
    "most_severe",
]


class FailureClass(str, Enum):
    """A family of failures; the order of declaration is the order of severity, worst first."""

    PROCESS_ERROR = "process_error"
    TIMEOUT = "timeout"
    SCHEDULER_STARVATION = "scheduler_starvation"
    CONTRACT_VIOLATION = "contract_violation"
    LANGUAGE_CORRUPTION = "language_corruption"
    LEDGER_DISCREPANCY = "ledger_discrepancy"

    def __str__(self) -> str:
        return self.value


class ViolationType(str, Enum):
    """One kind of violation; its failure class is ``FAILURE_CLASS_OF[type]``."""

    # contract_violation
    TOO_SHORT = "too_short"
    TOO_LONG = "too_long"
    MISSING_REQUIRED = "missing_required"
    FORBIDDEN_PRESENT = "forbidden_present"
    REFUSAL = "refusal"
    REASONING_LEAKED = "reasoning_leaked"
    UNEARNED_CLAIM = "unearned_claim"
    ANSWER_TO_OTHER_QUESTION = "answer_to_other_question"
    OFF_TOPIC = "off_topic"
    DEGENERATE_REPETITION = "degenerate_repetition"
    # language_corruption
    NOT_JAPANESE = "not_japanese"
    WRONG_LANGUAGE = "wrong_language"
    CHINESE_IN_JAPANESE = "chinese_in_japanese"
    BROKEN_LANGUAGE_MIX = "broken_language_mix"
    # the non-text classes
    TIMEOUT = "timeout"
    PROCESS_ERROR = "process_error"
    SCHEDULER_STARVATION = "scheduler_starvation"
    # ledger_discrepancy: the books do not balance
    UNLOGGED_CALL = "unlogged_call"
    UNLOGGED_FAILURE = "unlogged_failure"
    UNLOGGED_REFUSAL = "unlogged_refusal"
    PHANTOM_LOG = "phantom_log"
    MISMATCHED_RESULT = "mismatched_result"
    DUPLICATE_LOG = "duplicate_log"
    LEDGER_MISSING = "ledger_missing"
    # ledger_discrepancy: the logging protocol was broken, the books may still balance
    OUT_OF_ORDER_LOG = "out_of_order_log"
    SELF_LOGGED = "self_logged"
    MALFORMED_LOG = "malformed_log"

    def __str__(self) -> str:
        return self.value


#: Ledger discrepancies that make the books unbalanced.
LEDGER_BALANCE_TYPES: tuple[ViolationType, ...] = (
    ViolationType.UNLOGGED_CALL,
    ViolationType.UNLOGGED_FAILURE,
    ViolationType.UNLOGGED_REFUSAL,
    ViolationType.PHANTOM_LOG,
    ViolationType.MISMATCHED_RESULT,
    ViolationType.DUPLICATE_LOG,
    ViolationType.LEDGER_MISSING,
)
#: Ledger discrepancies that break the logging protocol but leave the balance alone.
LEDGER_PROTOCOL_TYPES: tuple[ViolationType, ...] = (
    ViolationType.OUT_OF_ORDER_LOG,
    ViolationType.SELF_LOGGED,
    ViolationType.MALFORMED_LOG,
)

_CLASS_MEMBERS: dict[FailureClass, tuple[ViolationType, ...]] = {
    FailureClass.CONTRACT_VIOLATION: (
        ViolationType.TOO_SHORT,
        ViolationType.TOO_LONG,
        ViolationType.MISSING_REQUIRED,
        ViolationType.FORBIDDEN_PRESENT,
        ViolationType.REFUSAL,
        ViolationType.REASONING_LEAKED,
        ViolationType.UNEARNED_CLAIM,
        ViolationType.ANSWER_TO_OTHER_QUESTION,
        ViolationType.OFF_TOPIC,
        ViolationType.DEGENERATE_REPETITION,
    ),
    FailureClass.LANGUAGE_CORRUPTION: (
        ViolationType.NOT_JAPANESE,
        ViolationType.WRONG_LANGUAGE,
        ViolationType.CHINESE_IN_JAPANESE,
        ViolationType.BROKEN_LANGUAGE_MIX,
    ),
    FailureClass.TIMEOUT: (ViolationType.TIMEOUT,),
    FailureClass.PROCESS_ERROR: (ViolationType.PROCESS_ERROR,),
    FailureClass.SCHEDULER_STARVATION: (ViolationType.SCHEDULER_STARVATION,),
    FailureClass.LEDGER_DISCREPANCY: (*LEDGER_BALANCE_TYPES, *LEDGER_PROTOCOL_TYPES),
}

#: The failure class of every violation type.
FAILURE_CLASS_OF: dict[ViolationType, FailureClass] = {
    member: failure_class for failure_class, members in _CLASS_MEMBERS.items() for member in members
}

_SEVERITY = {failure_class: rank for rank, failure_class in enumerate(FailureClass)}


def most_severe(classes: Iterable[FailureClass]) -> FailureClass | None:
    """Return the most severe of ``classes`` (declaration order of ``FailureClass``), or None."""
    return min(classes, key=_SEVERITY.__getitem__, default=None)
