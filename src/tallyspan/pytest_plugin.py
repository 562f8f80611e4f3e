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
``tallyspan_contracts`` ini option (relative to the rootdir). A failed assertion names each span, its
stage, the violation types and their content-free details, and the rule to follow; the model's output
is shown only when content capture is on for the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tallyspan as _tallyspan

__all__ = ["LedgerVerdict", "TallyspanRecorder", "Verdict", "tallyspan"]

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
    ) -> None:
        self.instrumentation = instrumentation
        self._exporter = exporter
        self._provider = provider

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
        """The reconciled runs, in the order they ended."""
        from tallyspan import semconv

        found = []
        for span in self.spans:
            attributes = span.attributes or {}
            if semconv.LEDGER_BALANCED not in attributes:
                continue
            discrepancies = tuple(
                (
                    str((event.attributes or {}).get(semconv.LEDGER_DISCREPANCY_TYPE, "")),
                    _optional((event.attributes or {}).get(semconv.LEDGER_CALL_ID)),
                    str((event.attributes or {}).get(semconv.LEDGER_DETAIL, "")),
                )
                for event in span.events
                if event.name == semconv.EVENT_LEDGER_DISCREPANCY
            )
            name = attributes.get(semconv.RUN_NAME) or attributes.get(semconv.GEN_AI_AGENT_NAME) or span.name
            found.append(
                LedgerVerdict(
                    run_name=str(name),
                    span_id=_span_id(span),
                    balanced=bool(attributes.get(semconv.LEDGER_BALANCED)),
                    protocol_ok=bool(attributes.get(semconv.LEDGER_PROTOCOL_OK, True)),
                    discrepancies=discrepancies,
                )
            )
        return found

    def assert_no_violations(self, stage: str | None = None) -> None:
        """Fail the test if a checked span (of ``stage``, or of any stage) has violations."""
        __tracebackhide__ = True
        found = [v for v in self.verdicts if stage is None or v.stage == stage]
        if found:
            pytest.fail(_violations_message(found, stage), pytrace=False)

    def assert_ledger_balanced(self) -> None:
        """Fail the test if a run's books do not balance or its logging protocol was broken."""
        __tracebackhide__ = True
        runs = self.ledger
        broken = [run for run in runs if not run.balanced or not run.protocol_ok]
        if broken:
            pytest.fail(_ledger_message(broken, len(runs)), pytrace=False)


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


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

    if package.instrumentation() is not None:
        pytest.fail(
            "tallyspan is already instrumented in this process: the tallyspan fixture needs its own "
            "instrumentation (call tallyspan.uninstrument() first)",
            pytrace=False,
        )
    marker = request.node.get_closest_marker(MARKER)
    options = marker.kwargs if marker is not None else {}
    store = options.get("store", False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    instrumentation = package.instrument(
        _contracts(request, marker),
        tracer_provider=provider,
        store=(tmp_path / "tallyspan.db" if store is True else store) or None,
        capture_content=options.get("capture_content"),
        instrumentors=options.get("instrumentors"),
        span_processors=[SimpleSpanProcessor(exporter)],
        adopt_processors=False,
    )
    try:
        yield TallyspanRecorder(instrumentation, exporter, provider)
    finally:
        package.uninstrument()
        provider.shutdown()
