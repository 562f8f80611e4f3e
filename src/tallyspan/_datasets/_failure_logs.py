"""Failure logs: one record per failure, in the fields of the public "ai-agent-failure-logs" dataset.

Usage::

    stats = CardStats()
    for trace in traces:
        for record in failure_records(trace, FailureFilter(stages={"weekly_report"})):
            out.write(json.dumps(record) + "\\n")
            stats.add(record)
    card = render_card(stats, data_file="failures.jsonl", filters=...)

A record is a failing model call (its violations together: ``local_inference`` when the worst is a
timeout or a process error of the call, else ``task_execution``) or a run whose books do not balance or
whose logging protocol was broken (``task_execution``, class ``ledger_discrepancy``). Every field is
built from verdicts, their content-free details and the contract terms; no field quotes an output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final

from tallyspan._contract._contracts import ContractSet
from tallyspan._datasets._terms import explain
from tallyspan._engine._taxonomy import FailureClass, most_severe
from tallyspan._store._store_traces import SpanData, TraceData

__all__ = [
    "FIELDS",
    "LOCAL_INFERENCE",
    "TASK_EXECUTION",
    "CardStats",
    "FailureFilter",
    "failure_records",
    "iso_utc",
    "render_card",
]

TASK_EXECUTION: Final = "task_execution"
LOCAL_INFERENCE: Final = "local_inference"
#: Failure classes of the model call itself rather than of the task it served.
_INFERENCE_CLASSES: Final = frozenset({FailureClass.TIMEOUT.value, FailureClass.PROCESS_ERROR.value})
#: The record's fields, in the public dataset's order.
FIELDS: Final = (
    "source",
    "at",
    "stage",
    "failure_class",
    "violations",
    "violation_types",
    "detail",
    "duration_sec",
    "duration_ms",
    "model",
)


def iso_utc(unix_nano: int | None) -> str | None:
    """``2026-05-01T09:30:00.123456Z`` for a Unix time in nanoseconds."""
    if unix_nano is None:
        return None
    moment = datetime.fromtimestamp(unix_nano / 1e9, tz=timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class FailureFilter:
    """Which records to keep; an empty set keeps all. Times are Unix nanoseconds of the failure."""

    since: int | None = None
    until: int | None = None
    stages: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()

    def keeps_time(self, unix_nano: int | None) -> bool:
        """True when ``unix_nano`` is inside the window (an unknown time is kept only without a window)."""
        if unix_nano is None:
            return self.since is None and self.until is None
        return (self.since is None or unix_nano >= self.since) and (
            self.until is None or unix_nano < self.until
        )

    def keeps(self, record: Mapping[str, Any], unix_nano: int | None) -> bool:
        """True when the record passes every filter."""
        return (
            self.keeps_time(unix_nano)
            and (not self.stages or record["stage"] in self.stages)
            and (not self.types or not self.types.isdisjoint(record["violation_types"]))
            and (not self.classes or record["failure_class"] in self.classes)
        )

    def describe(self) -> list[str]:
        """The filters in words, for the card."""
        words = []
        if self.since is not None:
            words.append(f"since {iso_utc(self.since)}")
        if self.until is not None:
            words.append(f"until {iso_utc(self.until)}")
        for label, values in (("stage", self.stages), ("type", self.types), ("class", self.classes)):
            if values:
                words.append(f"{label} in {', '.join(sorted(values))}")
        return words


def _worst(classes: Iterable[str | None]) -> str | None:
    known = []
    for name in classes:
        try:
            known.append(FailureClass(name))
        except ValueError:  # a class from a newer tallyspan or another producer: not ranked
            continue
    worst = most_severe(known)
    if worst is not None:
        return worst.value
    return next((name for name in classes if name), None)


def _durations(span: SpanData | None) -> tuple[float | None, float | None]:
    duration = span.duration_ns if span is not None else None
    if duration is None:
        return None, None
    return round(duration / 1e9, 6), round(duration / 1e6, 3)


def _record(
    source: str,
    at: int | None,
    stage: str | None,
    failure_class: str | None,
    violations: list[str],
    types: list[str],
    detail: str,
    span: SpanData | None,
    model: str | None,
) -> dict[str, Any]:
    seconds, millis = _durations(span)
    return {
        "source": source,
        "at": iso_utc(at),
        "stage": stage,
        "failure_class": failure_class,
        "violations": violations,
        "violation_types": types,
        "detail": detail,
        "duration_sec": seconds,
        "duration_ms": millis,
        "model": model,
    }


def _span_record(span: SpanData, contracts: ContractSet | None) -> dict[str, Any]:
    contract = contracts.contracts.get(span.contract) if contracts and span.contract else None
    worst = _worst([violation.failure_class for violation in span.violations])
    terms = list(
        dict.fromkeys(explain(v.type, v.detail, contract).term for v in span.violations)
    )  # one term per rule, in the order the checks found them
    return _record(
        LOCAL_INFERENCE if worst in _INFERENCE_CLASSES else TASK_EXECUTION,
        span.end_unix_nano or span.start_unix_nano,
        span.stage,
        worst,
        terms,
        sorted({violation.type for violation in span.violations}),
        "; ".join(f"{v.type}: {v.detail}" if v.detail else v.type for v in span.violations),
        span,
        span.model,
    )


def _descendants(trace: TraceData, root: str) -> list[SpanData]:
    children: dict[str | None, list[SpanData]] = {}
    for span in trace.spans:
        children.setdefault(span.parent_span_id, []).append(span)
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child.span_id)
    return found


def _most_common(values: Iterable[str | None]) -> str | None:
    counts = Counter(value for value in values if value)
    return counts.most_common(1)[0][0] if counts else None


def _ledger_records(trace: TraceData) -> Iterator[tuple[dict[str, Any], int | None]]:
    by_id = {span.span_id: span for span in trace.spans}
    for run_id, books in trace.ledgers.items():
        if books.balanced is not False and books.protocol_ok is not False:
            continue
        run = by_id.get(run_id)
        below = _descendants(trace, run_id)
        models = [span.model for span in below if span.is_model_call]
        at = (run.end_unix_nano if run else None) or books.time_unix_nano
        types = sorted({d.type for d in books.discrepancies})
        record = _record(
            TASK_EXECUTION,
            at,
            _most_common(span.stage for span in below),
            FailureClass.LEDGER_DISCREPANCY.value,
            list(dict.fromkeys(explain(d.type, d.detail).term for d in books.discrepancies)),
            types,
            "; ".join(
                f"{d.type} {d.call_id}: {d.detail}" if d.call_id else f"{d.type}: {d.detail}"
                for d in books.discrepancies
            ),
            run,
            _most_common(models),
        )
        yield record, at


def failure_records(
    trace: TraceData, keep: FailureFilter | None = None, contracts: ContractSet | None = None
) -> Iterator[dict[str, Any]]:
    """The failure-log records of one trace that pass ``keep``, in time order.

    Args:
        trace: the spans and books of one trace.
        keep: the filters; None keeps every record.
        contracts: the contracts the spans were checked against, to show named patterns' regexes.
    """
    keep = keep or FailureFilter()
    found: list[tuple[int, dict[str, Any]]] = []
    for span in trace.spans:
        if span.violations:
            at = span.end_unix_nano or span.start_unix_nano
            record = _span_record(span, contracts)
            if keep.keeps(record, at):
                found.append((at or 0, record))
    for record, at in _ledger_records(trace):
        if keep.keeps(record, at):
            found.append((at or 0, record))
    found.sort(key=lambda item: item[0])
    for _, record in found:
        yield record


@dataclass
class CardStats:
    """What the dataset card counts, gathered record by record (constant memory per distinct value)."""

    records: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    by_class: Counter[str] = field(default_factory=Counter)
    by_type: Counter[str] = field(default_factory=Counter)
    by_stage: Counter[str] = field(default_factory=Counter)
    by_model: Counter[str] = field(default_factory=Counter)
    first: str | None = None
    last: str | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        """Count one record."""
        self.records += 1
        self.by_source[record["source"]] += 1
        self.by_class[record["failure_class"] or "(unknown)"] += 1
        self.by_type.update(record["violation_types"])
        self.by_stage[record["stage"] or "(no stage)"] += 1
        self.by_model[record["model"] or "(unknown)"] += 1
        at = record["at"]
        if at is not None:
            self.first = at if self.first is None or at < self.first else self.first
            self.last = at if self.last is None or at > self.last else self.last


def _table(header: tuple[str, str], counts: Counter[str]) -> list[str]:
    if not counts:
        return ["(none)"]
    rows = [f"| {header[0]} | {header[1]} |", "|---|---:|"]
    rows.extend(
        f"| `{name}` | {number} |" for name, number in sorted(counts.items(), key=lambda i: (-i[1], i[0]))
    )
    return rows


CARD_MARKER: Final = (
    "<!-- generated by `tallyspan export --format failure-logs`; regenerated on every export -->"
)
"""The line after a generated card's front matter: an existing file without it is never overwritten."""


