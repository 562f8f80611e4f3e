"""tallyspan's pytest plugin: hold an agent to its contracts and its books in ordinary tests.

Installed with tallyspan (entry point ``pytest11``), it gives every test a ``tallyspan`` fixture that
instruments for that test alone: a private tracer provider, spans kept in memory, no store unless asked.

Usage::

    import tallyspan as ts

    def test_weekly_report_agent(tallyspan):
        run_the_agent()                                  # its model calls and tools are traced and checked
        tallyspan.assert_no_violations(stage="weekly_report")
        tallyspan.assert_ledger_balanced()
        assert tallyspan.verdicts == []                  # or look at the verdicts and spans yourself

    @pytest.mark.tallyspan(contracts="contracts.yaml", store=True, capture_content=True)
    def test_with_options(tallyspan): ...

The contracts come from the marker's ``contracts=``, else ``--tallyspan-contracts FILE``, else the
``tallyspan_contracts`` ini option (relative to the rootdir). A failed assertion raises an
``AssertionError`` (``ViolationsFoundError``, ``LedgerNotInOrderError``), so ``pytest.raises(AssertionError)``
catches it as it catches a plain ``assert``; its message names each span, its stage, the violation types
and their content-free details, and the rule to follow; the model's output is shown only when content
capture is on for the test. The books name the tool and call id an agent claimed even with capture off
(identifiers, as the local store keeps them; SECURITY.md), never its summary.

An app that calls ``tallyspan.instrument()`` when it is imported keeps its instrumentation: for each
test the fixture sets it aside (paused, not undone: its patches stay, its chain receives nothing),
instruments the test on the same tracer provider, and gives it back afterwards.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tallyspan as _tallyspan
    from tallyspan.ledger import LedgerEntry, LedgerRecord

__all__ = [
    "LedgerNotInOrderError",
    "LedgerVerdict",
    "TallyspanAssertionError",
    "TallyspanRecorder",
    "Verdict",
    "ViolationsFoundError",
    "tallyspan",
]

OPTION: Final = "--tallyspan-contracts"
INI: Final = "tallyspan_contracts"
MARKER: Final = "tallyspan"
_FLUSH_TIMEOUT_MS: Final = 30_000
_OUTPUT_SHOWN: Final = 500


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tallyspan", "tallyspan: contracts and ledger checks of LLM agents")
    group.addoption(
        OPTION,
        metavar="FILE",
        default=None,
        help="contracts file (YAML or TOML) for the tallyspan fixture",
    )
    parser.addini(INI, "contracts file for the tallyspan fixture, relative to the rootdir", default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(contracts=None, store=False, capture_content=None, instrumentors=None): how the "
        "tallyspan fixture instruments this test (store=True writes a store in the test's tmp_path)",
    )


@dataclass(frozen=True)
class Verdict:
    """The violations the checks found on one span."""

    span_name: str
    span_id: str
    stage: str | None
    contract: str | None
    types: tuple[str, ...]
    failure_class: str | None
    details: tuple[tuple[str, str], ...]
    """(type, content-free detail) per violation."""
    output: str | None = None
    """The model's output, only when content capture was on."""


@dataclass(frozen=True)
class LedgerVerdict:
    """The reconciliation of one agent run's books."""

    run_name: str
    span_id: str
    balanced: bool
    protocol_ok: bool
    discrepancies: tuple[tuple[str, str | None, str], ...]
    """(type, call id, detail) per discrepancy."""


class TallyspanAssertionError(AssertionError):
    """A ``tallyspan`` fixture assertion failed: an ``AssertionError``, as a plain ``assert`` raises."""


class ViolationsFoundError(TallyspanAssertionError):
    """``assert_no_violations`` found violations; ``verdicts`` holds them."""

    def __init__(self, message: str, verdicts: Iterable[Verdict]) -> None:
        super().__init__(message)
        self.verdicts = tuple(verdicts)


class LedgerNotInOrderError(TallyspanAssertionError):
    """``assert_ledger_balanced`` found books that do not balance or a broken protocol; ``runs`` holds them."""

    def __init__(self, message: str, runs: Iterable[LedgerVerdict]) -> None:
        super().__init__(message)
        self.runs = tuple(runs)


