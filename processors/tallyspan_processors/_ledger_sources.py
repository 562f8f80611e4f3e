"""Where the ledger's entries come from: an ended span read into observed calls and the agent's claims.

* ``execute_tool`` spans of ordinary tools are observed calls (outcome from ``tallyspan.tool.outcome``,
  else the span status, so other instrumentations' tool spans count too). SERVER-kind ones are the
  callee's view of a call (an MCP server handling ``tools/call``): the caller's span already counts
  it, so they enter nothing.
* ``execute_tool`` spans of the log tool are claims: their arguments come from the span's content
  (``ToolContent``: the ContentBuffer, else ``gen_ai.tool.call.arguments`` when content is captured).
* Model spans contribute the log-tool calls the model requested (``ModelContent.tool_calls``: the
  ContentBuffer, else ``gen_ai.output.messages`` when content is captured).
* ``tallyspan.ledger.claim`` events (``tallyspan.ledger.claim()``) on any span are claims.

Each entry carries a time (span end, or event time) that orders it in the run, and, for log-tool
calls, the id of that log call, so one call requested by the model and then executed by the harness
is counted once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from tallyspan import semconv
from tallyspan.ledger import LogToolSpec, normalize_outcome, parse_log_arguments
from tallyspan.plugin import ModelContent, ToolContent

__all__ = ["RawEntry", "entries_of"]


@dataclass(frozen=True)
class RawEntry:
    """One entry of either column before the run is reconciled and ``seq`` assigned."""

    side: str
    time_unix_nano: int
    span_id: int
    call_id: str | None
    tool_name: str | None
    outcome: str | None
    summary: str = ""
    malformed: str | None = None
    log_call_id: str | None = None
    """For a log-tool call, the id of that call (to count it once); else None."""


def entries_of(
    span: ReadableSpan, content: ModelContent | ToolContent | None, spec: LogToolSpec
) -> Iterator[RawEntry]:
    """Yield the ledger entries ``span`` contributes, given the content handed down with it."""
    attributes = span.attributes or {}
    operation = attributes.get(semconv.GEN_AI_OPERATION_NAME)
    span_id = span.context.span_id if span.context is not None else 0
    end = span.end_time or 0
    if operation == semconv.OPERATION_EXECUTE_TOOL:
        if span.kind is not SpanKind.SERVER:
            yield from _tool_entries(span, attributes, content, spec, span_id, end)
    elif operation in semconv.MODEL_OPERATIONS and isinstance(content, ModelContent) and content.tool_calls:
        yield from _requested_log_calls(content, spec, span_id, end)
    for event in span.events:
        if event.name == semconv.EVENT_LEDGER_CLAIM:
            yield _claim_event(event.attributes or {}, span_id, event.timestamp or end)


def _tool_entries(
    span: ReadableSpan,
    attributes: Mapping[str, Any],
    content: ModelContent | ToolContent | None,
    spec: LogToolSpec,
    span_id: int,
    end: int,
) -> Iterator[RawEntry]:
    tool_name = attributes.get(semconv.GEN_AI_TOOL_NAME)
    if not isinstance(tool_name, str) or not tool_name:
        prefix = f"{semconv.OPERATION_EXECUTE_TOOL} "
        tool_name = span.name[len(prefix) :] if span.name.startswith(prefix) else span.name
    raw_call_id = attributes.get(semconv.GEN_AI_TOOL_CALL_ID)
    call_id = str(raw_call_id) if raw_call_id is not None and raw_call_id != "" else None
    if tool_name == spec.tool:
        arguments: Any = content.arguments if isinstance(content, ToolContent) else None
        yield _claim(arguments, spec, span_id, end, call_id, unavailable="log call arguments not available")
        return
    outcome = normalize_outcome(attributes.get(semconv.TOOL_OUTCOME))
    if outcome is None:
        outcome = (
            semconv.OUTCOME_FAILED
            if span.status.status_code is StatusCode.ERROR
            else semconv.OUTCOME_SUCCEEDED
        )
    yield RawEntry(semconv.LEDGER_SIDE_OBSERVED, end, span_id, call_id, tool_name, outcome)


def _requested_log_calls(
    content: ModelContent, spec: LogToolSpec, span_id: int, end: int
) -> Iterator[RawEntry]:
    for call in content.tool_calls:
        if call.name == spec.tool:
            # Empty arguments (a capture that had none) are missing, not malformed JSON.
            arguments = call.arguments or None
            yield _claim(arguments, spec, span_id, end, call.call_id, unavailable="no arguments")


def _claim(
    arguments: Any, spec: LogToolSpec, span_id: int, time: int, log_call_id: str | None, *, unavailable: str
) -> RawEntry:
    if arguments is None:
        return RawEntry(
            semconv.LEDGER_SIDE_CLAIMED,
            time,
            span_id,
            None,
            None,
            None,
            malformed=unavailable,
            log_call_id=log_call_id,
        )
    return _parsed_claim(arguments, spec, span_id, time, log_call_id)


def _parsed_claim(
    arguments: Any, spec: LogToolSpec, span_id: int, time: int, log_call_id: str | None
) -> RawEntry:
    parsed = parse_log_arguments(arguments, spec=spec)
    return RawEntry(
        semconv.LEDGER_SIDE_CLAIMED,
        time,
        span_id,
        parsed.call_id,
        parsed.tool_name,
        parsed.claimed_outcome,
        parsed.summary,
        parsed.malformed,
        log_call_id,
    )


_CLAIM_EVENT_SPEC = LogToolSpec(
    call_id=(semconv.LEDGER_CALL_ID,),
    tool_name=(semconv.LEDGER_TOOL_NAME,),
    outcome=(semconv.LEDGER_OUTCOME,),
    summary=(semconv.LEDGER_SUMMARY,),
)


def _claim_event(attributes: Mapping[str, Any], span_id: int, time: int) -> RawEntry:
    # Never missing: an event without attributes is a claim with no tool name (malformed).
    return _parsed_claim(dict(attributes), _CLAIM_EVENT_SPEC, span_id, time, None)