def render_card(stats: CardStats, *, data_file: str, source: str, filters: list[str]) -> str:
    """The dataset card (README.md) of an export: counts, window, models, stages, limitations."""
    window = f"{stats.first} to {stats.last}" if stats.first else "no failures in the export"
    lines = [
        "---",
        "pretty_name: tallyspan failure logs",
        "tags: [agent-reliability, failure-analysis, opentelemetry, tallyspan]",
        "configs:",
        "  - config_name: default",
        f"    data_files: {data_file}",
        "---",
        CARD_MARKER,
        "",
        "# Agent failure logs",
        "",
        f"{stats.records} failures recorded by tallyspan's contract checks and double-entry ledger, "
        f"exported from {source}, one JSON object per line in `{data_file}`, in the fields of the public "
        '"ai-agent-failure-logs" dataset.',
        "",
        f"- Time window (UTC): {window}",
        f"- Filters: {'; '.join(filters) if filters else 'none'}",
        f"- Sources: {', '.join(f'{name} {n}' for name, n in sorted(stats.by_source.items())) or 'none'}",
        "",
        "## Failures per class",
        "",
        *_table(("failure_class", "records"), stats.by_class),
        "",
        "## Failures per type",
        "",
        "A record may carry several types, so these add up to more than the records.",
        "",
        *_table(("violation_type", "records"), stats.by_type),
        "",
        "## Models",
        "",
        *_table(("model", "records"), stats.by_model),
        "",
        "## Stages",
        "",
        *_table(("stage", "records"), stats.by_stage),
        "",
        "## Fields",
        "",
        "| field | meaning |",
        "|---|---|",
        "| `source` | `task_execution`: a contract or ledger verdict on the work; `local_inference`: the model"
        " call itself failed (timeout, process_error) |",
        "| `at` | when the failure was recorded (the span's end), UTC ISO-8601 |",
        "| `stage` | the kind of work whose contract applies (for a ledger record, the run's most frequent stage) |",
        "| `failure_class` | the most severe class among the record's types |",
        "| `violations` | the broken contract terms or ledger rules, in words |",
        "| `violation_types` | the machine-readable types, sorted |",
        "| `detail` | what the checks measured, per type; never the output's words |",
        "| `duration_sec`, `duration_ms` | how long the model call (or the run, for a ledger record) took |",
        "| `model` | the response model, else the requested one (for a ledger record, the run's most used) |",
        "",
        "## Limitations",
        "",
        "- Labels come from rule-based checks (contracts, language profiles, the ledger), not from human "
        "review: a contract that is too strict or too loose shapes the data.",
        "- Failures the contracts do not describe (a wrong but well-formed answer, a bad plan) are not here.",
        "- Ledger records exist only for runs whose agent keeps an action log (the log tool or "
        "`tallyspan.ledger.claim()`).",
        "- No field quotes model output, prompts or tool arguments: the records cannot be used to "
        "reproduce a failing answer, only to count and classify failures.",
        "- Times are those of the recording process's clock.",
        "",
    ]
    return "\n".join(lines)
