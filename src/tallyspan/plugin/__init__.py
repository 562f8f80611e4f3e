"""The plugin surface: everything the instrumentors, processors and exporters may take from the core.

tallyspan's plugin packages (``tallyspan_instrumentors``, ``tallyspan_processors``,
``tallyspan_exporters``) and third-party components import the core only through this module and the
public modules ``tallyspan``, ``tallyspan.semconv`` and ``tallyspan.ledger``; a test enforces it
(``tests/core/test_plugin_surface.py``). The private modules behind these names may move; these names
stay. ``docs/architecture.md`` says what each part of a plugin does with them.

Groups:

- **running state**: :func:`active` (the active instrumentation's settings and provider),
  :func:`resolve_capture_content` (the one rule for the ``capture_content`` option), ``__version__``;
- **instrumentors**: :func:`dependency_conflict` (whether a library is installed in range, without
  importing packaging when it can tell);
- **content hand-off**: :class:`ModelContent`, :class:`ToolContent`, :class:`ToolCallContent` and the
  process-wide :func:`content_buffer` instrumentors put them in (the chain's worker takes them out);
- **tool spans**: :func:`end_tool_span`, the one way an ``execute_tool`` span ends (outcome, error,
  content for the ledger), and :func:`json_text` for tool arguments and results as attributes;
- **JSON attributes**: :func:`json_encoder`, ``json.dumps`` for values we build (messages) with its
  encoder made once; :func:`json_bytes_encoder`, compact JSON in UTF-8 for the store's JSON columns;
- **runs**: :func:`is_run_span`, :func:`declares_run`, :func:`is_local_root`, :func:`is_run_container`;
- **checks**: :func:`check`, :class:`CheckResult`, :class:`Contract`, :class:`ContractSet`;
- **components**: :class:`Settings` (what a ``tallyspan.components`` factory is given), with its
  :class:`ExportSettings` and :class:`ShutdownBudget`,
  :func:`resolve_db_path`, the OTLP protocol helpers, :class:`ConfigError`;
- **the store's schema**: table names, :func:`connect`, :func:`is_locked`, migrations;
- **metrics**: :func:`record_violations`, :func:`record_run` (through the app's meter provider);
- **never break the host app**: :func:`count` and :func:`swallowed` (every caught error logged once and
  counted), :func:`stats` (the counters, which the store records for ``tallyspan doctor``),
  :func:`renew_lock_after_fork` (every lock a plugin owns) and :func:`after_fork_in_child` (every thread
  a plugin starts) and :func:`start_thread` (False where the interpreter refuses one: do the work on the
  caller's thread);
- **memory**: :func:`release_free_memory` (the C heap's free pages back to the OS after a busy spell);
- **backpressure**: :class:`Turns` (a producer lets go of the GIL until a starved thread of ours runs),
  from :func:`turn_threshold` items queued.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tallyspan._books._runs import declares_run, is_local_root, is_run_container, is_run_span
from tallyspan._config import (
    GRPC_INSTALL_HINT,
    ExportSettings,
    OTLPProtocol,
    ShutdownBudget,
    otlp_logs_protocol,
    otlp_traces_protocol,
    resolve_capture_content,
    resolve_db_path,
    warn_once,
)
from tallyspan._content import (
    Content,
    ContentBuffer,
    ModelContent,
    ToolCallContent,
    ToolContent,
    content_buffer,
)
from tallyspan._engine._taxonomy import FAILURE_CLASS_OF, ViolationType
from tallyspan._errors import ConfigError
from tallyspan._fork import after_fork_in_child, renew_lock_after_fork, start_thread
from tallyspan._json_encoding import json_bytes_encoder, json_encoder
from tallyspan._memory import release_free_memory
from tallyspan._metrics import record_run, record_violations
from tallyspan._requirements import UnmetRequirements, dependency_conflict
from tallyspan._selfstats import count, stats, swallowed
from tallyspan._span_reading import SDK_SPAN_TYPES, plain_attributes
from tallyspan._stage import current_stage
from tallyspan._state import RunningState, Settings, active
from tallyspan._store._store_schema import (
    BUSY_TIMEOUT_MS,
    LEDGER_ENTRIES,
    LEDGER_RECONCILIATIONS,
    MIGRATIONS,
    RUNS,
    SELF_STATS,
    SPANS,
    VIOLATIONS,
    connect,
    is_locked,
    migration,
)
from tallyspan._tool_spans import end_tool_span, json_text
from tallyspan._turns import TURN_SLICE_S, HandOvers, Turns, turn_threshold
from tallyspan._version import __version__

if TYPE_CHECKING:
    from tallyspan._contract._contracts import Contract, ContractSet
    from tallyspan._engine._checks import CheckResult, check

# The check engine and the contracts load on first use (see tallyspan/__init__.py): an instrumentor
# imports this module and must not pay for regex, YAML or jsonschema.
_LAZY = {"CheckResult", "check", "Contract", "ContractSet"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import tallyspan

    value = getattr(tallyspan, name)
    globals()[name] = value
    return value


__all__ = [
    "BUSY_TIMEOUT_MS",
    "FAILURE_CLASS_OF",
    "GRPC_INSTALL_HINT",
    "LEDGER_ENTRIES",
    "LEDGER_RECONCILIATIONS",
    "MIGRATIONS",
    "RUNS",
    "SDK_SPAN_TYPES",
    "SELF_STATS",
    "SPANS",
    "TURN_SLICE_S",
    "VIOLATIONS",
    "CheckResult",
    "ConfigError",
    "Content",
    "ContentBuffer",
    "Contract",
    "ContractSet",
    "ExportSettings",
    "HandOvers",
    "ModelContent",
    "OTLPProtocol",
    "RunningState",
    "Settings",
    "ShutdownBudget",
    "ToolCallContent",
    "ToolContent",
    "Turns",
    "UnmetRequirements",
    "ViolationType",
    "__version__",
    "active",
    "after_fork_in_child",
    "check",
    "connect",
    "content_buffer",
    "count",
    "current_stage",
    "declares_run",
    "dependency_conflict",
    "end_tool_span",
    "is_local_root",
    "is_locked",
    "is_run_container",
    "is_run_span",
    "json_bytes_encoder",
    "json_encoder",
    "json_text",
    "migration",
    "otlp_logs_protocol",
    "otlp_traces_protocol",
    "plain_attributes",
    "record_run",
    "record_violations",
    "release_free_memory",
    "renew_lock_after_fork",
    "resolve_capture_content",
    "resolve_db_path",
    "start_thread",
    "stats",
    "swallowed",
    "turn_threshold",
    "warn_once",
]
