"""The MCP wrappers: ``ClientSession.call_tool`` (client) and ``ServerRunner._on_request`` (server).

Client: a CLIENT ``execute_tool {tool}`` span around the call, whose W3C context (``traceparent``,
``tracestate``, ``baggage``) is injected into the request's ``params._meta`` (SEP-414; the user's
``meta`` is copied, never mutated). The MCP SDK's own dispatcher may inject again from its child span:
either way the server's parent is in our trace.

Server: every request of an in-process server passes ``ServerRunner._on_request``; for ``tools/call``
we open a SERVER ``execute_tool {tool}`` span whose parent is extracted from ``params._meta`` (the
ambient context, when there is one and it differs, becomes a link, as the conventions ask).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer

from tallyspan import semconv
from tallyspan.plugin import swallowed
from tallyspan_instrumentors.mcp._spans import (
    fail_from_exception,
    finish_from_result,
    is_error_result,
    tool_attributes,
)

__all__ = ["WrapperState", "call_tool_wrapper", "on_request_wrapper"]

_logger = logging.getLogger(__name__)


class WrapperState:
    """What the wrappers need; ``enabled`` turns them into pass-throughs after ``uninstrument()``
    (a server runner caches its bound handler, so an unwrapped class can still reach our wrapper)."""

    def __init__(self, tracer: Tracer, capture_content: bool) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        self.enabled = True


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _enclosing_tool_span() -> Span | None:
    """The current span when an agent framework's instrumentation already records this tool execution.

    The MCP conventions: when outer GenAI instrumentation traces the tool execution, the MCP client adds
    its attributes to that span instead of making a second one (which the ledger would count twice).
    """
    current = trace.get_current_span()
    if not current.is_recording() or getattr(current, "kind", None) is SpanKind.SERVER:
        return None
    attributes = getattr(current, "attributes", None) or {}
    if attributes.get(semconv.GEN_AI_OPERATION_NAME) != semconv.OPERATION_EXECUTE_TOOL:
        return None
    return current


def _start_client_span(
    state: WrapperState, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Span, bool, dict[str, Any], Any] | None:
    """Our span (or the enclosing tool span, flagged False: not ours to end) and the kwargs with ``meta``."""
    name = _argument(args, kwargs, 0, "name")
    if not isinstance(name, str):
        return None
    attributes = tool_attributes(name, protocol_version=getattr(instance, "protocol_version", None))
    enclosing = _enclosing_tool_span()
    if enclosing is not None:
        attributes.pop(semconv.GEN_AI_TOOL_NAME)  # the framework's name for the tool stays
        enclosing.set_attributes(attributes)
        span, owned = enclosing, False
    else:
        span = state.tracer.start_span(
            semconv.span_name(semconv.OPERATION_EXECUTE_TOOL, name),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        owned = True
    meta = dict(kwargs.get("meta") or {})
    propagate.inject(meta, context=trace.set_span_in_context(span))
    new_kwargs = dict(kwargs)
    new_kwargs["meta"] = meta
    return span, owned, new_kwargs, _argument(args, kwargs, 1, "arguments")


def _mark_enclosing_failed(span: Span, result: Any) -> None:
    """An error result inside a framework's tool span: mark it failed (its owner ends it, keeping that)."""
    if is_error_result(result):
        span.set_attribute(semconv.TOOL_OUTCOME, semconv.OUTCOME_FAILED)
        span.set_attribute(semconv.ERROR_TYPE, semconv.ERROR_TYPE_TOOL_ERROR)
        span.set_status(Status(StatusCode.ERROR, semconv.ERROR_TYPE_TOOL_ERROR))


