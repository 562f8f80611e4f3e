"""The checks processor: every ended model span checked against its stage's contract.

It sits in the wrapping chain (``worker > checks > ledger > sinks``) and runs on the worker thread.
For each span whose ``gen_ai.operation.name`` is a model operation it

1. finds the contract: ``settings.contracts.contract_for(tallyspan.stage, gen_ai.agent.name, model)``;
   spans without one are forwarded untouched;
2. reads the output from the content handed down with the span (``_content``: the ContentBuffer,
   else what other instrumentations captured); without it only the non-text checks run. A turn that requests tool
   calls (finish reason ``tool_calls`` / ``tool_use``, or tool-call parts) is a step of the agent
   loop, not a deliverable: its text (often empty, or a line of narration) is not judged against the
   contract either; the ledger accounts for the calls it asks for;
3. runs :func:`tallyspan.check` with the span's own facts: its duration (``deadline_s``), its error
   (``error.type``, exception events, status), its wait (``tallyspan.enqueued_at`` vs its start), and
   the prompts of other model calls in flight at the same time;
4. forwards an enriched copy: ``tallyspan.violation_types``, ``.violation_count``, ``.failure_class``,
   ``.violated``, ``.contract``, one ``tallyspan.violation`` event per violation, status ERROR (unless
   ``mark_error_status`` is off) and, with ``evaluation_events``, ``gen_ai.evaluation.result`` events.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.plugin import Content, ModelContent, Settings, renew_lock_after_fork, swallowed, warn_once
from tallyspan.plugin.processors import record_violations
from tallyspan_processors._enrich import enriched_copy, plain_attributes
from tallyspan_processors._wrapping import WrappingProcessor

if TYPE_CHECKING:
    # The engine loads with the first contract (tallyspan.plugin imports it on first use): a chain
    # without contracts never needs it.
    from tallyspan.plugin.processors import CheckResult, Contract, ContractSet

__all__ = ["ChecksProcessor", "checks_component"]

_logger = logging.getLogger(__name__)

#: Recent model calls remembered for answer_to_other_question (prompts in flight, repeated outputs).
DEFAULT_RECENT_CALLS: Final = 64
_EVALUATION_PREFIX: Final = "tallyspan."
#: The check error recorded when the engine as a whole failed on a span (each rule has its own guard).
_ENGINE_FAILED: Final = "checks"
#: Provider finish reasons meaning "the model handed the turn to tools" (OpenAI, Anthropic, GenAI).
_TOOL_FINISH_REASONS: Final = frozenset({"tool_calls", "function_call", "tool_use", "tool_call"})


class _Call(NamedTuple):
    start: int
    end: int
    stage: str | None
    prompt: str
    prompt_key: str
    """The stripped prompt: a call with the same prompt is neither another question nor its answer."""
    output: str
    output_key: int
    """Hash of the stripped output: only calls with the same output are candidates for a repeat."""


class _RecentCalls:
    """The last ``size`` model calls, indexed for the two questions a check asks of them, so that it looks
    only at the calls that can answer, not at all of them (a scan of 64 calls cost about 20 µs a span):

    - which other prompts were in flight with a call: the calls ordered by end time, so those that ended
      after it started are found by bisection (usually none or a few);
    - which other prompts got the same output at the same stage: the calls by (output hash, stage), then
      by prompt, so a call repeated with its own prompt adds nothing to look at.

    Not thread-safe: the processor holds its lock around every use.
    """

    __slots__ = ("_arrived", "_by_answer", "_ended", "_ends", "_size")

    def __init__(self, size: int) -> None:
        self._size = max(0, size)
        self._arrived: deque[_Call] = deque()  # the order they were remembered in: the oldest goes first
        # The calls by end time (those that ended together in the order they came), and their end times
        # apart: bisecting a list of ints compares ints, not tuples.
        self._ended: list[_Call] = []
        self._ends: list[int] = []
        # (output hash, stage) -> prompt key -> [calls remembered, the latest of them]
        self._by_answer: dict[tuple[int, str | None], dict[str, list[Any]]] = {}

    def in_flight(self, start: int, end: int, prompt_key: str) -> list[str]:
        """The distinct prompts, other than ``prompt_key``'s, of the calls that overlapped ``start``-``end``."""
        first = bisect_right(self._ends, start)  # the calls that ended after it started
        if first == len(self._ends):
            return []  # calls one after the other: none
        return list(
            dict.fromkeys(
                call.prompt
                for call in self._ended[first:]
                if call.start < end and call.prompt_key != prompt_key
            )
        )

    def same_answer(self, output_key: int, stage: str | None, prompt_key: str) -> list[tuple[str, str]]:
        """(prompt, output) of the calls of ``stage`` with the same output hash and another prompt, one
        per prompt."""
        prompts = self._by_answer.get((output_key, stage))
        if not prompts:
            return []
        return [(latest.prompt, latest.output) for key, (_, latest) in prompts.items() if key != prompt_key]

    def add(self, call: _Call) -> None:
        """Remember ``call``; forget the oldest beyond the size."""
        if not self._size:
            return
        self._arrived.append(call)
        index = bisect_right(self._ends, call.end)  # after the calls that ended at the same time
        self._ends.insert(index, call.end)
        self._ended.insert(index, call)
        entry = self._by_answer.setdefault((call.output_key, call.stage), {}).setdefault(
            call.prompt_key, [0, call]
        )
        entry[0] += 1
        entry[1] = call
        if len(self._arrived) > self._size:
            self._forget(self._arrived.popleft())

    def _forget(self, call: _Call) -> None:
        index = bisect_left(self._ends, call.end)
        while self._ended[index] is not call:
            index += 1
        del self._ended[index]
        del self._ends[index]
        answer = (call.output_key, call.stage)
        prompts = self._by_answer[answer]
        entry = prompts[call.prompt_key]
        entry[0] -= 1
        if not entry[0]:
            del prompts[call.prompt_key]
            if not prompts:
                del self._by_answer[answer]


