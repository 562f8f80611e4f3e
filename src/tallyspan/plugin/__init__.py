"""The plugin surface: what the instrumentors, processors and exporters may take from the core.

tallyspan's plugin packages (``tallyspan_instrumentors``, ``tallyspan_processors``,
``tallyspan_exporters``) and third-party components import the core only through this package and the
public modules ``tallyspan``, ``tallyspan.semconv`` and ``tallyspan.ledger``; a test enforces it
(``tests/core/test_plugin_surface.py``). The private modules behind these names may move; these names
stay. ``docs/architecture.md`` says what each part of a plugin does with them.

This module holds what every kind of plugin uses; one module per kind holds the rest:

- :mod:`tallyspan.plugin.instrumentors`: the running state and stage, library checks, tool spans;
- :mod:`tallyspan.plugin.processors`: the check engine, runs and metrics;
- :mod:`tallyspan.plugin.exporters`: the store's schema and the OTLP settings.

Here:

- **components**: :class:`Settings` (what a ``tallyspan.components`` factory is given) with its
  :class:`ShutdownBudget`, :class:`ConfigError`, ``__version__``;
- **content hand-off**: :class:`ModelContent`, :class:`ToolContent`, :class:`ToolCallContent` (each a
  :data:`Content`) and the process-wide :func:`content_buffer` (a :class:`ContentBuffer`)
  instrumentors put them in and the chain's worker takes them out of; :func:`json_text` and
  :func:`plain_attributes` for what they carry as attributes;
- **never break the host app**: :func:`count` and :func:`swallowed` (every caught error logged once and
  counted), :func:`warn_once`, :func:`stats` (the counters, which the store records for
  ``tallyspan doctor``), :func:`renew_lock_after_fork` (every lock a plugin owns),
  :func:`after_fork_in_child` (every thread a plugin starts) and :func:`start_thread` (False where the
  interpreter refuses one: do the work on the caller's thread);
- **threads of ours**: :class:`Turns` (a producer lets go of the GIL until a starved thread of ours
  runs, from :func:`turn_threshold` items queued, for turns of ``TURN_SLICE_S``), :class:`HandOvers`
  (``Settings.hand_overs``: the app's threads hand the GIL to the store's writers) and
  :func:`release_free_memory` (the C heap's free pages back to the OS after a busy spell).
"""

from __future__ import annotations

from tallyspan._config import ShutdownBudget, warn_once
from tallyspan._content import (
    Content,
    ContentBuffer,
    ModelContent,
    ToolCallContent,
    ToolContent,
    content_buffer,
)
from tallyspan._errors import ConfigError
from tallyspan._fork import after_fork_in_child, renew_lock_after_fork, start_thread
from tallyspan._memory import release_free_memory
from tallyspan._selfstats import count, stats, swallowed
from tallyspan._span_reading import plain_attributes
from tallyspan._state import Settings
from tallyspan._tool_spans import json_text
from tallyspan._turns import TURN_SLICE_S, HandOvers, Turns, turn_threshold
from tallyspan._version import __version__

__all__ = [
    "TURN_SLICE_S",
    "ConfigError",
    "Content",
    "ContentBuffer",
    "HandOvers",
    "ModelContent",
    "Settings",
    "ShutdownBudget",
    "ToolCallContent",
    "ToolContent",
    "Turns",
    "__version__",
    "after_fork_in_child",
    "content_buffer",
    "count",
    "json_text",
    "plain_attributes",
    "release_free_memory",
    "renew_lock_after_fork",
    "start_thread",
    "stats",
    "swallowed",
    "turn_threshold",
    "warn_once",
]