def call_tool_wrapper(state: WrapperState) -> Callable[..., Awaitable[Any]]:
    """The wrapt wrapper of ``ClientSession.call_tool``."""

    async def wrapper(wrapped: Callable[..., Awaitable[Any]], instance: Any, args: Any, kwargs: Any) -> Any:
        if not state.enabled or not is_instrumentation_enabled():
            return await wrapped(*args, **kwargs)
        try:
            started = _start_client_span(state, instance, args, kwargs)
        except Exception:  # a call we cannot read still runs, untraced
            swallowed(_logger, "mcp.client.start", "tallyspan could not start an MCP tool-call span")
            started = None
        if started is None:
            return await wrapped(*args, **kwargs)
        span, owned, new_kwargs, arguments = started
        if not owned:  # the framework's tool span: it sees the exception and ends the span itself
            result = await wrapped(*args, **new_kwargs)
            try:
                _mark_enclosing_failed(span, result)
            except Exception:  # the result still reaches the app
                swallowed(_logger, "mcp.client.enclosing", "tallyspan could not mark an MCP tool result")
            return result
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            result = await wrapped(*args, **new_kwargs)
        except BaseException as exc:
            fail_from_exception(span, exc, arguments, capture_content=state.capture_content)
            raise
        finally:
            otel_context.detach(token)
        finish_from_result(span, result, arguments, capture_content=state.capture_content)
        return result

    return wrapper


def _server_parent(meta: Any) -> tuple[otel_context.Context | None, list[Link]]:
    """The parent from ``params._meta`` (else the ambient context) and a link to the ambient span."""
    ambient = trace.get_current_span().get_span_context()
    if not isinstance(meta, Mapping):
        return None, []
    extracted = propagate.extract({k: v for k, v in meta.items() if isinstance(v, str)})
    remote = trace.get_current_span(extracted).get_span_context()
    if not remote.is_valid:
        return None, []
    links = [Link(ambient)] if ambient.is_valid and ambient.span_id != remote.span_id else []
    return extracted, links


def _start_server_span(
    state: WrapperState, instance: Any, dispatch: Any, params: Any
) -> tuple[Span, Any] | None:
    if not isinstance(params, Mapping):
        return None
    name = params.get("name")
    if not isinstance(name, str):
        return None
    connection = getattr(instance, "connection", None)
    attributes = tool_attributes(
        name,
        protocol_version=getattr(connection, "protocol_version", None),
        session_id=getattr(connection, "session_id", None),
    )
    request_id = getattr(dispatch, "request_id", None)
    if isinstance(request_id, str | int) and not isinstance(request_id, bool):
        attributes[semconv.JSONRPC_REQUEST_ID] = str(request_id)
    parent, links = _server_parent(params.get("_meta"))
    span = state.tracer.start_span(
        semconv.span_name(semconv.OPERATION_EXECUTE_TOOL, name),
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        links=links,
    )
    return span, params.get("arguments")


def on_request_wrapper(state: WrapperState) -> Callable[..., Awaitable[Any]]:
    """The wrapt wrapper of ``ServerRunner._on_request(dctx, method, params)``."""

    async def wrapper(wrapped: Callable[..., Awaitable[Any]], instance: Any, args: Any, kwargs: Any) -> Any:
        if (
            not state.enabled
            or _argument(args, kwargs, 1, "method") != semconv.MCP_METHOD_TOOLS_CALL
            or not is_instrumentation_enabled()
        ):
            return await wrapped(*args, **kwargs)
        try:
            started = _start_server_span(
                state, instance, _argument(args, kwargs, 0, "dctx"), _argument(args, kwargs, 2, "params")
            )
        except Exception:  # the server still answers the call, untraced
            swallowed(_logger, "mcp.server.start", "tallyspan could not start an MCP server tool span")
            started = None
        if started is None:
            return await wrapped(*args, **kwargs)
        span, arguments = started
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            fail_from_exception(span, exc, arguments, capture_content=state.capture_content)
            raise
        finally:
            otel_context.detach(token)
        finish_from_result(span, result, arguments, capture_content=state.capture_content)
        return result

    return wrapper