class ChecksProcessor(WrappingProcessor):
    """Checks model spans against their contracts and forwards enriched copies.

    Args:
        downstream: the processors to forward to.
        contracts: the loaded contracts; None forwards every span untouched.
        mark_error_status: set status ERROR on violating spans.
        evaluation_events: add ``gen_ai.evaluation.result`` events too.
        recent_calls: model calls remembered for the cross-call checks.
    """

    def __init__(
        self,
        downstream: Sequence[SpanProcessor],
        contracts: ContractSet | None,
        *,
        mark_error_status: bool = True,
        evaluation_events: bool = False,
        recent_calls: int = DEFAULT_RECENT_CALLS,
    ) -> None:
        super().__init__(downstream)
        self._contracts = contracts
        # The engine, looked up on the first check (it loads then, not at instrument()), not per span.
        self._check_output: Callable[..., CheckResult] | None = None
        self._mark_error_status = mark_error_status
        self._evaluation_events = evaluation_events
        self._recent = _RecentCalls(recent_calls)
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    def process(self, span: ReadableSpan, content: Content | None) -> ReadableSpan:
        if self._contracts is None:
            return span
        # One plain copy for the reads below and the enriched copy: each read of the SDK's bounded
        # mapping goes through two Python-level calls.
        attributes: dict[str, Any] = plain_attributes(span)
        if attributes.get(semconv.GEN_AI_OPERATION_NAME) not in semconv.MODEL_OPERATIONS:
            return span
        stage = _str(attributes.get(semconv.STAGE))
        found = self._contracts.contract_for(
            stage,
            _str(attributes.get(semconv.GEN_AI_AGENT_NAME)),
            _str(attributes.get(semconv.GEN_AI_RESPONSE_MODEL))
            or _str(attributes.get(semconv.GEN_AI_REQUEST_MODEL)),
        )
        if found is None:
            if stage is not None:
                _warn_unbound_stage(stage, self._contracts)
            return span
        name, contract = found
        model_content = content if isinstance(content, ModelContent) else None
        try:
            result = self._check(span, attributes, stage, contract, model_content)
        except Exception:  # the engine guards each rule; this is the last line: the span says so
            swallowed(_logger, "checks.engine", "tallyspan's checks failed on a span")
            from tallyspan.plugin.processors import CheckResult

            result = CheckResult(check_errors=(_ENGINE_FAILED,))
        if result.violations:
            record_violations(
                ((violation.type.value, violation.failure_class.value) for violation in result.violations),
                stage,
            )
        return self._enriched(span, name, result, attributes)

    def _check(
        self,
        span: ReadableSpan,
        attributes: Mapping[str, Any],
        stage: str | None,
        contract: Contract,
        content: ModelContent | None,
    ) -> CheckResult:
        start, end = span.start_time or 0, span.end_time or 0
        if content is not None and (
            content.tool_calls or _requested_tools(attributes) or attributes.get(semconv.STREAM_ABANDONED)
        ):
            # A step of the agent loop, or an answer the app stopped reading: only the non-text checks.
            content = None
        prompt = content.prompt if content is not None else None
        prompt_key = prompt.strip() if prompt else ""
        output_key = hash(content.output_text.strip()) if content is not None else 0
        with self._lock:
            # Only other questions matter, each once: an agent loop repeating its own prompt costs nothing.
            other_prompts = self._recent.in_flight(start, end, prompt_key)
            other_answers = self._recent.same_answer(output_key, stage, prompt_key)
            if content is not None and prompt:
                self._recent.add(
                    _Call(start, end, stage, prompt, prompt_key, content.output_text, output_key)
                )
        enqueued_at = attributes.get(semconv.ENQUEUED_AT)
        waited = start / 1e9 - float(enqueued_at) if isinstance(enqueued_at, (int, float)) and start else None
        check = self._check_output
        if check is None:
            check = self._check_output = _engine_check()
        return check(
            content.output_text if content is not None else None,
            contract,
            prompt=prompt,
            other_prompts=other_prompts,
            other_answers=other_answers,
            reasoning_text=content.reasoning_text if content is not None else "",
            elapsed_s=(end - start) / 1e9 if start and end else None,
            error=_error_of(span, attributes),
            waited_s=waited,
        )

    def _enriched(
        self, span: ReadableSpan, contract_name: str, result: CheckResult, attributes: dict[str, Any]
    ) -> ReadableSpan:
        added: dict[str, AttributeValue] = {semconv.CONTRACT: contract_name}
        if result.check_errors:
            added[semconv.CHECK_ERRORS] = list(result.check_errors)
        events: list[Event] = []
        timestamp = span.end_time
        if result.violations:
            added[semconv.VIOLATION_TYPES] = list(result.violation_types)
            added[semconv.VIOLATION_COUNT] = len(result.violations)
            added[semconv.FAILURE_CLASS] = result.failure_class or ""
            added[semconv.VIOLATED] = True
            for violation in result.violations:
                events.append(
                    Event(
                        semconv.EVENT_VIOLATION,
                        {
                            semconv.VIOLATION_TYPE: violation.type.value,
                            semconv.VIOLATION_FAILURE_CLASS: violation.failure_class.value,
                            semconv.VIOLATION_DETAIL: violation.detail,
                        },
                        timestamp=timestamp,
                    )
                )
        if self._evaluation_events:
            events.extend(_evaluation_events(contract_name, result, timestamp))
        status = None
        if result.violations and self._mark_error_status and span.status.status_code is not StatusCode.ERROR:
            status = Status(StatusCode.ERROR, f"tallyspan: {', '.join(result.violation_types)}")
        return enriched_copy(span, attributes=added, events=events, status=status, own_attributes=attributes)


