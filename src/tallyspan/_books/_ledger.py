"""The double-entry ledger model and its reconciliation: pure functions over plain dataclasses.

Nothing here knows OpenTelemetry, so the ledger processor, the CLI and a pytest test run the same code.

The books have two columns. ``Observed`` is what the instrumentation saw (every ordinary tool
execution); ``Claim`` is what the agent logged about its own actions (the log tool, ``log_action`` by
default, or ``tallyspan.ledger.claim()``). ``seq`` is the position of the entry in the run, counted
over both columns together, so "the claim came right after its call" can be checked.

The rules (ARCHITECTURE.md, "Double-entry ledger"), applied by :func:`reconcile`:

* Pairing is by call id, never by time. A claim without a call id pairs with the earliest unpaired
  observed call of the tool it names. When a run reuses a call id (real agents do), a claim pairs with
  the earliest call of that id not yet paired. Claims with an id are paired first, so an id-less claim never
  takes a call that another claim names.
* Each observed call is matched, or unlogged: ``unlogged_call`` / ``unlogged_failure`` /
  ``unlogged_refusal`` by its outcome (succeeded / failed / rejected).
* A matched pair whose tool name or outcome differs is ``mismatched_result``.
* More claims for one call are ``duplicate_log`` (the first one by ``seq`` is the pair).
* A claim for no observed call is ``phantom_log``.
* Observed calls in a run with no claim at all (not even a malformed or self-logged one) add
  ``ledger_missing``.
* The types above make ``balanced`` false. The protocol types leave the balance alone and make
  ``protocol_ok`` false: a paired claim not placed after its call and before the next ordinary call is
  ``out_of_order_log``; a claim naming the log tool itself is ``self_logged`` and is never paired; a
  claim whose arguments did not parse is ``malformed_log`` and is never paired.
* The log tool is never on the observed side: observed entries of the log tool are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any, Final

from tallyspan import semconv
from tallyspan._engine._taxonomy import LEDGER_BALANCE_TYPES, LEDGER_PROTOCOL_TYPES, ViolationType
from tallyspan._errors import ConfigError

__all__ = [
    "BALANCE_TYPES",
    "DEFAULT_LOG_TOOL",
    "OUTCOMES",
    "PROTOCOL_TYPES",
    "Claim",
    "Discrepancy",
    "LogToolSpec",
    "Observed",
    "Reconciliation",
    "normalize_outcome",
    "parse_log_arguments",
    "reconcile",
]

DEFAULT_LOG_TOOL: Final = "log_action"

OUTCOMES: Final = (semconv.OUTCOME_SUCCEEDED, semconv.OUTCOME_FAILED, semconv.OUTCOME_REJECTED)

_UNLOGGED: Final = {
    semconv.OUTCOME_SUCCEEDED: ViolationType.UNLOGGED_CALL.value,
    semconv.OUTCOME_FAILED: ViolationType.UNLOGGED_FAILURE.value,
    semconv.OUTCOME_REJECTED: ViolationType.UNLOGGED_REFUSAL.value,
}

# Plain strings, looked up once: enum attribute access is slow in the hot loop of reconcile().
_UNLOGGED_CALL: Final = ViolationType.UNLOGGED_CALL.value
_PHANTOM_LOG: Final = ViolationType.PHANTOM_LOG.value
_MISMATCHED_RESULT: Final = ViolationType.MISMATCHED_RESULT.value
_DUPLICATE_LOG: Final = ViolationType.DUPLICATE_LOG.value
_LEDGER_MISSING: Final = ViolationType.LEDGER_MISSING.value
_OUT_OF_ORDER_LOG: Final = ViolationType.OUT_OF_ORDER_LOG.value
_SELF_LOGGED: Final = ViolationType.SELF_LOGGED.value
_MALFORMED_LOG: Final = ViolationType.MALFORMED_LOG.value

#: Discrepancy types that make the books unbalanced.
BALANCE_TYPES: Final = frozenset(t.value for t in LEDGER_BALANCE_TYPES)
#: Discrepancy types that break the logging protocol but leave the balance alone.
PROTOCOL_TYPES: Final = frozenset(t.value for t in LEDGER_PROTOCOL_TYPES)

# Words agents use for the three outcomes; anything else in a log is malformed.
_OUTCOME_SYNONYMS: Final = {
    semconv.OUTCOME_SUCCEEDED: ("succeeded", "success", "successful", "succeed", "ok", "done", "completed"),
    semconv.OUTCOME_FAILED: ("failed", "failure", "fail", "error", "errored"),
    semconv.OUTCOME_REJECTED: ("rejected", "reject", "refused", "refusal", "denied", "declined", "blocked"),
}
_OUTCOME_OF_WORD: Final = {word: outcome for outcome, words in _OUTCOME_SYNONYMS.items() for word in words}


@dataclass(frozen=True, slots=True)
class Observed:
    """A tool execution the instrumentation observed (the authoritative column)."""

    call_id: str | None
    tool_name: str
    outcome: str
    """``succeeded``, ``failed`` or ``rejected``."""
    seq: int
    """Position in the run, counted over both columns."""


@dataclass(frozen=True, slots=True)
class Claim:
    """An action the agent logged about itself (the agent's column)."""

    call_id: str | None
    tool_name: str | None
    claimed_outcome: str | None
    summary: str = ""
    seq: int = 0
    """Position in the run, counted over both columns."""
    malformed: str | None = None
    """Why the log call's arguments did not parse; such a claim is ``malformed_log`` and never paired."""


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """One finding of the reconciliation: its type (a ledger ``ViolationType`` value), the call, why."""

    type: str
    call_id: str | None
    detail: str
    tool_name: str | None = field(default=None, compare=False)
    """The tool of the call, or the tool its claim names (for a run's status); not compared."""


@dataclass(frozen=True)
class Reconciliation:
    """The result of reconciling one run's books."""

    balanced: bool
    """Every observed call has exactly one matching claim, and no claim is left over."""
    protocol_ok: bool
    """Every claim was placed right after its call, parsed, and did not log the log tool."""
    discrepancy_types: tuple[str, ...]
    """Sorted, unique discrepancy types."""
    discrepancies: tuple[Discrepancy, ...]


@dataclass(frozen=True)
class LogToolSpec:
    """How the agent's log calls look: the tool name and the accepted names of each argument.

    Args:
        tool: the name of the log tool.
        call_id: argument names of the logged call's id, first found wins.
        tool_name: argument names of the logged tool's name.
        outcome: argument names of the claimed outcome.
        summary: argument names of the free-text summary.
    """

    tool: str = DEFAULT_LOG_TOOL
    call_id: tuple[str, ...] = ("call_id", "log_id", "tool_call_id")
    tool_name: tuple[str, ...] = ("tool_name", "tool")
    outcome: tuple[str, ...] = ("claimed_outcome", "outcome")
    summary: tuple[str, ...] = ("summary", "action_description")

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise ConfigError("the log tool name must be a non-empty string")
        for field_name in ("call_id", "tool_name", "outcome", "summary"):
            names = getattr(self, field_name)
            if not names or not all(isinstance(name, str) and name for name in names):
                raise ConfigError(f"LogToolSpec.{field_name} must be a non-empty tuple of argument names")


def normalize_outcome(value: object) -> str | None:
    """Map an outcome word an agent wrote (``success``, ``error``, ``denied``...) to one of :data:`OUTCOMES`."""
    if isinstance(value, bool):
        return semconv.OUTCOME_SUCCEEDED if value else semconv.OUTCOME_FAILED
    if not isinstance(value, str):
        return None
    return _OUTCOME_OF_WORD.get(value.strip().lower())


def _first(arguments: Mapping[str, Any], names: Sequence[str]) -> Any:
    for name in names:
        value = arguments.get(name)
        if value is not None and value != "":
            return value
    return None


def parse_log_arguments(
    arguments: str | Mapping[str, Any] | None, *, seq: int = 0, spec: LogToolSpec | None = None
) -> Claim:
    """Read a log call's arguments (JSON text or a mapping) into a :class:`Claim`; never raises.

    A claim needs a tool name and an outcome (one of :data:`OUTCOMES` or a common synonym); the call
    id and summary are optional. Anything else gives a claim with ``malformed`` set to the reason.
    """
    spec = spec or LogToolSpec()
    parsed: Any = arguments
    if isinstance(arguments, str | bytes):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):  # malformed or hostile (deeply nested) JSON is a bad log
            return Claim(None, None, None, seq=seq, malformed="arguments are not valid JSON")
    if not isinstance(parsed, Mapping):
        return Claim(None, None, None, seq=seq, malformed="arguments are not a JSON object")
    raw_call_id = _first(parsed, spec.call_id)
    call_id = None if raw_call_id is None else str(raw_call_id)
    tool_name = _first(parsed, spec.tool_name)
    raw_outcome = _first(parsed, spec.outcome)
    summary = _first(parsed, spec.summary)
    summary_text = "" if summary is None else str(summary)
    if not isinstance(tool_name, str):
        return Claim(call_id, None, None, summary_text, seq, malformed="no tool name")
    outcome = normalize_outcome(raw_outcome)
    if outcome is None:
        # Never quote the word: it is the agent's free text, and the reason is exported with content off.
        reason = (
            "no outcome" if raw_outcome is None else "unknown outcome (not succeeded, failed or rejected)"
        )
        return Claim(call_id, tool_name, None, summary_text, seq, malformed=reason)
    return Claim(call_id, tool_name, outcome, summary_text, seq)


