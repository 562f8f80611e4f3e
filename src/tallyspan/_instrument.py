"""``tallyspan.instrument()``: the one line. It wires the tracer provider, the processor chain and the
instrumentors, all found through entry points (the core never imports the plugin packages).

The chain it adds to the tracer provider::

    _Switch ─► OffThreadProcessor ─► ChecksProcessor ─► LedgerProcessor ─┬► otlp (spool, own threads)
                (worker thread)                                          └► store (SQLite, own thread)

OTLP goes over HTTP (protobuf) or, when ``OTEL_EXPORTER_OTLP[_TRACES|_LOGS]_PROTOCOL=grpc``, over gRPC
(the ``tallyspan[grpc]`` extra); without that extra a gRPC signal is not exported at all, with one warning.

Each link is made by a factory registered under the ``tallyspan.components`` entry point group:
``factory(downstream, settings) -> SpanProcessor | None`` (None: nothing to add, e.g. no store). A
component that is not installed is skipped.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, EntryPoints, PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

# Imported (its exit hook registered) before ours below, so the sinks' exit hooks run after ours.
import tallyspan._exit  # noqa: F401
from tallyspan import semconv
from tallyspan._adopt import Borrowed, Guarded, adoptable, give_back, remove, take_over
from tallyspan._books._ledger_api import LedgerSink
from tallyspan._config import (
    DEFAULT_OTLP_PROTOCOL,
    ENV_SERVICE_NAME,
    GRPC_INSTALL_HINT,
    LOCAL_WRITE_GRACE_S,
    OTLPProtocol,
    ShutdownBudget,
    export_settings,
    otlp_logs_protocol,
    otlp_logs_requested,
    otlp_traces_protocol,
    otlp_traces_requested,
    resolve_capture_content,
    resolve_contracts,
    resolve_db_path,
    resolve_shutdown_timeout,
    store_problem,
    warn_once,
)
from tallyspan._errors import ConfigError
from tallyspan._fork import after_fork_in_child, renew_lock_after_fork
from tallyspan._requirements import dependency_conflict
from tallyspan._selfstats import count, swallowed
from tallyspan._sigterm import final_flush, flush_on_sigterm
from tallyspan._state import Settings, active, set_active

if TYPE_CHECKING:
    # For the types only: importing it costs about 15 ms (packaging's parsers), which our instrumentors
    # do not pay (tallyspan_instrumentors._base).
    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

    from tallyspan._contract._contracts import ContractSet

__all__ = ["DEFAULT_STORE", "Instrumentation", "instrument", "instrumentation", "uninstrument"]

_logger = logging.getLogger(__name__)

COMPONENT_GROUP: Final = semconv.ENTRY_POINT_GROUP_COMPONENTS
INSTRUMENTOR_GROUP: Final = "opentelemetry_instrumentor"
#: The distribution whose metadata lists our own instrumentors and components.
_DISTRIBUTION: Final = "tallyspan"
_OWN_INSTRUMENTORS_PACKAGE: Final = "tallyspan_instrumentors"
#: What OpenTelemetry logs when a second global TracerProvider is refused.
_OVERRIDE_WARNING: Final = "Overriding of current TracerProvider"
#: Components at the end of the chain, each fed every enriched span.
_SINKS: Final = ("otlp", "store")
#: Components wrapped around the sinks, innermost first.
_CHAIN_ORDER: Final = ("ledger", "checks")
#: Where the SDK's OTLP span exporters (HTTP and gRPC) live: an adopted one already exports over OTLP.
_OTLP_EXPORTER_MODULES: Final = "opentelemetry.exporter.otlp."
#: Counted in ``tallyspan.stats()`` when the store cannot be written and ``instrument()`` goes on without it.
STORE_UNWRITABLE: Final = "errors.store.unwritable"


class _DefaultStore:
    """Sentinel: "the default store" (``TALLYSPAN_DB`` or ``./.tallyspan/tallyspan.db``); None means no store."""

    def __repr__(self) -> str:
        return "DEFAULT_STORE"


DEFAULT_STORE: Final = _DefaultStore()


class ComponentFactory(Protocol):
    """Builds one link of the processor chain from the processors below it and the settings; None when
    the settings ask for nothing it does (no store, no OTLP export)."""

    def __call__(self, downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor | None: ...


class _Switch(SpanProcessor):
    """The head of our chain on the provider: the SDK cannot remove a processor, so uninstrument turns it off.

    ``paused`` (``set_aside``) lets spans pass by without stopping the chain."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.enabled = True
        self.paused = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.enabled and not self.paused:
            self.inner.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self.enabled and not self.paused:
            self.inner.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis) if self.enabled else True

    def shutdown(self) -> None:
        # The provider's own exit hook (before ours) or uninstrument(): a SIGTERM meanwhile waits for it,
        # from before the chain is turned off (the handler's flush would find it off and do nothing).
        with final_flush():
            if self.enabled:
                self.enabled = False
                self.inner.shutdown()


