"""What an agent run is: the one rule the ledger, the store and the CLI share.

A run is delimited by a span that *declares* one (``invoke_agent`` / ``invoke_workflow``, or a
``tallyspan.run``), else by the local root of its trace (no parent, or a parent in another process: an
agent called over HTTP is a run of its own here). Every span belongs to the run of its nearest run span.

The ledger reconciles every declared run, and a local root only when something was entered on its
books: a lone model call is a root span but has no books to balance.

A workflow span or local root whose work all happened in agent runs nested in it (the OpenAI Agents
SDK's trace around its agent, LangGraph's graph around a named agent, a server span around a
``tallyspan.run``) is their *container*, not a run of its own: one ``Runner.run`` is one run in the
ledger and the store, not two. The ledger processor finds it out when the span ends
(:func:`is_run_container`) and marks the span ``tallyspan.run.container``, which :func:`is_run_span`
reads; it still carries the roll-up of the violations below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanContext

from tallyspan import semconv

__all__ = ["declares_run", "is_local_root", "is_run_container", "is_run_span"]


def declares_run(attributes: Mapping[str, Any]) -> bool:
    """True for an ``invoke_agent`` / ``invoke_workflow`` span or a ``tallyspan.run``."""
    return (
        attributes.get(semconv.GEN_AI_OPERATION_NAME) in semconv.RUN_OPERATIONS
        or semconv.RUN_NAME in attributes
    )


def is_local_root(parent: SpanContext | None) -> bool:
    """True for a span with no parent in this process (none at all, or a remote one)."""
    return parent is None or parent.is_remote


def is_run_container(attributes: Mapping[str, Any], *, nested_runs: int, has_books: bool) -> bool:
    """True for a run span that only encloses other runs: ``nested_runs`` ended inside it and nothing was
    entered on its own books. An agent span (``invoke_agent``, ``tallyspan.run``) is always a run."""
    if not nested_runs or has_books:
        return False
    return (
        attributes.get(semconv.GEN_AI_OPERATION_NAME) != semconv.OPERATION_INVOKE_AGENT
        and semconv.RUN_NAME not in attributes
    )


def is_run_span(attributes: Mapping[str, Any], parent: SpanContext | None) -> bool:
    """True for a span that delimits an agent run: one that declares a run, or a local root, unless the
    ledger marked it a container of runs (``tallyspan.run.container``)."""
    if attributes.get(semconv.RUN_CONTAINER) is True:
        return False
    return declares_run(attributes) or is_local_root(parent)
