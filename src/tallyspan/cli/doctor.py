"""``tallyspan doctor``: is tallyspan set up to see what you expect? Read from the installation, the
environment, the contracts file and the store alone, so it answers in a fresh shell with no app running.

::

    tallyspan doctor --contracts contracts.yaml      # or TALLYSPAN_CONTRACTS=contracts.yaml tallyspan doctor

It shows what would be patched (each ``opentelemetry_instrumentor`` entry point, and whether its library
is installed), which contract each stage gets (the contracts' stages and those the store has seen),
where spans and ledger records go (the store, OTLP endpoints and protocols from the standard ``OTEL_*``
variables), and the drop and error counters the app's processes recorded in the store. Exit status 0
when it found nothing to fix, 1 when it lists problems.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Final

import click
from opentelemetry.instrumentation.dependencies import get_dependency_conflicts
from opentelemetry.instrumentation.environment_variables import OTEL_PYTHON_DISABLED_INSTRUMENTATIONS

from tallyspan._config import (
    ENV_CONTRACTS,
    ENV_EXPORTER_OTLP_ENDPOINT,
    ENV_EXPORTER_OTLP_LOGS_ENDPOINT,
    ENV_EXPORTER_OTLP_TRACES_ENDPOINT,
    ENV_SERVICE_NAME,
    otlp_logs_requested,
    otlp_traces_requested,
    resolve_capture_content,
    store_problem,
)
from tallyspan._errors import ContractError
from tallyspan._instrument import INSTRUMENTOR_GROUP
from tallyspan._instrument import _with_otlp as resolve_otlp  # the resolution instrument() itself uses
from tallyspan._requirements import conflict_message
from tallyspan._selfstats import is_problem
from tallyspan._state import Settings
from tallyspan._store._store_queries import StoreNotFoundError, StoreOverview, open_store, store_overview
from tallyspan._version import __version__
from tallyspan.cli._render import emit, table
from tallyspan.cli._state import CliState, pass_state
from tallyspan.cli._time import utc_time

__all__ = [
    "ContractsStatus",
    "DoctorResult",
    "InstrumentorStatus",
    "OTLPSignal",
    "StageBinding",
    "StoreStatus",
    "command",
    "contracts_status",
    "diagnose",
    "format_doctor",
    "instrumentor_statuses",
    "otlp_signals",
    "store_status",
]

EXIT_PROBLEMS: Final = 1
PATCHED_BY_INSTRUMENT: Final = "tallyspan.instrument()"
PATCHED_BY_ZERO_CODE: Final = "opentelemetry-instrument"
_OWN_PACKAGE: Final = "tallyspan_instrumentors"
_LOAD_FAILED: Final = "could not load"
# The OTLP exporters' defaults (OpenTelemetry specification) when no endpoint variable is set.
_DEFAULT_HTTP_ENDPOINT: Final = "http://localhost:4318"
_DEFAULT_GRPC_ENDPOINT: Final = "http://localhost:4317"


@dataclass(frozen=True)
class InstrumentorStatus:
    """One ``opentelemetry_instrumentor`` entry point, ours or another package's."""

    name: str
    target: str
    """``module:Class``."""
    tallyspan: bool
    """One of tallyspan's own (``tallyspan.instrument()`` enables these by default)."""
    requires: list[str]
    library_installed: bool
    disabled: bool
    """Named in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` (``opentelemetry-instrument`` skips it)."""
    patched_by: list[str]
    """Which set-ups would patch its library now: ``tallyspan.instrument()`` (its default set),
    ``opentelemetry-instrument``; empty when neither would."""
    problem: str | None
    """Why it patches nothing: the library missing or too old, or the entry point failing to load."""


@dataclass(frozen=True)
class StageBinding:
    """The contract a stage's model spans are checked against (match rules on agent or model aside)."""

    stage: str
    contract: str | None
    """None: the stage's outputs get no contract checks."""
    calls: int
    """Model calls the store has in this stage."""
    violating: int


@dataclass(frozen=True)
class ContractsStatus:
    """The contracts file and what it binds."""

    path: str | None
    given_by: str | None
    """``--contracts``, ``TALLYSPAN_CONTRACTS``, or None when neither names a file."""
    error: str | None
    """Why the file cannot be used (``instrument()`` would raise the same)."""
    contracts: list[str]
    default: bool
    match_rules: list[dict[str, str | None]]
    """``{contract, stage, agent, model}``, in the order they are tried."""
    stages: list[StageBinding]
    """The contracts' stages and the stages in the store."""