@dataclass
class Instrumentation:
    """What ``instrument()`` set up; ``force_flush()`` before reading the store or exiting early."""

    tracer_provider: TracerProvider
    settings: Settings
    processor: SpanProcessor
    instrumentors: tuple[BaseInstrumentor, ...] = ()
    components: tuple[str, ...] = ()
    zero_code: bool = False
    """Set up by ``opentelemetry-instrument`` from the environment (``tallyspan._zero_code``); the app's
    own ``instrument()`` call replaces it, since arguments win over the environment."""
    _head: _Switch | None = field(default=None, repr=False)
    _adopted: tuple[Borrowed, ...] = field(default=(), repr=False)

    @property
    def adopted_processors(self) -> tuple[SpanProcessor, ...]:
        """The app's own span processors that now receive the enriched spans from our chain."""
        return tuple(item.processor for item in self._adopted)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Run every queued span through the checks and ledger and export it; True if done in time."""
        return self.processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Flush and stop our chain within the shutdown budget (``TALLYSPAN_SHUTDOWN_TIMEOUT_S``, 3 s):
        what the backend has not accepted by then stays in the spool for the next start. The tracer
        provider itself is left to its owner."""
        self.settings.shutdown_budget.start()
        self.processor.shutdown()

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """Set this, the running instrumentation, aside for the block, so that ``instrument()`` can be
        called in it (the pytest fixture's, for one test, in an app that instrumented itself at import).

        Set aside, it is paused, not undone: its chain receives no span and is not shut down (its store,
        spool and exports stay open), and the libraries it patched stay patched, sending their spans to
        its provider: instrument on ``self.tracer_provider`` in the block to receive them. What the block
        instrumented is undone at its end (if the block did not), and this instrumentation runs again.

        Raises:
            ConfigError: this is not the running instrumentation.
        """
        with _lock:
            if active() is not self:
                raise ConfigError("only the running instrumentation can be set aside")
            set_active(None)
            if self._head is not None:
                self._head.paused = True
        try:
            yield
        finally:
            uninstrument()  # what the block left running, if anything
            with _lock:
                set_active(self)
                if self._head is not None:
                    self._head.paused = False


_lock = threading.RLock()
renew_lock_after_fork(sys.modules[__name__], new_lock=threading.RLock)
_own_provider: TracerProvider | None = None


def instrumentation() -> Instrumentation | None:
    """Return the active instrumentation, or None when ``instrument()`` has not been called."""
    state = active()
    return state if isinstance(state, Instrumentation) else None


