"""The MCP wrappers: ``ClientSession.call_tool`` (client) and ``ServerRunner._on_request`` (server).

Client: a CLIENT ``execute_tool {tool}`` span around the call, whose W3C context (``traceparent``,
``tracestate``, ``baggage``) is injected into the request's ``params._meta`` (SEP-414; the user's
``meta`` is copied, never mutated). The MCP SDK's own dispatcher may inject again from its child span:
either way the server's parent is in our trace.

Server: every request of an in-process server passes ``ServerRunner._on_request``; for ``tools/call``
we open a SERVER ``execute_tool {tool}`` span whose parent is extracted from ``params._meta`` (the
ambient context, when there is one and it differs, becomes a link, as the conventions ask).

The conventions name MCP spans ``{mcp.method.name} {target}``; we name them ``execute_tool {tool}``
(the GenAI form the conventions call compatible) so the checks, the ledger and every dashboard find MCP
tools like any other tool, and carry ``mcp.method.name=tools/call`` for MCP-aware backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from tallyspan import semconv
from tallyspan_instrumentors._base import WrapperState
from tallyspan_instrumentors._calls import SpanCall, ToolCall, error_type, tool_call_wrapper
from tallyspan_instrumentors.mcp._extract import is_error_result, result_text, tool_attributes

__all__ = ["call_tool", "on_request"]


class _MCPCall(SpanCall, Protocol):
    """A call the wrappers end from a CallToolResult."""

    def finish_with(self, result: Any) -> None:
        """End (or mark) the span from the call's result."""


class _MCPToolCall(ToolCall):
    """A tool call whose span is ours; a JSON-RPC error gives its code as ``error.type``."""

    __slots__ = ()

    def error_type_of(self, exc: BaseException) -> str:
        """The JSON-RPC error code when there is one, else the exception's class."""
        code = getattr(getattr(exc, "error", None), "code", None)
        return str(code) if isinstance(code, int) and not isinstance(code, bool) else error_type(exc)

    def finish_with(self, result: Any) -> None:
        """End the span from the call's CallToolResult: ``isError`` true means the tool failed."""
        failed = is_error_result(result)
        self.finish(result_text(result), error_type=semconv.ERROR_TYPE_TOOL_ERROR if failed else None)


class _EnclosingToolCall:
    """A framework's tool span that already records this execution: its owner ends it, not us.

    The MCP conventions: when outer GenAI instrumentation traces the tool execution, the MCP client adds
    its attributes to that span instead of making a second one (which the ledger would count twice).
    """

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def fail(self, exc: BaseException) -> None:
        """Nothing: the framework sees the exception and ends its span itself."""

    def finish_unread(self) -> None:
        """Nothing: the framework ends its span."""

    def finish_with(self, result: Any) -> None:
        """An error result: mark the span failed (its owner ends it, keeping that)."""
        if is_error_result(result):
            self.span.set_attribute(semconv.TOOL_OUTCOME, semconv.OUTCOME_FAILED)
            self.span.set_attribute(semconv.ERROR_TYPE, semconv.ERROR_TYPE_TOOL_ERROR)
            self.span.set_status(Status(StatusCode.ERROR, semconv.ERROR_TYPE_TOOL_ERROR))


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _enclosing_tool_span() -> Span | None:
    """The current span when an agent framework's instrumentation already records this tool execution."""
    current = trace.get_current_span()
    if not current.is_recording() or getattr(current, "kind", None) is SpanKind.SERVER:
        return None
    attributes = getattr(current, "attributes", None) or {}
    if attributes.get(semconv.GEN_AI_OPERATION_NAME) != semconv.OPERATION_EXECUTE_TOOL:
        return None
    return current


def _start_client(
    state: WrapperState, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _MCPCall | None:
    name = _argument(args, kwargs, 0, "name")
    if not isinstance(name, str):
        return None
    attributes = tool_attributes(name, protocol_version=getattr(instance, "protocol_version", None))
    enclosing = _enclosing_tool_span()
    call: _MCPCall
    if enclosing is not None:
        attributes.pop(semconv.GEN_AI_TOOL_NAME)  # the framework's name for the tool stays
        enclosing.set_attributes(attributes)
        call = _EnclosingToolCall(enclosing)
    else:
        span = state.tracer.start_span(
            semconv.span_name(semconv.OPERATION_EXECUTE_TOOL, name),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        arguments = _argument(args, kwargs, 1, "arguments")
        call = _MCPToolCall(span, arguments=arguments, capture_content=state.capture_content)
    # The call goes with a copy of the app's meta carrying the span's context (kwargs is this call's own).
    meta = dict(kwargs.get("meta") or {})
    propagate.inject(meta, context=trace.set_span_in_context(call.span))
    kwargs["meta"] = meta
    return call


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


def _start_server(
    state: WrapperState, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _MCPCall | None:
    """``_on_request(dctx, method, params)``: a span for ``tools/call`` requests only."""
    params = _argument(args, kwargs, 2, "params")
    if _argument(args, kwargs, 1, "method") != semconv.MCP_METHOD_TOOLS_CALL or not isinstance(
        params, Mapping
    ):
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
    request_id = getattr(_argument(args, kwargs, 0, "dctx"), "request_id", None)
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
    return _MCPToolCall(span, arguments=params.get("arguments"), capture_content=state.capture_content)


def _finish(call: _MCPCall, result: Any, kwargs: Mapping[str, Any]) -> Any:
    call.finish_with(result)
    return result


call_tool = tool_call_wrapper(_start_client, _finish, is_async=True)
"""Wrap ``ClientSession.call_tool``."""
on_request = tool_call_wrapper(_start_server, _finish, is_async=True)
"""Wrap ``ServerRunner._on_request`` (a server runner caches its bound handler: see ``WrapperState.enabled``)."""
