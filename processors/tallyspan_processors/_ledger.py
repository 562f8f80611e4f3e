"""The ledger processor: per agent run, the observed tool calls against the agent's own log.

It sits in the wrapping chain below the checks (``worker > checks > ledger > sinks``) and sees every
ended span, in order, on the worker thread.

**Which run.** A run is the nearest ``invoke_agent`` / ``invoke_workflow`` span (``tallyspan.run``
makes one), else the trace's local root span. An ended span knows only its parent's id, and children
end before their parents, so ``on_start`` (which sees every live span, on the app's thread) records
``span id -> run span id`` in a bounded map; ``process`` looks the span up there when it ends.

**What is buffered.** Each run's entries (``_ledger_sources``): ordinary ``execute_tool`` spans on the
observed side; log-tool spans, log-tool calls requested by a model, and ``tallyspan.ledger.claim()``
events on the claimed side. A log call requested by the model and then executed as a tool is counted
once (same tool-call id). Entries are ordered by time (span end, event time) when the run ends, which
gives ``seq``. Buffers are bounded (drops counted in ``tallyspan.stats()``) and freed when the run ends.

**Content.** The arguments of log calls come from the content handed down with each span
(``_content``: the ContentBuffer, else ``gen_ai.tool.call.arguments`` / ``gen_ai.output.messages`` when
another instrumentation captured them).

**Privacy.** What the agent claims is its own free text. With content capture off, a claimed tool name
or call id leaves the process (in the sinks' records, the run span's entry and discrepancy events, and
the ``tallyspan.ledger.claim`` events of ``claim()``) only when it names a tool or call observed in the
run; otherwise it is replaced by ``unobserved`` before the books are reconciled, which pairs and flags
the claims exactly as the raw words would (a word matching nothing observed pairs with nothing).
Outcomes are normalised to ``succeeded``/``failed``/``rejected`` or reported malformed, and summaries
are kept only with capture on. A sink that writes to the user's own disk (``keeps_claimed_identifiers``,
the local store) is no place the words leave to: it gets the claimed tool names and call ids as the
agent wrote them when they are shaped as identifiers (``IDENTIFIER``), and the books reconciled over
those, so ``tallyspan ledger`` names the tool of a phantom log; it never gets a summary either.

**At the run's end.** ``reconcile()``; the run span is forwarded with ``tallyspan.ledger.balanced``,
``protocol_ok``, the counts, ``discrepancy_types`` (absent when there are none, like
``tallyspan.violation_types``), one ``tallyspan.ledger.entry`` event per entry (both columns, capped
at ``max_span_events``) and one ``tallyspan.ledger.discrepancy`` event per discrepancy, and status ERROR
when the books do not balance (``mark_error_status``). Entries and the reconciliation go to the
ledger sinks. Every run span is reconciled, even an empty one; a local root that is not a run span
only when something was entered for it. A workflow span or local root with agent runs nested in it and
nothing on its own books is their container (``is_run_container``): not reconciled, marked
``tallyspan.run.container``, and given the roll-up only.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan.ledger import (
    PROTOCOL_TYPES,
    Claim,
    Discrepancy,
    LedgerEntry,
    LedgerRecord,
    LedgerSink,
    LogToolSpec,
    Observed,
    Reconciliation,
    reconcile,
)
from tallyspan.plugin import Content, Settings, count, renew_lock_after_fork, swallowed
from tallyspan.plugin.processors import declares_run, is_run_container, record_run
from tallyspan_processors._enrich import enriched_copy
from tallyspan_processors._ledger_sources import RawEntry, entries_of
from tallyspan_processors._wrapping import StartHook, WrappingProcessor, flush_all, flush_in_turn

__all__ = ["LedgerProcessor", "ledger_component"]

_logger = logging.getLogger(__name__)

DEFAULT_MAX_TRACKED_SPANS: Final = 65536
DEFAULT_MAX_OPEN_RUNS: Final = 1024
DEFAULT_MAX_ENTRIES_PER_RUN: Final = 100_000
DEFAULT_MAX_SPAN_EVENTS: Final = 1000
_MAX_CLOSED_RUNS: Final = 4096
#: The calls of one run remembered one by one for its status ("in 2 of 5 calls"); past that, only counted.
_MAX_CALLS_PER_RUN: Final = 4096
#: What a claimed tool name or call id must look like for a sink on the user's own disk to get it with
#: capture off: the providers' own rule for tool names (letters, digits, ``_`` and ``-``), with ``.`` and
#: ``:`` for namespaced tools, at most 128 characters. Anything else is free text, ``unobserved`` there too.
IDENTIFIER: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass
class _Books:
    trace_id: int
    entries: list[RawEntry] = field(default_factory=list)
    log_call_ids: set[str] = field(default_factory=set)
    dropped: int = 0
    violation_count: int = 0
    """Violations on the spans below the run span (nested runs included), for the roll-up."""
    violation_types: set[str] = field(default_factory=set)
    nested_runs: int = 0
    """Runs that ended inside this one (a run with only these is their container)."""
    calls: dict[int, tuple[int, bool]] = field(default_factory=dict)
    """The calls below the run span (model calls, and any span with verdicts): span id -> (its parent's
    span id, violated); for the status, "... in 2 of 5 calls"."""
    more_calls: int = 0
    more_violating_calls: int = 0
    """Calls counted elsewhere: in runs that ended inside this one, or past ``_MAX_CALLS_PER_RUN``."""

    def add_call(self, span_id: int, parent_id: int, violated: bool) -> None:
        if len(self.calls) < _MAX_CALLS_PER_RUN:
            self.calls[span_id] = (parent_id, violated)
        else:
            self.more_calls += 1
            self.more_violating_calls += violated

    def call_counts(self) -> tuple[int, int]:
        """The calls below the run and how many of them violated. A span nested in another counted one
        is the same call (another instrumentation's span around ours, or inside it): counted once,
        violating if either is."""
        calls = self.calls
        outermost: dict[int, bool] = {}
        for span_id, (_, violated) in calls.items():
            top = span_id
            for _ in range(len(calls)):  # span ids never form a cycle; bounded all the same
                parent_id = calls[top][0]
                if parent_id not in calls:
                    break
                top = parent_id
            outermost[top] = outermost.get(top, False) or violated
        return (
            len(outermost) + self.more_calls,
            sum(outermost.values()) + self.more_violating_calls,
        )


class LedgerProcessor(WrappingProcessor):
    """Reconcile each agent run's books when its span ends, and forward the run span with the balance.

    Args:
        downstream: the processors the (enriched) spans go to.
        sinks: where entries and reconciliations are written (``tallyspan.ledger.LedgerSink``).
        spec: the log tool and its argument names.
        capture_content: put the agents' summaries on span events and in the sinks.
        mark_error_status: set status ERROR on run spans whose books do not balance.
        max_tracked_spans: live spans whose run is remembered; the oldest are forgotten (counted).
        max_open_runs: runs buffered at once; the oldest is dropped unreconciled (counted).
        max_entries_per_run: entries buffered per run; more are dropped (counted, and reported on the run).
        max_span_events: entry events, and discrepancy events, put on one run span at most; the sinks
            get everything, and the attributes always count everything.
    """

    def __init__(
        self,
        downstream: Sequence[SpanProcessor],
        *,
        sinks: Sequence[LedgerSink] = (),
        spec: LogToolSpec | None = None,
        capture_content: bool = False,
        mark_error_status: bool = True,
        max_tracked_spans: int = DEFAULT_MAX_TRACKED_SPANS,
        max_open_runs: int = DEFAULT_MAX_OPEN_RUNS,
        max_entries_per_run: int = DEFAULT_MAX_ENTRIES_PER_RUN,
        max_span_events: int = DEFAULT_MAX_SPAN_EVENTS,
    ) -> None:
        for label, value in (
            ("max_tracked_spans", max_tracked_spans),
            ("max_open_runs", max_open_runs),
            ("max_entries_per_run", max_entries_per_run),
        ):
            if value < 1:
                raise ValueError(f"{label} must be at least 1")
        # Only now: a refused processor must not stay a consumer of the content buffer (it would fill).
        super().__init__(downstream)
        self._sinks = tuple(sinks)
        self._spec = spec or LogToolSpec()
        self._capture_content = capture_content
        self._mark_error_status = mark_error_status
        self._max_tracked_spans = max_tracked_spans
        self._max_open_runs = max_open_runs
        self._max_entries_per_run = max_entries_per_run
        self._max_span_events = max(0, max_span_events)
        self._lock = threading.Lock()
        renew_lock_after_fork(self)  # on_start takes it on the app's threads, the worker on every span
        self._run_of: OrderedDict[int, int] = OrderedDict()
        self._parent_run: OrderedDict[int, int] = OrderedDict()
        self._runs: OrderedDict[int, _Books] = OrderedDict()
        self._closed_runs: OrderedDict[int, None] = OrderedDict()
        # Runs with a span started in them (their own span's end leaves them in _closed_runs).
        self._has_members: OrderedDict[int, bool] = OrderedDict()
        self._shut_down = False

    @property
    def sinks(self) -> tuple[LedgerSink, ...]:
        """The ledger sinks this processor writes to."""
        return self._sinks

    def _own_start_hooks(self) -> tuple[StartHook, ...]:
        return (self._start,)

    def _start(self, span: Span, parent_context: Context | None = None) -> None:
        """On the app's thread, at each span's start (the chain's ``on_start`` calls it directly): note
        the run the span belongs to."""
        try:
            span_id = span.get_span_context().span_id
            parent = span.parent
            with self._lock:
                enclosing = (
                    self._run_of.get(parent.span_id) if parent is not None and not parent.is_remote else None
                )
                if enclosing is not None:
                    # Only a run that had a span started in it can be reached after it ended (see process).
                    self._has_members[enclosing] = True
                    while len(self._has_members) > self._max_tracked_spans:
                        self._has_members.popitem(last=False)
                if enclosing is not None and not declares_run(span.attributes or {}):
                    self._run_of[span_id] = enclosing
                else:
                    self._run_of[span_id] = span_id  # it starts a run
                    if enclosing is not None:
                        self._parent_run[span_id] = enclosing  # its verdicts roll up there too
                        while len(self._parent_run) > self._max_tracked_spans:
                            self._parent_run.popitem(last=False)
                while len(self._run_of) > self._max_tracked_spans:
                    self._run_of.popitem(last=False)
                    count("dropped.ledger_tracked_spans")
        except Exception:  # losing one span's run must not break the span's start in the app
            swallowed(_logger, "ledger.on_start", "the ledger processor failed in on_start")

    def process(self, span: ReadableSpan, content: Content | None) -> ReadableSpan:
        context = span.context
        if context is None:
            return span
        span_id = context.span_id
        with self._lock:
            run_id = self._run_of.pop(span_id, None)
        tracked = run_id is not None
        if run_id is None:  # started before us, or forgotten: its parent's run, else its own
            parent = span.parent
            with self._lock:
                known = (
                    self._run_of.get(parent.span_id) if parent is not None and not parent.is_remote else None
                )
            run_id = known if known is not None else span_id
        for entry in entries_of(span, content, self._spec):
            self._enter(run_id, context.trace_id, entry)
        if not self._capture_content:
            span = self._redact_claim_events(span, run_id)
        if run_id != span_id:
            own_count, own_types = _verdicts(span)
            if own_count or _is_model_call(span):
                parent_id = span.parent.span_id if span.parent is not None else 0
                self._add_verdicts(run_id, context.trace_id, own_count, own_types, call=(span_id, parent_id))
            return span
        with self._lock:
            books = self._runs.pop(span_id, None)
            parent_run = self._parent_run.pop(span_id, None)
            had_members = self._has_members.pop(span_id, False)
            # A tracked run no span was started in (a lone model call) can receive nothing more: once
            # its span is no longer in _run_of, a span starting below it starts a run of its own. Not
            # remembering it keeps _closed_runs (4,096 ints) from pinning memory after a backlog.
            if books is not None or parent_run is not None or had_members or not tracked:
                self._closed_runs[span_id] = None
                while len(self._closed_runs) > _MAX_CLOSED_RUNS:
                    self._closed_runs.popitem(last=False)
        attributes = span.attributes or {}
        if books is None:
            if parent_run is None and not declares_run(attributes):
                return span  # nothing on its books, no roll-up, not a run: a lone model call
            books = _Books(context.trace_id)
        if parent_run is not None:
            own_count, own_types = _verdicts(span)
            calls, violating_calls = books.call_counts()
            self._add_verdicts(
                parent_run,
                context.trace_id,
                books.violation_count + own_count,
                books.violation_types | set(own_types),
                nested_run=True,
                nested_calls=(calls + bool(own_count), violating_calls + bool(own_count)),
            )
        has_books = bool(books.entries) or books.dropped > 0
        container = is_run_container(attributes, nested_runs=books.nested_runs, has_books=has_books)
        # A local root with nothing on its books is no agent run to reconcile (a lone model call).
        reconciled = not container and (declares_run(attributes) or has_books)
        if not reconciled and not container and not books.violation_count:
            return span
        return self._close(span, books, reconciled, container)

    def forget(self, span: ReadableSpan) -> None:
        # Left tracked, dropped spans would fill _run_of and push live runs out of it (their calls then
        # become runs of their own); a dropped run span's books can never be closed.
        context = span.context
        if context is not None:
            span_id = context.span_id
            with self._lock:
                run_id = self._run_of.pop(span_id, None)
                self._has_members.pop(span_id, None)
                if run_id == span_id:
                    if self._runs.pop(span_id, None) is not None:
                        count("dropped.ledger_runs")
                    self._closed_runs[span_id] = None  # entries still queued for it are late, counted
                    while len(self._closed_runs) > _MAX_CLOSED_RUNS:
                        self._closed_runs.popitem(last=False)
        super().forget(span)

    def _redact_claim_events(self, span: ReadableSpan, run_id: int) -> ReadableSpan:
        """``span`` with the free text of its ``tallyspan.ledger.claim`` events replaced where it names
        nothing observed in its run so far (capture off)."""
        if not any(event.name == semconv.EVENT_LEDGER_CLAIM for event in span.events):
            return span
        with self._lock:
            books = self._runs.get(run_id)
            names, ids = self._observed(books.entries if books is not None else ())
        events = []
        for event in span.events:
            attributes = event.attributes or {}
            if event.name == semconv.EVENT_LEDGER_CLAIM:
                attributes = dict(attributes)
                for key, known in ((semconv.LEDGER_TOOL_NAME, names), (semconv.LEDGER_CALL_ID, ids)):
                    value = attributes.get(key)
                    if value is not None and value not in known:
                        attributes[key] = semconv.LEDGER_UNOBSERVED
                event = Event(event.name, attributes, timestamp=event.timestamp)
            events.append(event)
        return enriched_copy(span, own_events=events)

    def _observed(self, entries: Iterable[RawEntry]) -> tuple[set[str], set[str]]:
        """The tool names (and the log tool's) and call ids observed among ``entries``."""
        names = {self._spec.tool}
        ids: set[str] = set()
        for entry in entries:
            if entry.side == semconv.LEDGER_SIDE_OBSERVED:
                if entry.tool_name:
                    names.add(entry.tool_name)
                if entry.call_id is not None:
                    ids.add(entry.call_id)
        return names, ids

    def _redacted(self, entries: list[RawEntry], *, keep_identifiers: bool = False) -> list[RawEntry]:
        """``entries`` with each claim's tool name and call id replaced by ``unobserved`` unless observed
        (or, ``keep_identifiers``, unless shaped as an identifier)."""
        names, ids = self._observed(entries)

        def kept(value: str | None, known: set[str]) -> str | None:
            if value is None or value in known or (keep_identifiers and IDENTIFIER.fullmatch(value)):
                return value
            return semconv.LEDGER_UNOBSERVED

        return [
            entry
            if entry.side == semconv.LEDGER_SIDE_OBSERVED
            else dataclasses.replace(
                entry, tool_name=kept(entry.tool_name, names), call_id=kept(entry.call_id, ids)
            )
            for entry in entries
        ]

    def _open_books(self, run_id: int, trace_id: int, late_key: str) -> _Books | None:
        """The books of ``run_id`` (opened if new), or None when the run was already closed (counted)."""
        if run_id in self._closed_runs:
            count(late_key)  # its run span has ended: what comes now cannot reach it
            return None
        books = self._runs.get(run_id)
        if books is None:
            books = self._runs[run_id] = _Books(trace_id)
            while len(self._runs) > self._max_open_runs:
                self._runs.popitem(last=False)
                count("dropped.ledger_runs")
        return books

    def _add_verdicts(
        self,
        run_id: int,
        trace_id: int,
        violations: int,
        types: Iterable[str],
        *,
        call: tuple[int, int] | None = None,
        nested_run: bool = False,
        nested_calls: tuple[int, int] = (0, 0),
    ) -> None:
        """Roll verdicts up into run ``run_id``: those of one ``call`` below it (its span id and its
        parent's), or, ``nested_run``, those of a run that ended in it with its ``nested_calls`` (calls,
        violating calls)."""
        with self._lock:
            if not violations and run_id in self._closed_runs:
                return  # a clean call or nested run that ended after its run: nothing was lost
            books = self._open_books(run_id, trace_id, "dropped.run_late_verdicts")
            if books is not None:
                books.violation_count += violations
                books.violation_types.update(types)
                if call is not None:
                    books.add_call(call[0], call[1], violations > 0)
                if nested_run:
                    books.nested_runs += 1
                    books.more_calls += nested_calls[0]
                    books.more_violating_calls += nested_calls[1]

    def _enter(self, run_id: int, trace_id: int, entry: RawEntry) -> None:
        with self._lock:
            books = self._open_books(run_id, trace_id, "dropped.ledger_late_entries")
            if books is None:
                return
            if entry.log_call_id is not None:
                if entry.log_call_id in books.log_call_ids:
                    return  # requested by the model, then executed: one call, one claim
                books.log_call_ids.add(entry.log_call_id)
            if len(books.entries) >= self._max_entries_per_run:
                books.dropped += 1
                count("dropped.ledger_entries")
                return
            books.entries.append(entry)

    def _close(self, span: ReadableSpan, books: _Books, reconciled: bool, container: bool) -> ReadableSpan:
        """The run span with its books: the reconciliation (when ``reconciled``), the container mark and
        the roll-up."""
        attributes: dict[str, AttributeValue] = {}
        events: list[Event] = []
        problems: list[str] = []
        if container:
            attributes[semconv.RUN_CONTAINER] = True
        if reconciled:
            self._reconcile(span, books, attributes, events, problems)
        if books.violation_count:
            types = sorted(books.violation_types)
            attributes[semconv.RUN_VIOLATION_COUNT] = books.violation_count
            attributes[semconv.RUN_VIOLATION_TYPES] = types
            attributes[semconv.VIOLATED] = True
            problems.append(_violations_text(types, *books.call_counts()))
        status = None
        if problems and self._mark_error_status and span.status.status_code is not StatusCode.ERROR:
            status = Status(StatusCode.ERROR, "; ".join(problems))
        return enriched_copy(span, attributes=attributes, events=events, status=status)

    def _reconcile(
        self,
        span: ReadableSpan,
        books: _Books,
        attributes: dict[str, AttributeValue],
        events: list[Event],
        problems: list[str],
    ) -> None:
        # Stable sort: entries at the same instant keep the order in which their spans ended.
        ordered = sorted(books.entries, key=lambda entry: entry.time_unix_nano)
        run_span_id = span.context.span_id if span.context is not None else 0
        own = span.attributes or {}
        run_name = str(
            own.get(semconv.RUN_NAME)
            or own.get(semconv.GEN_AI_AGENT_NAME)
            or own.get(semconv.GEN_AI_WORKFLOW_NAME)
            or span.name
        )
        shown = ordered if self._capture_content else self._redacted(ordered)
        records, record = self._books(shown, books.trace_id, run_span_id, run_name, span.end_time or 0)
        local = None
        if not self._capture_content and any(_keeps_identifiers(sink) for sink in self._sinks):
            kept = self._redacted(ordered, keep_identifiers=True)
            if kept != shown:  # a claimed identifier the run never observed: the user's disk may name it
                local = self._books(kept, books.trace_id, run_span_id, run_name, span.end_time or 0)
        self._export(records, record, local)
        result = record.reconciliation
        observed_count, claimed_count = record.observed_count, record.claimed_count
        self._describe(
            span, result, records, observed_count, claimed_count, books.dropped, attributes, events
        )
        record_run(result.balanced)
        if not result.balanced:
            problems.append(_unbalanced_text(result.discrepancies))

    def _books(
        self, ordered: Sequence[RawEntry], trace_id: int, run_span_id: int, run_name: str, end: int
    ) -> tuple[list[LedgerEntry], LedgerRecord]:
        """The records of the ``ordered`` entries of one run, and its reconciliation."""
        observed: list[Observed] = []
        claims: list[Claim] = []
        for seq, entry in enumerate(ordered):
            if entry.side == semconv.LEDGER_SIDE_OBSERVED:
                observed.append(Observed(entry.call_id, entry.tool_name or "", entry.outcome or "", seq))
            else:
                claims.append(
                    Claim(entry.call_id, entry.tool_name, entry.outcome, entry.summary, seq, entry.malformed)
                )
        result = reconcile(observed, claims, log_tool=self._spec.tool)
        observed_count = sum(1 for o in observed if o.tool_name != self._spec.tool)
        records = [self._record(trace_id, run_span_id, seq, entry) for seq, entry in enumerate(ordered)]
        return records, LedgerRecord(
            trace_id, run_span_id, run_name, result, observed_count, len(claims), end
        )

    def _record(self, trace_id: int, run_span_id: int, seq: int, entry: RawEntry) -> LedgerEntry:
        return LedgerEntry(
            trace_id=trace_id,
            run_span_id=run_span_id,
            side=entry.side,
            seq=seq,
            call_id=entry.call_id,
            tool_name=entry.tool_name,
            outcome=entry.outcome,
            summary=entry.summary if self._capture_content else "",
            span_id=entry.span_id or None,
            time_unix_nano=entry.time_unix_nano,
            malformed=entry.malformed,
        )

    def _describe(
        self,
        span: ReadableSpan,
        result: Reconciliation,
        records: Sequence[LedgerEntry],
        observed_count: int,
        claimed_count: int,
        dropped: int,
        attributes: dict[str, AttributeValue],
        events: list[Event],
    ) -> None:
        """Put the reconciliation on the run span's ``attributes`` and ``events``."""
        attributes.update(
            {
                semconv.LEDGER_BALANCED: result.balanced,
                semconv.LEDGER_PROTOCOL_OK: result.protocol_ok,
                semconv.LEDGER_OBSERVED_COUNT: observed_count,
                semconv.LEDGER_CLAIMED_COUNT: claimed_count,
                semconv.LEDGER_DISCREPANCY_COUNT: len(result.discrepancies),
            }
        )
        if result.discrepancy_types:
            attributes[semconv.LEDGER_DISCREPANCY_TYPES] = tuple(result.discrepancy_types)
        if dropped:
            attributes[semconv.LEDGER_DROPPED_ENTRIES] = dropped
        events.extend(_entry_event(record) for record in records[: self._max_span_events])
        if len(records) > self._max_span_events:
            count("dropped.ledger_span_events", len(records) - self._max_span_events)
        end = span.end_time
        shown = result.discrepancies[: self._max_span_events]
        if len(result.discrepancies) > len(shown):
            count("dropped.ledger_span_events", len(result.discrepancies) - len(shown))
        for discrepancy in shown:
            event_attributes: dict[str, AttributeValue] = {
                semconv.LEDGER_DISCREPANCY_TYPE: discrepancy.type,
                semconv.LEDGER_DETAIL: discrepancy.detail,
            }
            if discrepancy.call_id is not None:
                event_attributes[semconv.LEDGER_CALL_ID] = discrepancy.call_id
            events.append(Event(semconv.EVENT_LEDGER_DISCREPANCY, event_attributes, timestamp=end))

    def _export(
        self,
        records: Sequence[LedgerEntry],
        record: LedgerRecord,
        local: tuple[Sequence[LedgerEntry], LedgerRecord] | None = None,
    ) -> None:
        """Write the books to every sink; those on the user's own disk get the ``local`` books if any."""
        for sink in self._sinks:
            entries, reconciled = (
                local if local is not None and _keeps_identifiers(sink) else (records, record)
            )
            try:
                if entries and not sink.export_entries(entries):
                    count("errors.ledger_sink.entries")
                if not sink.export_reconciliation(reconciled):
                    count("errors.ledger_sink.reconciliation")
            except Exception:  # a sink breaking its promise not to raise must not cost the span
                swallowed(_logger, "ledger.sink", f"ledger sink {type(sink).__name__} raised")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # One deadline for all: each sink given the whole timeout made exit wait for every hung backend in
        # turn (5.6 s for a 3 s budget); what a sink cannot deliver by then stays in its spool.
        deadline = time.monotonic() + timeout_millis / 1000
        flushed = flush_all(self._downstream, timeout_millis)
        return (
            flush_in_turn(
                self._sinks,
                deadline,
                lambda sink, remaining_millis: sink.force_flush(remaining_millis),
                lambda sink: swallowed(
                    _logger, "ledger.sink.flush", f"ledger sink {type(sink).__name__} failed to flush"
                ),
            )
            and flushed
        )

    def shutdown(self) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        with self._lock:
            if self._runs:
                count("dropped.ledger_runs", len(self._runs))  # runs that never ended are not reconciled
            self._runs.clear()
            self._run_of.clear()
            self._closed_runs.clear()
            self._has_members.clear()
        for sink in self._sinks:
            try:
                sink.shutdown()
            except Exception:  # one sink's failure must not keep the others open
                swallowed(
                    _logger, "ledger.sink.shutdown", f"ledger sink {type(sink).__name__} failed to shut down"
                )
        super().shutdown()


def _keeps_identifiers(sink: LedgerSink) -> bool:
    """Whether ``sink`` writes to the user's own disk only (``keeps_claimed_identifiers = True``)."""
    return getattr(sink, "keeps_claimed_identifiers", False) is True


def _is_model_call(span: ReadableSpan) -> bool:
    return (span.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) in semconv.MODEL_OPERATIONS


def _violations_text(types: Sequence[str], calls: int, violating_calls: int) -> str:
    """The run's status for the violations below it, what failed first (a trace list cuts the rest):
    ``not_japanese, refusal in 2 of 5 calls``."""
    named = ", ".join(types)
    if not violating_calls:  # verdicts whose spans were not counted (none seen here): the types alone
        return f"{named} below"
    return f"{named} in {violating_calls} of {calls} call{'' if calls == 1 else 's'}"


def _unbalanced_text(discrepancies: Iterable[Discrepancy]) -> str:
    """The run's status for books that do not balance: each discrepancy type with the tool of its call,
    ``ledger unbalanced: phantom_log issue_refund``. The protocol findings leave the books balanced and
    are left out; a claimed tool the run never observed is named only with content capture on (else the
    books hold ``unobserved`` in its place, and the type stands alone)."""
    named: set[str] = set()
    for discrepancy in discrepancies:
        if discrepancy.type in PROTOCOL_TYPES:
            continue
        tool = discrepancy.tool_name
        named.add(
            f"{discrepancy.type} {tool}" if tool and tool != semconv.LEDGER_UNOBSERVED else discrepancy.type
        )
    return f"ledger unbalanced: {', '.join(sorted(named))}"


def _verdicts(span: ReadableSpan) -> tuple[int, tuple[str, ...]]:
    """The number and types of the violations the checks put on ``span`` (0 and () when clean)."""
    attributes = span.attributes or {}
    types = attributes.get(semconv.VIOLATION_TYPES)
    if not isinstance(types, Sequence) or isinstance(types, str) or not types:
        return 0, ()
    declared = attributes.get(semconv.VIOLATION_COUNT)
    number = declared if isinstance(declared, int) and not isinstance(declared, bool) else len(types)
    return number, tuple(str(kind) for kind in types)


def _entry_event(record: LedgerEntry) -> Event:
    attributes: dict[str, AttributeValue] = {
        semconv.LEDGER_SIDE: record.side,
        semconv.LEDGER_SEQ: record.seq,
    }
    for key, value in (
        (semconv.LEDGER_CALL_ID, record.call_id),
        (semconv.LEDGER_TOOL_NAME, record.tool_name),
        (semconv.LEDGER_OUTCOME, record.outcome),
        (semconv.LEDGER_SUMMARY, record.summary or None),
        (semconv.LEDGER_MALFORMED, record.malformed),
    ):
        if value is not None:
            attributes[key] = value
    return Event(semconv.EVENT_LEDGER_ENTRY, attributes, timestamp=record.time_unix_nano or None)


def ledger_component(downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor:
    """The ``ledger`` entry point of ``tallyspan.components``."""
    return LedgerProcessor(
        downstream,
        sinks=tuple(sink for sink in settings.ledger_sinks if isinstance(sink, LedgerSink)),
        spec=LogToolSpec(tool=settings.ledger_log_tool),
        capture_content=settings.capture_content,
        mark_error_status=settings.mark_error_status,
    )
