"""Whole traces as read back: plain data, the same from the store and from OTLP.

A source (the embedded store, ``_store_queries.iter_traces``; an OTLP JSON file,
``tallyspan._datasets._otlp_file``) yields one :class:`TraceData` at a time: the spans of one trace with
their verdicts, and the books of each run that was reconciled in it. The dataset exports (failure logs,
diagnoses, ``tallyspan._datasets``) are pure functions of it, so a source only has to fill these fields.
It lives with the store, the lower of its two readers, so that the store's reads import nothing above
the store.

Ids are lower-case hex (trace 32 characters, span 16), times Unix nanoseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tallyspan import semconv
from tallyspan._books._ledger import Discrepancy

__all__ = [
    "CONTENT_ATTRIBUTES",
    "EntryData",
    "LedgerData",
    "SpanData",
    "TraceData",
    "ViolationData",
]

#: The attributes that carry message content; a span has them only when the user opted in to capture.
CONTENT_ATTRIBUTES: Final = (
    semconv.GEN_AI_SYSTEM_INSTRUCTIONS,
    semconv.GEN_AI_INPUT_MESSAGES,
    semconv.GEN_AI_OUTPUT_MESSAGES,
    semconv.GEN_AI_TOOL_CALL_ARGUMENTS,
    semconv.GEN_AI_TOOL_CALL_RESULT,
)


@dataclass(frozen=True)
class ViolationData:
    """One verdict of the checks on a span: its type, failure class and content-free detail."""

    type: str
    failure_class: str | None
    detail: str | None


@dataclass(frozen=True)
class SpanData:
    """One span as the exports need it."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    operation: str | None
    start_unix_nano: int | None
    end_unix_nano: int | None
    status_code: str
    """``OK``, ``ERROR`` or ``UNSET``."""
    is_run: bool = False
    """The span delimits an agent run (``tallyspan._books._runs.is_run_span``)."""
    model: str | None = None
    """The response model, else the requested one."""
    stage: str | None = None
    agent_name: str | None = None
    run_name: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_outcome: str | None = None
    error_type: str | None = None
    contract: str | None = None
    violations: tuple[ViolationData, ...] = ()
    content: Mapping[str, Any] = field(default_factory=dict)
    """The content attributes the span was exported with (only when captured)."""
    claim_times: tuple[int, ...] = ()
    """Times of the ``tallyspan.ledger.claim`` events on the span (to place the agent's claims)."""

    @property
    def duration_ns(self) -> int | None:
        """End minus start, when both are known."""
        if self.start_unix_nano is None or self.end_unix_nano is None:
            return None
        return self.end_unix_nano - self.start_unix_nano

    @property
    def is_model_call(self) -> bool:
        """A chat, text completion or generate_content span."""
        return self.operation in semconv.MODEL_OPERATIONS

    @property
    def is_tool_call(self) -> bool:
        """An ``execute_tool`` span."""
        return self.operation == semconv.OPERATION_EXECUTE_TOOL


@dataclass(frozen=True)
class EntryData:
    """One entry of either column of a run's books (``observed`` or ``claimed``)."""

    side: str
    seq: int
    call_id: str | None
    tool_name: str | None
    outcome: str | None
    span_id: str | None
    """The span the entry came from; None when the source did not record it (OTLP: found by time)."""
    time_unix_nano: int | None


@dataclass(frozen=True)
class LedgerData:
    """The reconciled books of one run."""

    run_span_id: str
    run_name: str | None
    balanced: bool | None
    protocol_ok: bool | None
    discrepancies: tuple[Discrepancy, ...] = ()
    entries: tuple[EntryData, ...] = ()
    time_unix_nano: int | None = None


@dataclass
class TraceData:
    """The spans of one trace and the books of the runs reconciled in it."""

    trace_id: str
    spans: list[SpanData] = field(default_factory=list)
    ledgers: dict[str, LedgerData] = field(default_factory=dict)
    """By run span id."""


def _text(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def span_data(
    *,
    trace_id: str,
    span_id: str,
    parent_span_id: str | None,
    name: str,
    start_unix_nano: int | None,
    end_unix_nano: int | None,
    status_code: str,
    attributes: Mapping[str, Any],
    is_run: bool,
    violations: tuple[ViolationData, ...] = (),
    claim_times: tuple[int, ...] = (),
) -> SpanData:
    """A :class:`SpanData` from a span's exported attributes (the one reading of them for both sources)."""
    return SpanData(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        operation=_text(attributes.get(semconv.GEN_AI_OPERATION_NAME)),
        start_unix_nano=start_unix_nano,
        end_unix_nano=end_unix_nano,
        status_code=status_code,
        is_run=is_run,
        model=_text(attributes.get(semconv.GEN_AI_RESPONSE_MODEL))
        or _text(attributes.get(semconv.GEN_AI_REQUEST_MODEL)),
        stage=_text(attributes.get(semconv.STAGE)),
        agent_name=_text(attributes.get(semconv.GEN_AI_AGENT_NAME)),
        run_name=_text(attributes.get(semconv.RUN_NAME)),
        tool_name=_text(attributes.get(semconv.GEN_AI_TOOL_NAME)),
        tool_call_id=_text(attributes.get(semconv.GEN_AI_TOOL_CALL_ID)),
        tool_outcome=_text(attributes.get(semconv.TOOL_OUTCOME)),
        error_type=_text(attributes.get(semconv.ERROR_TYPE)),
        contract=_text(attributes.get(semconv.CONTRACT)),
        violations=violations,
        content={key: attributes[key] for key in CONTENT_ATTRIBUTES if key in attributes},
        claim_times=claim_times,
    )