def instrument(
    contracts: Any = None,
    *,
    service_name: str | None = None,
    capture_content: bool | None = None,
    store: str | os.PathLike[str] | _DefaultStore | None = DEFAULT_STORE,
    instrumentors: Iterable[str] | None = None,
    tracer_provider: TracerProvider | None = None,
    mark_error_status: bool = True,
    evaluation_events: bool = False,
    ledger_log_tool: str = "log_action",
    span_processors: Sequence[SpanProcessor] = (),
    ledger_sinks: Sequence[LedgerSink] = (),
    adopt_processors: bool = True,
) -> Instrumentation:
    """Instrument every supported library that is installed, and check every model output.

    Idempotent: a second call returns the active instrumentation and warns. Under
    ``opentelemetry-instrument`` the first call replaces the instrumentation made from the environment.

    Args:
        contracts: a contracts file (YAML or TOML path), a mapping, or a list of contracts; default the
            file ``TALLYSPAN_CONTRACTS`` names, else none (nothing but the language-free checks).
        service_name: ``service.name`` of a tracer provider we create; else ``OTEL_SERVICE_NAME``.
        capture_content: export message content as span attributes; else
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``; default False. The checks read the
            content in process either way.
        store: path of the embedded SQLite store; default ``TALLYSPAN_DB`` or
            ``./.tallyspan/tallyspan.db``; None writes no store. One that cannot be written is said
            once (path and reason), counted as ``errors.store.unwritable`` and left out.
        instrumentors: entry point names to enable (``opentelemetry_instrumentor`` group; a bare
            library name such as ``"anthropic"`` means ``tallyspan_anthropic`` unless another package
            registered that exact name); default all of tallyspan's whose library is installed. A name
            that matches nothing, or whose library is missing, is warned about once; one already
            instrumented (by ``opentelemetry-instrument``, or by the app) is left to its owner.
        tracer_provider: the SDK provider to add our processors to; default the global one if it is
            an SDK provider (or the SDK provider a proxy such as Logfire's hands its work to), else a
            new one that becomes global.
        mark_error_status: set status ERROR on violating spans.
        evaluation_events: also add a ``gen_ai.evaluation.result`` event per check.
        ledger_log_tool: the tool through which the agent logs its own actions.
        span_processors: more processors at the end of our chain: they receive the enriched spans
            (with violations and ledger balance), e.g. ``SimpleSpanProcessor(your_exporter)``.
        ledger_sinks: more places for each run's ledger entries and reconciliation
            (:class:`tallyspan.ledger.LedgerSink`), beside the embedded store and OTLP logs.
        adopt_processors: move the span processors already on the provider (the app's own export)
            behind our chain, so they export the enriched spans; ``uninstrument()`` gives them back.
            Processors added after ``instrument()`` see spans before they are checked.

    Returns:
        The active :class:`Instrumentation`.

    Raises:
        ConfigError: an argument is invalid; ``ContractError`` (a ``ConfigError``) when a contract is,
            naming the file, the stage and the field.
    """
    with _lock:
        running = instrumentation()
        if running is not None and not running.zero_code:
            _logger.warning("tallyspan.instrument() was called again; keeping the first instrumentation")
            return running
        if running is not None:
            _logger.info("tallyspan.instrument() replaces the instrumentation opentelemetry-instrument made")
            uninstrument()
        db_path = (
            None if store is None else resolve_db_path(None if isinstance(store, _DefaultStore) else store)
        )
        db_path = _writable_store(db_path)
        settings = Settings(
            capture_content=resolve_capture_content(capture_content),
            db_path=db_path,
            export=export_settings(db_path),
            shutdown_budget=ShutdownBudget(resolve_shutdown_timeout()),
            contracts=_load_contracts(resolve_contracts(contracts)),
            service_name=service_name,
            mark_error_status=mark_error_status,
            evaluation_events=evaluation_events,
            ledger_log_tool=ledger_log_tool,
        )
        provider = _resolve_provider(tracer_provider, service_name)
        adopted = adoptable(provider, keep=_Switch) if adopt_processors else ()
        settings = _with_otlp(settings, adopted)
        _forget_entry_points()
        guarded = tuple(
            Guarded(processor, settings.shutdown_budget) for processor in (*span_processors, *adopted)
        )
        chain, names = _build_chain(settings, guarded, ledger_sinks)
        head = _Switch(chain)
        take_over(provider, head, adopted)
        enabled = _instrument_libraries(instrumentors, provider, settings)
        running = Instrumentation(
            tracer_provider=provider,
            settings=settings,
            processor=head,
            instrumentors=enabled,
            components=names,
            _head=head,
            _adopted=adopted,
        )
        set_active(running)
        _prepare_child_exit()
        return running