class _Books:
    """A ledger sink that keeps each run's reconciliation for the test.

    A test runs on the user's own machine, as the local store is on the user's own disk: it gets the
    tool names and call ids the agent claimed (shaped as identifiers) even with content capture off, so
    a phantom log names its tool; never a summary (SECURITY.md)."""

    keeps_claimed_identifiers: Final = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[LedgerRecord] = []

    @property
    def records(self) -> list[LedgerRecord]:
        with self._lock:
            return list(self._records)

    def export_entries(self, entries: Sequence[LedgerEntry]) -> bool:
        return True

    def export_reconciliation(self, record: LedgerRecord) -> bool:
        with self._lock:
            self._records.append(record)
        return True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def _span_id(span: ReadableSpan) -> str:
    return format(span.context.span_id, "016x") if span.context is not None else "?"


def _output_text(attributes: Mapping[str, Any]) -> str | None:
    from tallyspan import semconv

    raw = attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES)
    if not isinstance(raw, str):
        return None
    try:
        messages = json.loads(raw)
    except ValueError:
        return raw
    parts = [
        str(part.get("content", ""))
        for message in messages if isinstance(message, dict)
        for part in message.get("parts", []) if isinstance(part, dict) and part.get("type") == "text"
    ]  # fmt: skip
    return "\n".join(parts) or None


