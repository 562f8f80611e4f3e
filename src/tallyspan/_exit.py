"""Exit hooks of tallyspan's sinks, run after tallyspan's own chain has stopped at exit.

``atexit`` runs its hooks last registered first. A sink that registered its own hook when ``instrument()``
made it (the ledger's OTLP sink) was stopped before the provider's exit hook and ours drained the chain
into it: every ledger record still queued at exit was dropped (``dropped.otlp.logs.after_shutdown``, all
80 of a short script's). The hook here is registered when this module is first imported, which
``tallyspan._instrument`` does before it registers its own: so it runs after it, and after the exit hook
of a tracer provider made once tallyspan was imported. A sink in the chain is stopped with the chain and
takes its hook back; one used on its own is stopped here.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
from collections.abc import Callable

from tallyspan._selfstats import swallowed

__all__ = ["at_exit", "cancel_at_exit"]

_logger = logging.getLogger(__name__)

_hooks: list[Callable[[], object]] = []


def at_exit(hook: Callable[[], object]) -> None:
    """Call ``hook`` at interpreter exit, after tallyspan's chain has flushed and stopped."""
    _hooks.append(hook)


def cancel_at_exit(hook: Callable[[], object]) -> None:
    """Take back a hook given to :func:`at_exit` (the sink was stopped already); no error if it is not there."""
    with contextlib.suppress(ValueError):
        _hooks.remove(hook)


@atexit.register
def _run_hooks() -> None:
    while _hooks:
        hook = _hooks.pop()
        try:
            hook()
        except Exception:  # at exit there is nobody left to tell but the log
            swallowed(_logger, "atexit.sink", "stopping a tallyspan sink at exit failed")