_BY_SEQ: Final = attrgetter("seq")
_FIRST: Final = itemgetter(0)


def reconcile(
    observed: Iterable[Observed], claimed: Iterable[Claim], *, log_tool: str = DEFAULT_LOG_TOOL
) -> Reconciliation:
    """Reconcile one run's observed tool calls against the agent's claims.

    Args:
        observed: the calls the instrumentation saw; those of ``log_tool`` are ignored.
        claimed: the agent's log entries, malformed ones included.
        log_tool: the name of the log tool.

    Returns:
        The :class:`Reconciliation`; discrepancies are listed in ``seq`` order of the entry at fault.
    """
    calls = sorted((o for o in observed if o.tool_name != log_tool), key=_BY_SEQ)
    claims = sorted(claimed, key=_BY_SEQ)
    found: list[tuple[int, Discrepancy]] = []

    # The seq of the next ordinary call after each call: a claim must sit between the two.
    next_seq = [calls[i + 1].seq if i + 1 < len(calls) else None for i in range(len(calls))]
    # Unpaired calls per id, latest first so pop() yields the earliest: frameworks do reuse ids in a run.
    unpaired_by_id: dict[str, list[int]] = {}
    for i in range(len(calls) - 1, -1, -1):
        call_id = calls[i].call_id
        if call_id is not None:
            unpaired_by_id.setdefault(call_id, []).append(i)

    pair_of: list[Claim | None] = [None] * len(calls)
    pending_without_id: list[Claim] = []
    for entry in claims:
        if entry.malformed is not None:
            found.append((entry.seq, Discrepancy(_MALFORMED_LOG, entry.call_id, entry.malformed)))
        elif entry.tool_name == log_tool:
            found.append(
                (
                    entry.seq,
                    Discrepancy(_SELF_LOGGED, entry.call_id, f"a claim logs {log_tool}"),
                )
            )
        elif entry.call_id is None:
            pending_without_id.append(entry)
        else:
            same_id = unpaired_by_id.get(entry.call_id)
            if same_id is None:
                found.append(
                    (entry.seq, Discrepancy(_PHANTOM_LOG, entry.call_id, _phantom(entry), entry.tool_name))
                )
            elif same_id:
                pair_of[same_id.pop()] = entry
            else:
                found.append(
                    (
                        entry.seq,
                        Discrepancy(_DUPLICATE_LOG, entry.call_id, "claimed again", entry.tool_name),
                    )
                )

    if pending_without_id:
        unpaired_by_tool: dict[str, list[int]] = {}
        for i in range(len(calls) - 1, -1, -1):  # reversed, so pop() yields the earliest
            if pair_of[i] is None:
                unpaired_by_tool.setdefault(calls[i].tool_name, []).append(i)
        for entry in pending_without_id:
            candidates = unpaired_by_tool.get(entry.tool_name or "")
            if candidates:
                pair_of[candidates.pop()] = entry
            else:
                found.append((entry.seq, Discrepancy(_PHANTOM_LOG, None, _phantom(entry), entry.tool_name)))

    for i, call in enumerate(calls):
        paired = pair_of[i]
        if paired is None:
            kind = _UNLOGGED.get(call.outcome, _UNLOGGED_CALL)
            found.append(
                (
                    call.seq,
                    Discrepancy(
                        kind, call.call_id, f"{call.tool_name} {call.outcome}, not logged", call.tool_name
                    ),
                )
            )
            continue
        differences = []
        if paired.tool_name != call.tool_name:
            differences.append(f"tool {call.tool_name!r} claimed as {paired.tool_name!r}")
        claimed_outcome = paired.claimed_outcome
        if (
            claimed_outcome != call.outcome
            and (normalize_outcome(claimed_outcome) or claimed_outcome) != call.outcome
        ):
            differences.append(f"{call.outcome} claimed as {paired.claimed_outcome}")
        if differences:
            found.append(
                (
                    paired.seq,
                    Discrepancy(_MISMATCHED_RESULT, call.call_id, "; ".join(differences), call.tool_name),
                )
            )
        after = next_seq[i]
        if paired.seq <= call.seq:
            found.append(
                (
                    paired.seq,
                    Discrepancy(_OUT_OF_ORDER_LOG, call.call_id, "logged before the call"),
                )
            )
        elif after is not None and paired.seq > after:
            found.append(
                (
                    paired.seq,
                    Discrepancy(_OUT_OF_ORDER_LOG, call.call_id, "logged after the next call"),
                )
            )

    if calls and not claims:
        found.append(
            (
                calls[0].seq,
                Discrepancy(_LEDGER_MISSING, None, f"{len(calls)} calls, no log"),
            )
        )

    found.sort(key=_FIRST)
    discrepancies = tuple(d for _, d in found)
    types = tuple(sorted({d.type for d in discrepancies}))
    return Reconciliation(
        balanced=not any(t in BALANCE_TYPES for t in types),
        protocol_ok=not any(t in PROTOCOL_TYPES for t in types),
        discrepancy_types=types,
        discrepancies=discrepancies,
    )


def _phantom(entry: Claim) -> str:
    return f"{entry.tool_name} claimed {entry.claimed_outcome}, never called"