def uninstrument() -> None:
    """Undo ``instrument()``: unpatch the libraries, take our processors off the provider (giving the
    app's back), flush and stop them within the shutdown budget. Safe to call twice."""
    with _lock:
        current = instrumentation()
        set_active(None)
    if current is None:
        return
    for instrumentor in current.instrumentors:
        try:
            instrumentor.uninstrument()
        except Exception:  # unpatching one library must not keep the others patched
            swallowed(_logger, "uninstrument", f"{type(instrumentor).__name__} failed to uninstrument")
    try:
        if current._head is not None:
            # Off the provider, not just switched off: a thousand cycles must leave nothing behind.
            remove(current.tracer_provider, current._head)
        give_back(current.tracer_provider, current._adopted)
    except Exception:  # the app's processors stay fed by our (stopped) chain: log it, go on
        swallowed(_logger, "uninstrument.give_back", "could not give the app's span processors back")
    current.shutdown()


def _writable_store(db_path: Path | None) -> Path | None:
    """``db_path``, or None when the store there cannot be written: said once, with the path and the
    reason, and counted (``errors.store.unwritable``), rather than every span and ledger record lost with
    nothing but an ``sqlite3.OperationalError`` at exit. The rest of the chain runs without the store."""
    problem = None if db_path is None else store_problem(db_path)
    if problem is None:
        return db_path
    count(STORE_UNWRITABLE)
    warn_once(
        ("store", f"unwritable {db_path}"),
        "tallyspan: the store %s cannot be written (%s), so no span or ledger record is stored there; "
        "the checks, the ledger and the exports run without it. Point TALLYSPAN_DB or "
        "instrument(store=...) at a writable path, or pass store=None. `tallyspan doctor` says the same.",
        db_path,
        problem,
    )
    return None


def _load_contracts(contracts: Any) -> ContractSet | None:
    if contracts is None:
        return None
    from tallyspan._contract_loading import load_contracts

    return load_contracts(contracts)


def _resolve_provider(tracer_provider: TracerProvider | None, service_name: str | None) -> TracerProvider:
    global _own_provider
    if tracer_provider is not None:
        if not isinstance(tracer_provider, TracerProvider):
            raise ConfigError("tracer_provider must be an opentelemetry.sdk.trace.TracerProvider")
        return tracer_provider
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    inner = _delegate(current)
    if inner is not None:
        return inner
    if _own_provider is None:
        name = service_name or os.environ.get(ENV_SERVICE_NAME) or Path(sys.argv[0] or "python").stem
        _own_provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
        trace.set_tracer_provider(_own_provider)
        logging.getLogger(trace.__name__).addFilter(_ReplacedProviderHint())
    return _own_provider


def _delegate(provider: object) -> TracerProvider | None:
    """The SDK provider a global provider of another kind hands its work to, if it says which.

    ``logfire.configure()`` sets a ``ProxyTracerProvider`` of its own as the global provider (so it can
    be configured again) and keeps the SDK provider it made, with Logfire's processors, in ``provider``.
    Taking that one is what ``instrument()`` does with any SDK global provider; a provider of our own
    could not become global (OpenTelemetry refuses a second), and Logfire would receive nothing.
    """
    inner = getattr(provider, "provider", None)
    return inner if isinstance(inner, TracerProvider) else None


