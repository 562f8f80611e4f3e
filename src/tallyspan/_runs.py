"""What an agent run is: the one rule the ledger, the store and the CLI share.

A run is delimited by a span that *declares* one (``invoke_agent`` / ``invoke_workflow``, or a
``tallyspan.run``), else by the local root of its trace (no parent, or a parent in another process: an
agent called over HTTP is a run of its own here). Every span belongs to the run of its nearest run span.

The ledger reconciles every declared run, and a local root only when something was entered on its
books: a lone model call is a root span but has no books to balance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanContext

from tallyspan import semconv

__all__ = ["declares_run", "is_local_root", "is_run_span"]


def declares_run(attributes: Mapping[str, Any]) -> bool:
    """True for an ``invoke_agent`` / ``invoke_workflow`` span or a ``tallyspan.run``."""
    return (
        attributes.get(semconv.GEN_AI_OPERATION_NAME) in semconv.RUN_OPERATIONS
        or semconv.RUN_NAME in attributes
    )


def is_local_root(parent: SpanContext | None) -> bool:
    """True for a span with no parent in this process (none at all, or a remote one)."""
    return parent is None or parent.is_remote


def is_run_span(attributes: Mapping[str, Any], parent: SpanContext | None) -> bool:
    """True for a span that delimits an agent run: one that declares a run, or a local root."""
    return declares_run(attributes) or is_local_root(parent)
