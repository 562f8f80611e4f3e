"""Error-diagnosis records: one per failed agent run, its steps and the rule-based diagnosis.

Usage::

    for record in diagnosis_records(trace):          # one TraceData from the store or an OTLP file
        out.write(json.dumps(record) + "\\n")

A run is the outermost run span of a trace (``invoke_agent``, ``tallyspan.run``, else the local root);
its steps are the model calls and tool calls below it, in start order. It failed when a step carries a
violation, its books (or a nested run's) do not balance or break the logging protocol, or the run span
itself ended in an error. The diagnosis is the error-diagnosis quadruple:

- step: the first step carrying a verdict (a violation, or a ledger discrepancy placed on the entry at
  fault); failed calls decide it only when the run has no verdict at all;
- agent: ``gen_ai.agent.name`` of that step, else of the nearest enclosing span that has one;
- explanation: the verdicts at that step, in words (types and content-free details);
- corrective action: the rule broken, taken from the contract term or the ledger rule (``_terms``).

Every verdict of the run is kept as evidence with the span it sits on.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tallyspan import semconv
from tallyspan._books._ledger import DEFAULT_LOG_TOOL, normalize_outcome
from tallyspan._contract._contracts import ContractSet
from tallyspan._datasets._failure_logs import iso_utc
from tallyspan._datasets._terms import explain
from tallyspan._engine._taxonomy import FailureClass, most_severe
from tallyspan._store._store_traces import EntryData, LedgerData, SpanData, TraceData

__all__ = [
    "EVIDENCE_ERROR",
    "EVIDENCE_LEDGER",
    "EVIDENCE_VIOLATION",
    "FORMAT",
    "Evidence",
    "diagnose",
    "diagnosis_records",
    "locate_discrepancies",
    "runs_of",
]

FORMAT: Final = "tallyspan.diagnosis/1"
EVIDENCE_VIOLATION: Final = "violation"
EVIDENCE_LEDGER: Final = "ledger"
EVIDENCE_ERROR: Final = "error"
_UNLOGGED: Final = frozenset({"unlogged_call", "unlogged_failure", "unlogged_refusal"})
_NOT_LOGGED: Final = re.compile(r"^(.*) (?:succeeded|failed|rejected), not logged$")
_NEVER_CALLED: Final = re.compile(r"^(.*) claimed .*, never called$")


@dataclass(frozen=True)
class Evidence:
    """One finding of the diagnosis and where it sits."""

    kind: str
    """``violation``, ``ledger`` (a discrepancy of the run's books) or ``error`` (a failed call)."""
    type: str
    failure_class: str | None
    detail: str
    span_id: str | None
    step: int | None
    """Index of the step the span is, or None (the run span, or a span that is not a step)."""
    rule: str
    correction: str
    call_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The evidence as the record carries it."""
        return {
            "kind": self.kind,
            "type": self.type,
            "failure_class": self.failure_class,
            "detail": self.detail,
            "span_id": self.span_id,
            "step": self.step,
            "call_id": self.call_id,
            "rule": self.rule,
            "correction": self.correction,
        }


# --- runs and steps --------------------------------------------------------------------------------


def _children(trace: TraceData) -> dict[str | None, list[SpanData]]:
    children: dict[str | None, list[SpanData]] = defaultdict(list)
    known = {span.span_id for span in trace.spans}
    for span in trace.spans:
        parent = span.parent_span_id if span.parent_span_id in known else None
        children[parent].append(span)
    return children


def runs_of(trace: TraceData) -> Iterator[tuple[SpanData, list[SpanData]]]:
    """Each outermost run of the trace with the spans below it (nested runs included), in start order.

    The outermost runs are the spans whose parent is not in the trace: local roots, which are runs.
    """
    children = _children(trace)
    for top in sorted(children.get(None, []), key=_start_key):
        found, pending = [], [top]
        while pending:
            for child in children.get(pending.pop().span_id, []):
                found.append(child)
                pending.append(child)
        yield top, found


def _start_key(span: SpanData) -> tuple[int, int]:
    return (span.start_unix_nano or 0, span.end_unix_nano or 0)


def _unique(spans: Sequence[SpanData]) -> list[SpanData]:
    return list({span.span_id: span for span in spans}.values())


def _steps(spans: Sequence[SpanData]) -> list[SpanData]:
    return sorted((s for s in spans if s.is_model_call or s.is_tool_call), key=_start_key)


def _agent_of(span: SpanData, by_id: Mapping[str, SpanData]) -> str | None:
    current: SpanData | None = span
    while current is not None:
        if current.agent_name:
            return current.agent_name
        current = by_id.get(current.parent_span_id) if current.parent_span_id else None
    return None


# --- where each ledger discrepancy sits ------------------------------------------------------------


def _well_formed(entry: EntryData, log_tool: str) -> bool:
    return (
        bool(entry.tool_name) and entry.tool_name != log_tool and normalize_outcome(entry.outcome) is not None
    )


def locate_discrepancies(books: LedgerData, log_tool: str = DEFAULT_LOG_TOOL) -> list[EntryData | None]:
    """The entry at fault for each discrepancy of ``books`` (None when it cannot be placed).

    The reconciliation reports a discrepancy by type and call id; this applies its pairing rules again
    to the entries to find which one: an unlogged call is the observed call (the latest ones of its id,
    since claims pair with the earliest); a phantom, duplicate, mismatched or late claim is the claim
    (duplicates are the claims beyond the calls of their id); malformed and self-logged claims are the
    claims that look so, in order; ``ledger_missing`` is the first observed call.
    """
    entries = sorted(books.entries, key=lambda entry: entry.seq)
    observed = [e for e in entries if e.side == semconv.LEDGER_SIDE_OBSERVED and e.tool_name != log_tool]
    claims = [e for e in entries if e.side == semconv.LEDGER_SIDE_CLAIMED]
    good_claims = [e for e in claims if _well_formed(e, log_tool)]
    observed_by_id: dict[str | None, list[EntryData]] = defaultdict(list)
    for entry in observed:
        observed_by_id[entry.call_id].append(entry)
    claims_by_id: dict[str | None, list[EntryData]] = defaultdict(list)
    for entry in good_claims:
        claims_by_id[entry.call_id].append(entry)
    unlogged_per_id = Counter(d.call_id for d in books.discrepancies if d.type in _UNLOGGED)
    taken: Counter[tuple[str, str | None]] = Counter()
    located: list[EntryData | None] = []
    for discrepancy in books.discrepancies:
        kind, call_id = discrepancy.type, discrepancy.call_id
        k = taken[(kind, call_id)]
        taken[(kind, call_id)] += 1
        candidates: list[EntryData] = []
        if kind in _UNLOGGED:
            same = observed_by_id.get(call_id, [])
            if call_id is None:
                tool = _NOT_LOGGED.match(discrepancy.detail)
                same = [e for e in same if tool is None or e.tool_name == tool.group(1)]
            else:
                same = same[max(0, len(same) - unlogged_per_id[call_id]) :]
            candidates = same
        elif kind == "duplicate_log":
            candidates = claims_by_id.get(call_id, [])[len(observed_by_id.get(call_id, [])) :]
        elif kind == "phantom_log":
            candidates = claims_by_id.get(call_id, [])
            if call_id is None:
                tool = _NEVER_CALLED.match(discrepancy.detail)
                candidates = [e for e in candidates if tool is None or e.tool_name == tool.group(1)]
        elif kind in ("mismatched_result", "out_of_order_log"):
            candidates = claims_by_id.get(call_id, []) or observed_by_id.get(call_id, [])
        elif kind == "malformed_log":
            candidates = [e for e in claims if not _well_formed(e, log_tool) and e.tool_name != log_tool]
        elif kind == "self_logged":
            candidates = [e for e in claims if e.tool_name == log_tool]
        elif kind == "ledger_missing":
            candidates, k = observed[:1], 0
        if k < len(candidates):
            located.append(candidates[k])
        else:
            fallback = observed_by_id.get(call_id, []) if call_id is not None else []
            located.append(fallback[0] if fallback else None)
    return located


def _span_of_entry(entry: EntryData, spans: Sequence[SpanData]) -> SpanData | None:
    if entry.span_id is not None:
        return next((span for span in spans if span.span_id == entry.span_id), None)
    # An OTLP file carries the entries as events of the run span, with their time but not their span:
    # an observed call is the tool span of its call id that ended then, a claim the span that ended then
    # (the log tool's, or the model call that requested it) or that holds a claim event of that time.
    time = entry.time_unix_nano
    if entry.side == semconv.LEDGER_SIDE_OBSERVED:
        tools = [s for s in spans if s.is_tool_call and s.tool_call_id == entry.call_id]
        return next((s for s in tools if s.end_unix_nano == time), tools[0] if tools else None)
    return next(
        (s for s in spans if time is not None and (s.end_unix_nano == time or time in s.claim_times)), None
    )


# --- the diagnosis ---------------------------------------------------------------------------------


def _class_rank(name: str | None) -> int:
    try:
        return list(FailureClass).index(FailureClass(name))
    except ValueError:
        return len(FailureClass)


def _evidence(
    run: SpanData,
    spans: Sequence[SpanData],
    steps: Sequence[SpanData],
    ledgers: Mapping[str, LedgerData],
    contracts: ContractSet | None,
) -> list[Evidence]:
    index = {span.span_id: i for i, span in enumerate(steps)}
    found: list[Evidence] = []
    for span in _unique([run, *spans]):
        contract = contracts.contracts.get(span.contract) if contracts and span.contract else None
        for violation in span.violations:
            rule = explain(violation.type, violation.detail, contract)
            found.append(
                Evidence(
                    EVIDENCE_VIOLATION,
                    violation.type,
                    violation.failure_class,
                    violation.detail or "",
                    span.span_id,
                    index.get(span.span_id),
                    rule.term,
                    rule.hint,
                )
            )
    everything = [run, *spans]
    for run_span in (s for s in everything if s.span_id in ledgers):
        books = ledgers[run_span.span_id]
        for discrepancy, entry in zip(books.discrepancies, locate_discrepancies(books), strict=True):
            at = _span_of_entry(entry, everything) if entry is not None else None
            rule = explain(discrepancy.type, discrepancy.detail)
            found.append(
                Evidence(
                    EVIDENCE_LEDGER,
                    discrepancy.type,
                    FailureClass.LEDGER_DISCREPANCY.value,
                    discrepancy.detail,
                    at.span_id if at is not None else run_span.span_id,
                    index.get(at.span_id) if at is not None else None,
                    rule.term,
                    rule.hint,
                    discrepancy.call_id,
                )
            )
    for span in _unique([*steps, run]):
        if span.error_type and not span.violations:
            what = f"tool {span.tool_name}" if span.is_tool_call else span.name
            found.append(
                Evidence(
                    EVIDENCE_ERROR,
                    span.error_type,
                    None,
                    f"{what} ended with {span.error_type}",
                    span.span_id,
                    index.get(span.span_id),
                    "the call succeeds",
                    f"{what} failed with {span.error_type}: check its inputs and the service behind it",
                )
            )
    found.sort(key=lambda e: (e.step if e.step is not None else len(steps), _class_rank(e.failure_class)))
    return found


def diagnose(
    run: SpanData,
    spans: Sequence[SpanData],
    ledgers: Mapping[str, LedgerData],
    contracts: ContractSet | None = None,
) -> tuple[list[SpanData], dict[str, Any]] | None:
    """The steps of one run and its rule-based diagnosis; None when the run did not fail."""
    steps = _steps([run, *spans])  # a lone model call is a run and its own one step
    evidence = _evidence(run, spans, steps, ledgers, contracts)
    verdicts = [e for e in evidence if e.kind != EVIDENCE_ERROR]
    if not verdicts and not (run.error_type and evidence):
        return None
    deciding = verdicts or evidence
    placed = [e for e in deciding if e.step is not None]
    first = placed[0].step if placed else None
    at_step = [e for e in deciding if e.step == first] if first is not None else deciding[:1]
    by_id = {span.span_id: span for span in [run, *spans]}
    step_span = steps[first] if first is not None else None
    agent = _agent_of(step_span if step_span is not None else run, by_id)
    worst = most_severe(
        FailureClass(e.failure_class) for e in at_step if e.failure_class in FailureClass._value2member_map_
    )
    diagnosis = {
        "step": first,
        "span_id": step_span.span_id if step_span is not None else run.span_id,
        "agent": agent,
        "failure_class": worst.value if worst is not None else None,
        "explanation": _explanation(first, step_span, agent, at_step, len(evidence)),
        "correction": "; ".join(dict.fromkeys(e.correction for e in at_step)) or None,
        "corrections": list(dict.fromkeys(e.correction for e in evidence)),
        "evidence": [e.to_json() for e in evidence],
    }
    return steps, diagnosis


def _explanation(
    first: int | None, span: SpanData | None, agent: str | None, at_step: Sequence[Evidence], total: int
) -> str:
    found = "; ".join(f"{e.type}: {e.detail}" if e.detail else e.type for e in at_step)
    where = "the run" if span is None else f"step {first} ({span.name}"
    if span is not None:
        where += f", agent {agent})" if agent else ")"
        if span.stage:
            where += f" in stage {span.stage}"
    text = f"{where} failed first: {found}"
    more = total - len(at_step)
    if more > 0:
        text += f" ({more} more finding{'s' if more > 1 else ''} in the run)"
    return text


def _content(span: SpanData) -> dict[str, Any] | None:
    if not span.content:
        return None
    parsed: dict[str, Any] = {}
    for key, value in span.content.items():
        try:
            parsed[key] = json.loads(value) if isinstance(value, str) else value
        except ValueError:  # not JSON (a plain-text result): keep it as it was exported
            parsed[key] = value
    return parsed


def _step_json(index: int, span: SpanData, by_id: Mapping[str, SpanData]) -> dict[str, Any]:
    duration = span.duration_ns
    return {
        "index": index,
        "span_id": span.span_id,
        "kind": "tool_call" if span.is_tool_call else "model_call",
        "name": span.name,
        "agent": _agent_of(span, by_id),
        "model": span.model,
        "tool": span.tool_name,
        "tool_call_id": span.tool_call_id,
        "stage": span.stage,
        "start": iso_utc(span.start_unix_nano),
        "duration_ms": None if duration is None else round(duration / 1e6, 3),
        "status": span.status_code,
        "error_type": span.error_type,
        "outcome": span.tool_outcome,
        "violation_types": sorted({v.type for v in span.violations}),
        "content": _content(span),
    }


def diagnosis_records(trace: TraceData, contracts: ContractSet | None = None) -> Iterator[dict[str, Any]]:
    """One error-diagnosis record per failed run of ``trace``."""
    for run, spans in runs_of(trace):
        diagnosed = diagnose(run, spans, trace.ledgers, contracts)
        if diagnosed is None:
            continue
        steps, diagnosis = diagnosed
        by_id = {span.span_id: span for span in [run, *spans]}
        books = trace.ledgers.get(run.span_id)
        duration = run.duration_ns
        yield {
            "format": FORMAT,
            "trace_id": run.trace_id,
            "run": {
                "span_id": run.span_id,
                "name": run.run_name or run.agent_name or run.name,
                "agent": run.agent_name,
                "start": iso_utc(run.start_unix_nano),
                "duration_ms": None if duration is None else round(duration / 1e6, 3),
                "status": run.status_code,
                "error_type": run.error_type,
                "ledger_balanced": books.balanced if books else None,
                "ledger_protocol_ok": books.protocol_ok if books else None,
            },
            "content_captured": any(step.content for step in steps),
            "steps": [_step_json(i, span, by_id) for i, span in enumerate(steps)],
            "diagnosis": diagnosis,
            "judged": None,
        }