def _engine_check() -> Callable[..., CheckResult]:
    from tallyspan.plugin.processors import check

    return check


def _warn_unbound_stage(stage: str, contracts: ContractSet) -> None:
    """A stage no contract binds to is a silent hole (often a typo): say so once, naming what exists."""
    warn_once(
        ("stage without contract", stage),
        "tallyspan: model calls of stage %r are not checked: no contract binds to it (contracts: %s). "
        "Check the spelling, or add a 'default:' contract.",
        stage,
        ", ".join(sorted(contracts.contracts)) or "none",
    )


def _evaluation_events(contract_name: str, result: CheckResult, timestamp: int | None) -> list[Event]:
    events = [
        Event(
            semconv.EVENT_GEN_AI_EVALUATION_RESULT,
            {
                semconv.GEN_AI_EVALUATION_NAME: f"{_EVALUATION_PREFIX}{violation.type.value}",
                semconv.GEN_AI_EVALUATION_SCORE_LABEL: "fail",
                semconv.GEN_AI_EVALUATION_SCORE_VALUE: 0.0,
                semconv.GEN_AI_EVALUATION_EXPLANATION: violation.detail,
            },
            timestamp=timestamp,
        )
        for violation in result.violations
    ]
    events.append(
        Event(
            semconv.EVENT_GEN_AI_EVALUATION_RESULT,
            {
                semconv.GEN_AI_EVALUATION_NAME: f"{_EVALUATION_PREFIX}contract.{contract_name}",
                semconv.GEN_AI_EVALUATION_SCORE_LABEL: "pass" if result.ok else "fail",
                semconv.GEN_AI_EVALUATION_SCORE_VALUE: 1.0 if result.ok else 0.0,
            },
            timestamp=timestamp,
        )
    )
    return events


def _requested_tools(attributes: Mapping[str, Any]) -> bool:
    reasons = attributes.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS)
    if reasons is None:
        return False
    if isinstance(reasons, str):
        return reasons in _TOOL_FINISH_REASONS
    # A tuple (what the SDK keeps) is tested before the ABC, whose isinstance costs a few microseconds.
    if not isinstance(reasons, (tuple, list)) and not isinstance(reasons, Sequence):
        return False
    return any(reason in _TOOL_FINISH_REASONS for reason in reasons)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _error_of(span: ReadableSpan, attributes: Mapping[str, Any]) -> str | None:
    """The span's failure as text for the engine: error.type, exception events, status description."""
    if span.status.status_code is not StatusCode.ERROR and semconv.ERROR_TYPE not in attributes:
        return None
    pieces: list[str] = []
    error_type = attributes.get(semconv.ERROR_TYPE)
    if error_type is not None:
        pieces.append(str(error_type))
    for event in span.events:
        if event.name == semconv.EVENT_EXCEPTION and event.attributes:
            exception_type = event.attributes.get(semconv.EXCEPTION_TYPE, "")
            pieces.append(f"{exception_type}: {event.attributes.get(semconv.EXCEPTION_MESSAGE, '')}")
    if span.status.description:
        pieces.append(span.status.description)
    return " | ".join(pieces) if pieces else "error"


def checks_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor:
    """The ``checks`` entry point of ``tallyspan.components``."""
    return ChecksProcessor(
        downstream,
        settings.contracts,
        mark_error_status=settings.mark_error_status,
        evaluation_events=settings.evaluation_events,
    )
