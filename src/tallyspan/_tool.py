"""``@tallyspan.tool`` and ``tallyspan.run``: the authoritative side of the ledger, and the agent run.

Usage::

    @tallyspan.tool(risk="high")
    def refund(order_id: str) -> str: ...          # span "execute_tool refund", outcome succeeded/failed

    @tallyspan.tool
    async def search(query: str) -> list[str]: ...

    with tallyspan.run("support_agent"):            # span "invoke_agent support_agent": the ledger's run
        ...

A tool that raises ``tallyspan.Rejected`` (a policy or permission refusal) has the outcome
``rejected``; any other exception ``failed``. Exceptions and results pass through unchanged.
"""

from __future__ import annotations

import functools
import inspect
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast, overload

from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan._books._ledger import DEFAULT_LOG_TOOL
from tallyspan._errors import Rejected
from tallyspan._selfstats import swallowed
from tallyspan._state import active, capture_content
from tallyspan._tool_spans import end_tool_span, json_text
from tallyspan._tracing import tracer

__all__ = ["run", "tool"]

_logger = logging.getLogger(__name__)
_F = TypeVar("_F", bound=Callable[..., Any])

#: Keyword arguments through which frameworks pass the id of the tool call being executed.
_CALL_ID_KWARGS = ("tool_call_id", "call_id")


@overload
def tool(func: _F, /) -> _F: ...
@overload
def tool(*, name: str | None = None, risk: str | None = None) -> Callable[[_F], _F]: ...
def tool(
    func: _F | None = None, /, *, name: str | None = None, risk: str | None = None
) -> _F | Callable[[_F], _F]:
    """Trace each call of a tool function as an ``execute_tool {name}`` span; sync or async.

    The call id is the ``tool_call_id`` keyword argument if the framework passes one (or ``call_id``,
    except for the log tool, whose ``call_id`` argument names the call being logged), else generated.

    Args:
        func: the function, when used bare (``@tallyspan.tool``).
        name: the tool name; default the function's ``__name__``.
        risk: a label recorded as ``tallyspan.tool.risk`` (e.g. ``"high"``).

    Returns:
        The wrapped function, or a decorator when called with keywords.

    Raises:
        TypeError: ``name`` or ``risk`` is not a non-empty string.
    """
    for label, value in (("name", name), ("risk", risk)):
        if value is not None and (not isinstance(value, str) or not value):
            raise TypeError(f"tallyspan.tool {label}= must be a non-empty string")

    def decorate(target: _F) -> _F:
        if not callable(target):
            raise TypeError("@tallyspan.tool decorates a function")
        tool_name = name or getattr(target, "__name__", None) or type(target).__name__
        try:
            signature: inspect.Signature | None = inspect.signature(target)
        except (TypeError, ValueError):  # builtins without a signature: arguments are recorded positionally
            signature = None

        if inspect.iscoroutinefunction(target):

            @functools.wraps(target)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if not is_instrumentation_enabled():
                    return await target(*args, **kwargs)
                with _tool_span(tool_name, risk, signature, args, kwargs) as record:
                    result = await target(*args, **kwargs)
                    record(result)
                    return result

            return cast(_F, async_wrapper)

        @functools.wraps(target)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not is_instrumentation_enabled():
                return target(*args, **kwargs)
            with _tool_span(tool_name, risk, signature, args, kwargs) as record:
                result = target(*args, **kwargs)
                record(result)
                return result

        return cast(_F, wrapper)

    if func is not None:
        return decorate(func)
    return decorate


@contextmanager
def _tool_span(
    tool_name: str,
    risk: str | None,
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Iterator[Callable[[Any], None]]:
    span: Span | None = None
    arguments: Mapping[str, Any] = {}
    results: list[Any] = []
    try:
        arguments = _bound_arguments(signature, args, kwargs)
        attributes: dict[str, AttributeValue] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL,
            semconv.GEN_AI_TOOL_NAME: tool_name,
            semconv.GEN_AI_TOOL_CALL_ID: _call_id(tool_name, kwargs),
        }
        if risk is not None:
            attributes[semconv.TOOL_RISK] = risk
        if capture_content():
            attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = json_text(arguments)
        span = tracer().start_span(
            semconv.span_name(semconv.OPERATION_EXECUTE_TOOL, tool_name),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
    except Exception:  # tracing failed: run the tool untraced rather than break the app
        swallowed(_logger, "tool.start", f"could not start the span of tool {tool_name!r}")
        span = None
    if span is None:
        yield results.append
        return
    error: BaseException | None = None
    with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        try:
            yield results.append
        except BaseException as exc:
            error = exc
            raise
        finally:
            end_tool_span(
                span,
                capture_content=capture_content(),
                error_type=None if error is None else type(error).__qualname__,
                rejected=isinstance(error, Rejected),
                arguments=arguments,
                result=results[0] if results else None,
            )


def _bound_arguments(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Mapping[str, Any]:
    if signature is not None:
        try:
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError:  # the call itself is wrong; the tool will raise, we record what we can
            pass
        else:
            return dict(bound.arguments)
    merged: dict[str, Any] = {str(i): value for i, value in enumerate(args)}
    merged.update(kwargs)
    return merged


def _call_id(tool_name: str, kwargs: Mapping[str, Any]) -> str:
    for key in _CALL_ID_KWARGS:
        if key == "call_id" and tool_name == _log_tool():
            continue  # the log tool's call_id argument is the logged call, not this one
        value = kwargs.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return f"call_{secrets.token_hex(12)}"


def _log_tool() -> str:
    current = active()
    return DEFAULT_LOG_TOOL if current is None else current.settings.ledger_log_tool


class run:  # noqa: N801 - used like a function: ``with tallyspan.run("agent"):``
    """Delimit an agent run: an ``invoke_agent {name}`` span whose end reconciles the ledger.

    A context manager (yields the span) or a decorator for sync and async functions.

    Args:
        name: the agent or run name (``gen_ai.agent.name`` and ``tallyspan.run.name``).

    Raises:
        TypeError: ``name`` is not a non-empty string.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError("tallyspan.run name must be a non-empty string")
        self._name = name
        self._active: list[Any] = []

    def __enter__(self) -> Span:
        manager = _run_span(self._name)
        span = manager.__enter__()
        self._active.append(manager)
        return span

    def __exit__(self, *exc_info: Any) -> None:
        self._active.pop().__exit__(*exc_info)

    def __call__(self, func: _F) -> _F:
        name = self._name
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with _run_span(name):
                    return await func(*args, **kwargs)

            return cast(_F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _run_span(name):
                return func(*args, **kwargs)

        return cast(_F, wrapper)


@contextmanager
def _run_span(name: str) -> Iterator[Span]:
    if not is_instrumentation_enabled():
        yield trace.INVALID_SPAN
        return
    try:
        span = tracer().start_span(
            semconv.span_name(semconv.OPERATION_INVOKE_AGENT, name),
            kind=SpanKind.INTERNAL,
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_INVOKE_AGENT,
                semconv.GEN_AI_AGENT_NAME: name,
                semconv.RUN_NAME: name,
            },
        )
    except Exception:  # tracing failed: run the agent untraced rather than break the app
        swallowed(_logger, "run.start", f"could not start the span of run {name!r}")
        yield trace.INVALID_SPAN
        return
    with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        try:
            yield span
        except BaseException as exc:
            try:
                span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            except Exception:  # never let our bookkeeping replace the app's exception
                swallowed(_logger, "run.error", "could not record a run's error")
            raise
        finally:
            span.end()