class _ReplacedProviderHint(logging.Filter):
    """Adds the fix to OpenTelemetry's bare warning when the app sets its provider after ``instrument()``.

    The global provider can be set once; ours was, so the app's is ignored and its exporter sees nothing.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith(_OVERRIDE_WARNING) and _own_provider is trace.get_tracer_provider():
            warn_once(
                ("provider", "replaced after instrument()"),
                "tallyspan.instrument() already set the global TracerProvider, so the one the app set "
                "later is ignored and its exporters receive nothing. Set the app's provider before "
                "tallyspan.instrument(), or pass it: tallyspan.instrument(tracer_provider=provider).",
            )
        return True


def _grpc_exporters_installed() -> bool:
    """True when the ``tallyspan[grpc]`` extra can be imported.

    Asked here, not in the ``otlp`` component that builds the exporters: which signals go out is
    configuration (``Settings.otlp_*``, which every component and the user read), resolved in one place.
    """
    try:
        import opentelemetry.exporter.otlp.proto.grpc._log_exporter
        import opentelemetry.exporter.otlp.proto.grpc.trace_exporter  # noqa: F401
    except ImportError:
        return False
    return True


def _exports_otlp(processor: Borrowed) -> bool:
    """True for an adopted ``Simple``/``BatchSpanProcessor`` whose exporter is an OTLP span exporter."""
    exporter = getattr(processor.processor, "span_exporter", None)
    return type(exporter).__module__.startswith(_OTLP_EXPORTER_MODULES)


def _with_otlp(settings: Settings, adopted: Sequence[Borrowed] = ()) -> Settings:
    """Which signals go out over OTLP, and by which protocol; a gRPC signal without its exporter is dropped.

    Traces already exported over OTLP by an adopted processor (the app's own set-up, or the SDK
    configurator's under ``opentelemetry-instrument``) are not exported a second time by us: that
    processor now sends the checked spans.
    """
    traces = otlp_traces_requested() and not any(_exports_otlp(processor) for processor in adopted)
    logs = otlp_logs_requested()
    traces_protocol: OTLPProtocol = otlp_traces_protocol() if traces else DEFAULT_OTLP_PROTOCOL
    logs_protocol: OTLPProtocol = otlp_logs_protocol() if logs else DEFAULT_OTLP_PROTOCOL
    grpc_traces = traces and traces_protocol == "grpc"
    grpc_logs = logs and logs_protocol == "grpc"
    if (grpc_traces or grpc_logs) and not _grpc_exporters_installed():
        # Never fall back to HTTP: the endpoint is a gRPC port, and HTTP to it fails on every export.
        dropped = " and ".join(
            name for name, wanted in (("traces", grpc_traces), ("ledger logs", grpc_logs)) if wanted
        )
        warn_once(
            ("grpc", "not installed"),
            "OTLP over gRPC was asked for, but its exporter (opentelemetry-exporter-otlp-proto-grpc) is "
            "not installed: tallyspan exports no %s over OTLP. Install it with: %s",
            dropped,
            GRPC_INSTALL_HINT,
        )
        traces = traces and not grpc_traces
        logs = logs and not grpc_logs
    return dataclasses.replace(
        settings,
        otlp_traces=traces,
        otlp_logs=logs,
        otlp_traces_protocol=traces_protocol,
        otlp_logs_protocol=logs_protocol,
    )


# Entry points, read once per sys.path. Ours come from tallyspan's own metadata (one file); every
# installed distribution's are read (about 5 ms for a hundred of them, whatever the group asked) only
# for a name that is not ours: another package's instrumentor, a bare library name, a component we do
# not ship.
_own_scan: EntryPoints | None = None
_every_scan: dict[str, EntryPoints] = {}
_scanned_path: tuple[str, ...] = ()


def _forget_entry_points() -> None:
    # Read again only when sys.path changed (a path added since, with distributions on it):
    # instrument()/uninstrument() cycles must not pay for the reads every time.
    global _own_scan, _scanned_path
    if tuple(sys.path) != _scanned_path:
        _own_scan = None
        _every_scan.clear()
        _scanned_path = tuple(sys.path)


def _every_entry_points(group: str) -> EntryPoints:
    if not _every_scan:
        every = entry_points()  # one walk of the distributions for both groups: the walk is the cost
        for wanted in (COMPONENT_GROUP, INSTRUMENTOR_GROUP):
            _every_scan[wanted] = every.select(group=wanted)
    found = _every_scan.get(group)
    if found is None:
        found = _every_scan[group] = entry_points(group=group)
    return found


def _own_entry_points(group: str) -> EntryPoints:
    global _own_scan
    if _own_scan is None:
        try:
            _own_scan = distribution(_DISTRIBUTION).entry_points
        except PackageNotFoundError:  # our sources on sys.path without installed metadata
            return _every_entry_points(group)
    return _own_scan.select(group=group)


def _component_entry_point(name: str) -> EntryPoint | None:
    # Ours first: a component tallyspan ships is its own, not another package's of the same name.
    found = next(iter(_own_entry_points(COMPONENT_GROUP).select(name=name)), None)
    if found is None:
        found = next(iter(_every_entry_points(COMPONENT_GROUP).select(name=name)), None)
    return found


def _component_factory(name: str) -> Any:
    entry_point = _component_entry_point(name)
    if entry_point is None:
        return None
    try:
        return entry_point.load()
    except (ImportError, AttributeError):  # a broken plugin is skipped, the rest of the chain still works
        swallowed(_logger, f"component.{name}", f"could not load the tallyspan component {name!r}")
        return None


def _link(name: str, downstream: Sequence[SpanProcessor], settings: Settings) -> SpanProcessor | None:
    """The link the component ``name`` makes, or None when it is not installed or has nothing to add."""
    factory: ComponentFactory | None = _component_factory(name)
    if factory is None:
        if name == "otlp" and settings.otlp_traces:
            # The exporters plugin is part of tallyspan: only a stale install misses one of its components.
            warn_once(
                ("component", name),
                "OTLP trace export was asked for, but tallyspan's %r component is not installed: "
                "traces are not exported over OTLP. Reinstall tallyspan.",
                name,
            )
        return None
    return factory(downstream, settings)


def _build_chain(
    settings: Settings, extra_processors: Sequence[SpanProcessor], extra_ledger_sinks: Sequence[LedgerSink]
) -> tuple[SpanProcessor, tuple[str, ...]]:
    # The worker always makes the head of the chain (it is not optional like the others).
    worker: Callable[[Sequence[SpanProcessor], Settings], SpanProcessor] | None = _component_factory("worker")
    if worker is None:
        raise ConfigError("tallyspan_processors is not installed: reinstall tallyspan")
    sinks: list[SpanProcessor] = []
    names: list[str] = []
    if extra_processors:
        # The app's processors get a worker of their own: a slow one (a SimpleSpanProcessor exporting
        # over the network) must not hold up the checks, the ledger and the store behind it.
        sinks.append(worker(tuple(extra_processors), settings))
    for name in _SINKS:
        sink = _link(name, (), settings)
        if sink is not None:
            sinks.append(sink)
            names.append(name)
    ledger_sinks_factory = _component_factory("ledger_sinks")
    own_sinks = tuple(ledger_sinks_factory(settings)) if ledger_sinks_factory is not None else ()
    settings = dataclasses.replace(settings, ledger_sinks=(*own_sinks, *extra_ledger_sinks))
    chain: Sequence[SpanProcessor] = sinks
    for name in _CHAIN_ORDER:
        link = _link(name, chain, settings)
        if link is not None:
            chain = (link,)
            names.append(name)
    return worker(chain, settings), tuple(names)


def _instrument_libraries(
    names: Iterable[str] | None, provider: TracerProvider, settings: Settings
) -> tuple[BaseInstrumentor, ...]:
    wanted = None if names is None else {_entry_point_name(name) for name in names}
    found: set[str] = set()
    enabled: list[BaseInstrumentor] = []
    own = _own_entry_points(INSTRUMENTOR_GROUP)
    candidates = (
        own if wanted is None or wanted <= set(own.names) else _every_entry_points(INSTRUMENTOR_GROUP)
    )
    for entry_point in candidates:
        if wanted is None:
            if not entry_point.value.startswith(_OWN_INSTRUMENTORS_PACKAGE):
                continue
        elif entry_point.name not in wanted:
            continue
        found.add(entry_point.name)
        try:
            instrumentor = entry_point.load()()
            if instrumentor.is_instrumented_by_opentelemetry:  # opentelemetry-instrument's, or the app's
                _logger.debug("%s is instrumented already; leaving it to its owner", entry_point.name)
                continue
            # Without packaging when it can tell; a conflict's text is packaging's, made if it is logged.
            conflict = dependency_conflict(instrumentor.instrumentation_dependencies())
            if conflict is not None:
                if wanted is None:  # instrument every library that is there: a missing one is normal
                    _logger.debug("skipping %s: %s", entry_point.name, conflict)
                else:  # asked for by name: instrumenting nothing must not be silent
                    warn_once(
                        ("instrumentor not installable", entry_point.name),
                        "tallyspan: %s is not instrumented: %s",
                        entry_point.name,
                        conflict,
                    )
                continue
            instrumentor.instrument(
                # Checked just above: a second check would read the library's metadata again.
                skip_dep_check=True,
                tracer_provider=provider,
                capture_content=settings.capture_content,
            )
        except Exception:  # one instrumentor failing to install must not stop the app or the others
            swallowed(_logger, f"instrumentor.{entry_point.name}", f"could not instrument {entry_point.name}")
            continue
        enabled.append(instrumentor)
    for unknown in sorted((wanted or set()) - found):
        known = sorted(
            entry_point.name
            for entry_point in _own_entry_points(INSTRUMENTOR_GROUP)
            if entry_point.value.startswith(_OWN_INSTRUMENTORS_PACKAGE)
        )
        warn_once(
            ("unknown instrumentor", unknown),
            "tallyspan: no instrumentor is named %r (tallyspan's: %s; or any opentelemetry_instrumentor "
            "entry point name)",
            unknown,
            ", ".join(known),
        )
    return tuple(enabled)


def _entry_point_name(name: str) -> str:
    """``anthropic`` means our ``tallyspan_anthropic`` when no entry point has the bare name."""
    own = _own_entry_points(INSTRUMENTOR_GROUP).names
    if name in own or name in _every_entry_points(INSTRUMENTOR_GROUP).names:
        return name
    ours = f"tallyspan_{name}"
    return ours if ours in own else name


@atexit.register
def _flush_at_exit() -> None:
    """At interpreter exit, and in a ``multiprocessing`` worker before it leaves with ``os._exit``:
    deliver what is queued and stop, all within the shutdown budget.

    A provider the app owns may never be shut down: the spans still queued in our worker must not be
    lost. What the backend has not accepted stays in the spool; the provider's own shutdown, if it
    comes later, finds our chain stopped.
    """
    current = instrumentation()
    if current is None:
        return
    with final_flush():  # a SIGTERM meanwhile (Pool.terminate()) waits for it, within the budget
        try:
            budget = current.settings.shutdown_budget
            budget.start()
            current.force_flush(budget.remaining_millis())
            current.shutdown()
        except Exception:  # at exit there is nobody left to tell but the log
            swallowed(_logger, "atexit", "flushing tallyspan at exit failed")


class _PoolWorkerHook:
    """Registered with ``multiprocessing.util.register_after_fork`` (which holds it weakly)."""


_POOL_WORKER_HOOK: Final = _PoolWorkerHook()
#: The process in which the exit finalizer is registered (a forked child has another pid).
_exit_prepared_in: int | None = None


def _flush_in_pool_workers(module: object) -> None:
    """In a forked child: if it turns out to be a ``multiprocessing`` worker, flush before it exits.

    Such a worker leaves with ``os._exit`` (no atexit hooks) after running the finalizers of
    ``multiprocessing.util``; ``_bootstrap`` clears those inherited from the parent first, then runs the
    after-fork hooks: so the hook registers our finalizer there, in the child.
    """
    del module
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and instrumentation() is not None:
        mp_util.register_after_fork(_POOL_WORKER_HOOK, _prepare_worker_exit)


def _prepare_child_exit() -> None:
    """``instrument()`` in a ``multiprocessing`` child (``spawn`` and ``forkserver`` children are new
    interpreters: the parent's instrumentation does not reach them): flush before it exits, as a forked one.

    While a ``spawn`` or ``forkserver`` child imports the main module (``_inheriting``: an
    ``instrument()`` at its top level), its ``_bootstrap`` is still to come, and it clears the finalizers:
    register there. From a pool's ``initializer`` or a process's target, ``_bootstrap`` is done: at once.
    A ``forkserver`` child then leaves with ``os._exit``, so without the finalizer it lost every run.
    """
    process_module = sys.modules.get("multiprocessing.process")
    mp_util = sys.modules.get("multiprocessing.util")
    if process_module is None or mp_util is None:
        return
    if getattr(process_module.current_process(), "_inheriting", False):
        mp_util.register_after_fork(_POOL_WORKER_HOOK, _prepare_worker_exit)
        if _is_pool_worker():  # a spawn child runs no after-fork hook: its handler is installed now
            flush_on_sigterm(_flush_on_sigterm, _sigterm_wait_s)
    elif process_module.parent_process() is not None:
        _prepare_worker_exit(None)


def _prepare_worker_exit(hook: object) -> None:
    """In a ``multiprocessing`` child (its ``_bootstrap``, or the code it runs): flush at its exit, and in
    a pool worker on the SIGTERM of ``Pool.terminate()`` too."""
    del hook
    global _exit_prepared_in
    if _exit_prepared_in != os.getpid():
        _exit_prepared_in = os.getpid()
        mp_util = sys.modules["multiprocessing.util"]
        # exitpriority >= 0 runs in the worker's _exit_function; a high one runs before the others.
        mp_util.Finalize(None, _flush_at_exit, exitpriority=100)
    if _is_pool_worker():
        flush_on_sigterm(_flush_on_sigterm, _sigterm_wait_s)


def _is_pool_worker() -> bool:
    """Whether this process is a worker of a ``multiprocessing`` pool (which ``Pool.terminate()`` stops
    with SIGTERM, as does leaving ``with Pool() as pool:``)."""
    process_module = sys.modules.get("multiprocessing.process")
    if process_module is None:
        return False
    process = process_module.current_process()
    if getattr(process, "_inheriting", False):
        # A spawn or forkserver child importing the main module, before its process object is read: only
        # its name says what it is, and a pool names its workers so ("SpawnPoolWorker-3").
        return "PoolWorker-" in process.name
    pool = sys.modules.get("multiprocessing.pool")
    target = getattr(process, "_target", None)
    return pool is not None and target is not None and target is getattr(pool, "worker", None)


def _flush_on_sigterm(ends: bool) -> None:
    """A SIGTERM arrived: flush and stop when the process ends by it, flush only when the app's own
    handler decides (it may go on, and our chain with it)."""
    if ends:
        _flush_at_exit()
        return
    current = instrumentation()
    if current is not None:
        current.force_flush(int(current.settings.shutdown_budget.seconds * 1000))


def _sigterm_wait_s() -> float:
    current = instrumentation()
    return 0.0 if current is None else current.settings.shutdown_budget.seconds + LOCAL_WRITE_GRACE_S


after_fork_in_child(sys.modules[__name__], _flush_in_pool_workers)