@dataclass(frozen=True)
class StoreStatus:
    """The embedded store, where spans, ledger records and counters are kept."""

    path: str
    exists: bool
    error: str | None
    overview: StoreOverview | None


@dataclass(frozen=True)
class OTLPSignal:
    """Where one OTLP signal goes, as the standard ``OTEL_*`` variables say."""

    signal: str
    """``traces`` (the checked spans) or ``logs`` (the ledger records)."""
    requested: bool
    exported: bool
    """Requested, and its exporter installed (OTLP over gRPC needs ``tallyspan[grpc]``)."""
    endpoint: str | None
    protocol: str | None


@dataclass(frozen=True)
class DoctorResult:
    """Everything ``tallyspan doctor`` found; ``problems`` lists what to fix."""

    version: str
    instrumentors: list[InstrumentorStatus]
    contracts: ContractsStatus
    store: StoreStatus
    otlp: list[OTLPSignal]
    capture_content: bool
    service_name: str | None
    notes: list[str]
    """Worth knowing, nothing to fix."""
    problems: list[str]


_REQUIREMENT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _disabled_names() -> set[str]:
    raw = os.environ.get(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def instrumentor_statuses() -> list[InstrumentorStatus]:
    """Every installed ``opentelemetry_instrumentor`` entry point: its library, and who would patch it."""
    disabled_names = _disabled_names()
    found: list[InstrumentorStatus] = []
    for entry_point in sorted(entry_points(group=INSTRUMENTOR_GROUP), key=lambda point: point.name):
        ours = entry_point.value.startswith(_OWN_PACKAGE)
        disabled = entry_point.name in disabled_names
        requires: list[str] = []
        problem: str | None
        try:
            requires = [
                str(requirement) for requirement in entry_point.load()().instrumentation_dependencies()
            ]
            conflict = get_dependency_conflicts(requires)
            problem = None if conflict is None else conflict_message(conflict)
        except Exception as exc:  # a broken plugin is a finding to show, not a reason for doctor to fail
            problem = f"{_LOAD_FAILED} {entry_point.value}: {type(exc).__name__}: {exc}"
        patched_by = []
        if problem is None:
            patched_by = [
                *([PATCHED_BY_INSTRUMENT] if ours else []),
                *([] if disabled else [PATCHED_BY_ZERO_CODE]),
            ]
        found.append(
            InstrumentorStatus(
                name=entry_point.name,
                target=entry_point.value,
                tallyspan=ours,
                requires=requires,
                library_installed=problem is None,
                disabled=disabled,
                patched_by=patched_by,
                problem=problem,
            )
        )
    return found


def contracts_status(path: Path | None, given_by: str | None, store: StoreOverview | None) -> ContractsStatus:
    """Load the contracts file (if any) and bind each stage it or the store knows to its contract."""
    seen = {stage.stage: stage for stage in store.stages} if store is not None else {}
    names: list[str] = []
    default = False
    rules: list[dict[str, str | None]] = []
    error: str | None = None
    contract_for = None
    if path is not None:
        # the engine only when there is a file to load
        from tallyspan._contract_loading import load_contracts

        try:
            loaded = load_contracts(path)
        except ContractError as exc:
            error = str(exc)
        else:
            names = sorted(loaded.contracts)
            default = loaded.default is not None
            rules = [
                rule.model_dump(include={"contract", "stage", "agent", "model"}) for rule in loaded.match
            ]
            contract_for = loaded.contract_for
    stages = []
    for stage in sorted({*names, *seen}):
        bound = contract_for(stage) if contract_for is not None else None
        calls = seen.get(stage)
        stages.append(
            StageBinding(
                stage=stage,
                contract=None if bound is None else bound[0],
                calls=0 if calls is None else calls.calls,
                violating=0 if calls is None else calls.violating,
            )
        )
    return ContractsStatus(
        path=None if path is None else str(path),
        given_by=given_by,
        error=error,
        contracts=names,
        default=default,
        match_rules=rules,
        stages=stages,
    )


def store_status(db_path: Path) -> StoreStatus:
    """What the store at ``db_path`` holds, or why it cannot be read or written; never creates it."""
    problem = store_problem(db_path)
    # What instrument() would say too: it runs without a store it cannot write.
    unwritable = (
        None if problem is None else f"cannot be written: {problem}; tallyspan.instrument() stores nothing"
    )
    try:
        with open_store(db_path) as db:
            return StoreStatus(str(db_path), True, unwritable, store_overview(db))
    except StoreNotFoundError:
        return StoreStatus(str(db_path), False, unwritable, None)
    except sqlite3.DatabaseError as exc:
        return StoreStatus(str(db_path), True, unwritable or f"could not be read: {exc}", None)


def _endpoint(signal_env: str, protocol: str, path: str) -> str:
    """The endpoint the OTLP exporter will use (OpenTelemetry specification: the signal's variable as is;
    else the base variable, plus the signal's path over HTTP; else the default)."""
    specific = os.environ.get(signal_env, "").strip()
    if specific:
        return specific
    base = os.environ.get(ENV_EXPORTER_OTLP_ENDPOINT, "").strip()
    if protocol == "grpc":
        return base or _DEFAULT_GRPC_ENDPOINT
    return f"{(base or _DEFAULT_HTTP_ENDPOINT).rstrip('/')}/{path}"


def otlp_signals() -> list[OTLPSignal]:
    """Where the checked spans and the ledger records go over OTLP, resolved as ``instrument()`` does."""
    settings = resolve_otlp(Settings())
    signals = []
    for signal, requested, exported, protocol, signal_env, path in (
        ("traces", otlp_traces_requested(), settings.otlp_traces, settings.otlp_traces_protocol,
         ENV_EXPORTER_OTLP_TRACES_ENDPOINT, "v1/traces"),
        ("logs", otlp_logs_requested(), settings.otlp_logs, settings.otlp_logs_protocol,
         ENV_EXPORTER_OTLP_LOGS_ENDPOINT, "v1/logs"),
    ):  # fmt: skip
        signals.append(
            OTLPSignal(
                signal=signal,
                requested=requested,
                exported=exported,
                endpoint=_endpoint(signal_env, protocol, path) if requested else None,
                protocol=protocol if requested else None,
            )
        )
    return signals


def _problems(result: DoctorResult) -> list[str]:
    problems = [
        f"instrumentor {item.name} cannot load: {item.problem}"
        for item in result.instrumentors
        if item.problem is not None and item.problem.startswith(_LOAD_FAILED)
    ]
    contracts = result.contracts
    if contracts.error is not None:
        problems.append(f"the contracts file cannot be used: {contracts.error}")
    elif contracts.path is not None:
        known = ", ".join(contracts.contracts) or "none"
        problems.extend(
            f"stage {binding.stage!r} has {binding.calls} model call(s) in the store but no contract "
            f"(stages with one: {known}); a misspelt stage name turns its checks off"
            for binding in contracts.stages
            if binding.contract is None and binding.calls
        )
    if result.store.error is not None:
        problems.append(f"the store at {result.store.path} {result.store.error}")
    problems.extend(
        f"OTLP {signal.signal} over {signal.protocol} were asked for but are not exported: "
        "pip install 'tallyspan[grpc]'"
        for signal in result.otlp
        if signal.requested and not signal.exported
    )
    overview = result.store.overview
    for process in overview.counters if overview is not None else ():
        # Losses and errors are problems; backpressure.* (the app waited for our worker) is a figure.
        counts = ", ".join(f"{key}={value}" for key, value in process.counts.items() if is_problem(key))
        if not counts:
            continue
        problems.append(
            f"process {process.pid} ({process.service_name or 'unknown service'}) recorded {counts}"
        )
    return problems


def _notes(result: DoctorResult) -> list[str]:
    """Libraries that tallyspan and another instrumentor would both patch under ``opentelemetry-instrument``."""
    by_library: dict[str, list[InstrumentorStatus]] = {}
    for item in result.instrumentors:
        if PATCHED_BY_ZERO_CODE in item.patched_by:
            for requirement in item.requires:
                name = _REQUIREMENT_NAME.match(requirement)
                if name is not None:
                    by_library.setdefault(name.group().lower(), []).append(item)
    notes = []
    for library, items in sorted(by_library.items()):
        others = [item.name for item in items if not item.tallyspan]
        if others and len(others) < len(items):
            notes.append(
                f"{' and '.join(item.name for item in items)} both instrument {library} under "
                "opentelemetry-instrument: tallyspan joins the other's model span where it can (one span a "
                "call, checked), and the report counts a call traced twice once; to keep tallyspan's "
                f"alone, set {OTEL_PYTHON_DISABLED_INSTRUMENTATIONS}=" + ",".join(others)
            )
    return notes


def diagnose(db_path: Path, contracts_path: Path | None = None) -> DoctorResult:
    """Everything ``tallyspan doctor`` reports; ``contracts_path`` else ``TALLYSPAN_CONTRACTS``."""
    given_by = "--contracts" if contracts_path is not None else None
    if contracts_path is None and os.environ.get(ENV_CONTRACTS, "").strip():
        contracts_path, given_by = Path(os.environ[ENV_CONTRACTS].strip()), ENV_CONTRACTS
    store = store_status(db_path)
    result = DoctorResult(
        version=__version__,
        instrumentors=instrumentor_statuses(),
        contracts=contracts_status(contracts_path, given_by, store.overview),
        store=store,
        otlp=otlp_signals(),
        capture_content=resolve_capture_content(None),
        service_name=os.environ.get(ENV_SERVICE_NAME, "").strip() or None,
        notes=[],
        problems=[],
    )
    return dataclasses.replace(result, notes=_notes(result), problems=_problems(result))


def _instrumentors_text(result: DoctorResult) -> list[str]:
    return [
        "Instrumentors (opentelemetry_instrumentor entry points)",
        table(
            ["name", "library", "patched by", "note"],
            [
                [
                    item.name,
                    "installed" if item.library_installed else "missing",
                    item.patched_by or "nothing",
                    "disabled by " + OTEL_PYTHON_DISABLED_INSTRUMENTATIONS if item.disabled else item.problem,
                ]
                for item in result.instrumentors
            ],
        ),
    ]


def _contracts_text(contracts: ContractsStatus) -> list[str]:
    if contracts.path is None:
        heading = f"Contracts: none given (--contracts FILE or {ENV_CONTRACTS}); only the default checks run"
    else:
        heading = f"Contracts: {contracts.path} (from {contracts.given_by})"
    lines = [heading]
    if contracts.error is not None:
        lines.append(f"  cannot be used: {contracts.error}")
    if contracts.default:
        lines.append("  a default contract applies to every stage without one")
    lines.extend(
        "  match rule: " + ", ".join(f"{key} {value}" for key, value in rule.items() if value is not None)
        for rule in contracts.match_rules
    )
    rows = [[b.stage, b.contract or "(none: unchecked)", b.calls, b.violating] for b in contracts.stages]
    lines.append(table(["stage", "contract", "calls in store", "violating"], rows))
    return lines


def _store_text(store: StoreStatus) -> list[str]:
    if store.overview is None:
        return [f"Store: {store.path} {store.error or '(nothing recorded there yet)'}"]
    overview = store.overview
    lines = [
        f"Store: {store.path}" + (f" {store.error}" if store.error else ""),
        f"  {overview.spans} spans in {overview.traces} traces, {overview.runs} runs, "
        f"{overview.reconciled_runs} reconciled; from {utc_time(overview.first_span_unix_nano) or '-'} "
        f"to {utc_time(overview.last_span_unix_nano) or '-'} UTC",
    ]
    if not overview.counters:
        lines.append("  no drops or errors recorded by the processes that wrote it")
    for process in overview.counters:
        lines.append(
            f"  process {process.pid} ({process.service_name or 'unknown service'}), "
            f"last recorded {utc_time(process.time_unix_nano)} UTC:"
        )
        lines.extend(f"    {key} {value}" for key, value in process.counts.items())
    return lines


def format_doctor(result: DoctorResult) -> str:
    """The diagnosis as text, problems last."""
    otlp = [
        f"  {signal.signal} ({'checked spans' if signal.signal == 'traces' else 'ledger records'}): "
        + (
            f"{signal.endpoint} over {signal.protocol}" + ("" if signal.exported else " (NOT exported)")
            if signal.requested
            else "not exported (no OTEL_EXPORTER_OTLP_* endpoint set)"
        )
        for signal in result.otlp
    ]
    lines = [
        f"tallyspan doctor — tallyspan {result.version}",
        "",
        *_instrumentors_text(result),
        "",
        *_contracts_text(result.contracts),
        "",
        "Where spans and ledger records go",
        *_store_text(result.store),
        "OTLP",
        *otlp,
        f"  message content exported: {'yes' if result.capture_content else 'no'}; "
        f"service name: {result.service_name or '(from the app)'}",
        "",
        *(f"Note: {note}" for note in result.notes),
    ]
    if result.problems:
        lines.append("Problems")
        lines.extend(f"  - {problem}" for problem in result.problems)
    else:
        lines.append("No problems found.")
    return "\n".join(lines)


@click.command("doctor")
@click.option(
    "--contracts", "contracts_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help=f"The contracts file your app uses. [default: {ENV_CONTRACTS}]",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(state: CliState, contracts_path: Path | None, as_json: bool) -> None:
    """Check the set-up: what is patched, which contract each stage gets, where spans go, what was lost.

    Exit status: 0 nothing to fix, 1 problems listed.
    """
    result = diagnose(state.db_path, contracts_path)
    emit("doctor", result, as_json=as_json, text=format_doctor)
    if result.problems:
        raise click.exceptions.Exit(EXIT_PROBLEMS)