class TallyspanRecorder:
    """What the ``tallyspan`` fixture gives a test: the recorded spans, the verdicts, the assertions."""

    def __init__(
        self,
        instrumentation: _tallyspan.Instrumentation,
        exporter: InMemorySpanExporter,
        provider: TracerProvider,
        books: _Books | None = None,
    ) -> None:
        self.instrumentation = instrumentation
        self._exporter = exporter
        self._provider = provider
        self._books = books or _Books()

    @property
    def store(self) -> Path | None:
        """The embedded store this test writes, when it asked for one."""
        return self.instrumentation.settings.db_path

    @property
    def capture_content(self) -> bool:
        """Whether content is exported on the spans (and so shown in failure messages)."""
        return self.instrumentation.settings.capture_content

    def flush(self) -> bool:
        """Run every ended span through the checks and the ledger; True when done in time."""
        return self.instrumentation.force_flush(_FLUSH_TIMEOUT_MS)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every span ended so far, with its violations and ledger balance on it."""
        self.flush()
        return self._exporter.get_finished_spans()

    @property
    def verdicts(self) -> list[Verdict]:
        """The spans with violations, in the order they ended."""
        from tallyspan import semconv

        found = []
        for span in self.spans:
            attributes = span.attributes or {}
            types = attributes.get(semconv.VIOLATION_TYPES)
            if isinstance(types, str):
                types = (types,)
            if not types:
                continue
            details = tuple(
                (
                    str((event.attributes or {}).get(semconv.VIOLATION_TYPE, "")),
                    str((event.attributes or {}).get(semconv.VIOLATION_DETAIL, "")),
                )
                for event in span.events
                if event.name == semconv.EVENT_VIOLATION
            )
            stage, contract = attributes.get(semconv.STAGE), attributes.get(semconv.CONTRACT)
            failure_class = attributes.get(semconv.FAILURE_CLASS)
            found.append(
                Verdict(
                    span_name=span.name,
                    span_id=_span_id(span),
                    stage=None if stage is None else str(stage),
                    contract=None if contract is None else str(contract),
                    types=tuple(str(kind) for kind in types)
                    if isinstance(types, Sequence)
                    else (str(types),),
                    failure_class=None if failure_class is None else str(failure_class),
                    details=details,
                    output=_output_text(attributes) if self.capture_content else None,
                )
            )
        return found

    @property
    def ledger(self) -> list[LedgerVerdict]:
        """The reconciled runs, in the order they ended; a claimed tool or call id is named as claimed."""
        self.flush()
        return [
            LedgerVerdict(
                run_name=record.run_name,
                span_id=format(record.run_span_id, "016x"),
                balanced=record.reconciliation.balanced,
                protocol_ok=record.reconciliation.protocol_ok,
                discrepancies=tuple(
                    (found.type, found.call_id, found.detail) for found in record.reconciliation.discrepancies
                ),
            )
            for record in self._books.records
        ]

    def assert_no_violations(self, stage: str | None = None) -> None:
        """Fail the test (``ViolationsFoundError``, an ``AssertionError``) if a checked span (of ``stage``, or
        of any stage) has violations."""
        __tracebackhide__ = True
        found = [v for v in self.verdicts if stage is None or v.stage == stage]
        if found:
            raise ViolationsFoundError(_violations_message(found, stage), found)

    def assert_ledger_balanced(self) -> None:
        """Fail the test (``LedgerNotInOrderError``, an ``AssertionError``) if a run's books do not balance or
        its logging protocol was broken."""
        __tracebackhide__ = True
        runs = self.ledger
        broken = [run for run in runs if not run.balanced or not run.protocol_ok]
        if broken:
            raise LedgerNotInOrderError(_ledger_message(broken, len(runs)), broken)


def _violations_message(found: Sequence[Verdict], stage: str | None) -> str:
    from tallyspan._datasets._terms import explain

    total = sum(len(v.details) or len(v.types) for v in found)
    where = f" in stage {stage!r}" if stage is not None else ""
    lines = [f"tallyspan: {total} violation{'s' if total != 1 else ''}{where} on {len(found)} span(s):"]
    for verdict in found:
        lines.append(
            f"  {verdict.span_name} (span {verdict.span_id}, stage {verdict.stage or '-'}, "
            f"contract {verdict.contract or '-'}): {', '.join(verdict.types)}"
        )
        for kind, detail in verdict.details or tuple((kind, "") for kind in verdict.types):
            lines.append(f"    - {kind}: {detail}" if detail else f"    - {kind}")
            lines.append(f"      fix: {explain(kind, detail).hint}")
        if verdict.output is not None:
            shown = (
                verdict.output
                if len(verdict.output) <= _OUTPUT_SHOWN
                else verdict.output[:_OUTPUT_SHOWN] + "…"
            )
            lines.append(f"    output (captured): {shown!r}")
    return "\n".join(lines)


def _ledger_message(broken: Sequence[LedgerVerdict], total: int) -> str:
    from tallyspan._datasets._terms import explain

    lines = [f"tallyspan: the books of {len(broken)} of {total} run(s) are not in order:"]
    for run in broken:
        state = "unbalanced" if not run.balanced else "balanced"
        protocol = "protocol broken" if not run.protocol_ok else "protocol ok"
        lines.append(f"  {run.run_name} (span {run.span_id}): {state}, {protocol}")
        for kind, call_id, detail in run.discrepancies:
            lines.append(f"    - {kind}{f' {call_id}' if call_id else ''}: {detail}")
            lines.append(f"      fix: {explain(kind, detail).hint}")
    return "\n".join(lines)


def _contracts(request: pytest.FixtureRequest, marker: pytest.Mark | None) -> Any:
    if marker is not None and marker.kwargs.get("contracts") is not None:
        return marker.kwargs["contracts"]
    option = request.config.getoption(OPTION)
    if option:
        return Path(option)
    ini = request.config.getini(INI)
    if ini:
        return request.config.rootpath / str(ini)
    return None


@pytest.fixture
def tallyspan(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TallyspanRecorder]:
    """Instrument this test alone with tallyspan; give it the recorded spans, verdicts and assertions."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tallyspan as package

    marker = request.node.get_closest_marker(MARKER)
    options = marker.kwargs if marker is not None else {}
    store = options.get("store", False)
    exporter = InMemorySpanExporter()
    books = _Books()
    # The app's own instrumentation (instrument() at import) is paused for the test, not undone: the
    # libraries it patched send their spans to its provider, so the test's chain goes on that provider.
    running = package.instrumentation()
    with running.set_aside() if running is not None else contextlib.nullcontext():
        provider = running.tracer_provider if running is not None else TracerProvider()
        try:
            instrumentation = package.instrument(
                _contracts(request, marker),
                tracer_provider=provider,
                store=(tmp_path / "tallyspan.db" if store is True else store) or None,
                capture_content=options.get("capture_content"),
                instrumentors=options.get("instrumentors"),
                span_processors=[SimpleSpanProcessor(exporter)],
                ledger_sinks=[books],
                adopt_processors=False,
            )
            yield TallyspanRecorder(instrumentation, exporter, provider, books)
        finally:
            package.uninstrument()
            if running is None:
                provider.shutdown()
