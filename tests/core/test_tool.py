"""@tallyspan.tool and tallyspan.run: the execute_tool / invoke_agent spans, outcomes, content, passthrough."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tests.conftest import MakeInstrumented

import tallyspan
from tallyspan import semconv
from tallyspan._content import ToolContent, content_buffer


class _BoomError(Exception):
    pass


@pytest.fixture
def instrument_raw(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, make_instrumented: MakeInstrumented
) -> Callable[..., InMemorySpanExporter]:
    """Call it (with ``instrument()`` keywords) to instrument with no library and no store; returns the
    exporter of the spans as our decorators made them (straight from the provider, before our chain)."""
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))

    def instrument(**arguments: Any) -> InMemorySpanExporter:
        make_instrumented(
            store=None, instrumentors=(), adopt_processors=False, span_processors=(), **arguments
        )
        return span_exporter

    return instrument


@pytest.fixture
def raw_spans(instrument_raw: Callable[..., InMemorySpanExporter]) -> InMemorySpanExporter:
    """Spans as our decorators made them (straight from the provider, before our chain)."""
    return instrument_raw()


def _only(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = exporter.get_finished_spans()
    return span


def test_sync_tool_span_has_the_genai_attributes(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool
    def search(query: str, tool_call_id: str | None = None) -> list[str]:
        return [query]

    assert search("tokyo", tool_call_id="call_1") == ["tokyo"]
    span = _only(raw_spans)
    assert span.name == "execute_tool search"
    assert span.kind is SpanKind.INTERNAL
    assert dict(span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "execute_tool",
        semconv.GEN_AI_TOOL_NAME: "search",
        semconv.GEN_AI_TOOL_CALL_ID: "call_1",
        semconv.TOOL_OUTCOME: "succeeded",
    }
    assert span.status.status_code is StatusCode.UNSET


def test_name_and_risk_options(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool(name="refund_order", risk="high")
    def refund(order: str, call_id: str) -> str:
        return "done"

    refund("A1", call_id="c7")
    span = _only(raw_spans)
    assert span.name == "execute_tool refund_order"
    attributes = span.attributes or {}
    assert attributes[semconv.GEN_AI_TOOL_NAME] == "refund_order"
    assert attributes[semconv.TOOL_RISK] == "high"
    assert attributes[semconv.GEN_AI_TOOL_CALL_ID] == "c7"


def test_call_id_is_generated_when_the_framework_passes_none(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool
    def ping() -> str:
        return "pong"

    ping()
    ping()
    first, second = (
        (span.attributes or {})[semconv.GEN_AI_TOOL_CALL_ID] for span in raw_spans.get_finished_spans()
    )
    assert isinstance(first, str)
    assert first.startswith("call_")
    assert len(first) == 29
    assert first != second


def test_log_tool_call_id_argument_is_the_logged_call_not_its_own(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool
    def log_action(call_id: str, tool_name: str, claimed_outcome: str) -> str:
        return "ok"

    log_action(call_id="c1", tool_name="search", claimed_outcome="succeeded")
    own_id = (_only(raw_spans).attributes or {})[semconv.GEN_AI_TOOL_CALL_ID]
    assert own_id != "c1"


def test_failed_tool_re_raises_the_same_exception(raw_spans: InMemorySpanExporter) -> None:
    error = _BoomError("secret detail")

    @tallyspan.tool
    def book() -> None:
        raise error

    with pytest.raises(_BoomError) as raised:
        book()
    assert raised.value is error
    span = _only(raw_spans)
    attributes = span.attributes or {}
    assert attributes[semconv.TOOL_OUTCOME] == "failed"
    assert attributes[semconv.ERROR_TYPE] == "_BoomError"
    assert span.status.status_code is StatusCode.ERROR
    assert "secret detail" not in (span.status.description or "")
    assert span.events == ()


def test_rejected_tool_has_outcome_rejected(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool
    def delete_all() -> None:
        raise tallyspan.Rejected("policy forbids it")

    with pytest.raises(tallyspan.Rejected, match="policy forbids it"):
        delete_all()
    attributes = _only(raw_spans).attributes or {}
    assert attributes[semconv.TOOL_OUTCOME] == "rejected"
    assert attributes[semconv.ERROR_TYPE] == "Rejected"


async def test_async_tool_outcomes(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool(name="fetch")
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return url.upper()

    @tallyspan.tool
    async def refuse() -> None:
        raise tallyspan.Rejected

    assert await fetch("a") == "A"
    with pytest.raises(tallyspan.Rejected):
        await refuse()
    outcomes = [
        (span.name, (span.attributes or {})[semconv.TOOL_OUTCOME]) for span in raw_spans.get_finished_spans()
    ]
    assert outcomes == [("execute_tool fetch", "succeeded"), ("execute_tool refuse", "rejected")]


def test_tool_span_is_current_inside_the_tool(raw_spans: InMemorySpanExporter) -> None:
    seen: list[str] = []

    @tallyspan.tool
    def inner() -> None:
        seen.append(format(trace.get_current_span().get_span_context().span_id, "016x"))

    inner()
    assert seen == [format(_only(raw_spans).context.span_id, "016x")]


def test_content_is_on_the_span_only_when_captured(
    instrument_raw: Callable[..., InMemorySpanExporter],
) -> None:
    exporter = instrument_raw(capture_content=True)

    @tallyspan.tool
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    add(2, b=3)
    attributes = _only(exporter).attributes or {}
    assert json.loads(str(attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])) == {"a": 2, "b": 3}
    assert json.loads(str(attributes[semconv.GEN_AI_TOOL_CALL_RESULT])) == {"sum": 5}


class _PeekContent(SpanProcessor):
    """Added before our chain, so its on_end runs on the app's thread before the chain takes the content."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.seen.append(content_buffer().peek(span.context.span_id))


def test_content_is_not_on_the_span_by_default_but_in_the_buffer(tracer_provider: TracerProvider) -> None:
    peek = _PeekContent()
    exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(peek)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tallyspan.instrument(
        tracer_provider=tracer_provider, store=None, instrumentors=(), adopt_processors=False
    )

    @tallyspan.tool
    def add(a: int, b: int) -> int:
        return a + b

    add(1, 2)
    attributes = _only(exporter).attributes or {}
    assert semconv.GEN_AI_TOOL_CALL_ARGUMENTS not in attributes
    assert semconv.GEN_AI_TOOL_CALL_RESULT not in attributes
    assert peek.seen == [ToolContent(arguments={"a": 1, "b": 2}, result=3)]


def test_suppressed_instrumentation_makes_no_span(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool
    def quiet() -> int:
        return 1

    with suppress_instrumentation(), tallyspan.run("hidden"):
        assert quiet() == 1
    assert raw_spans.get_finished_spans() == ()


def test_without_instrument_the_global_provider_is_used() -> None:
    @tallyspan.tool
    def plain(x: int) -> int:
        return x * 2

    assert plain(4) == 8  # the global provider is the API's no-op here: no error, same result


def test_bad_options_raise_type_error() -> None:
    with pytest.raises(TypeError, match="name"):
        tallyspan.tool(name="")
    with pytest.raises(TypeError, match="risk"):
        tallyspan.tool(risk=3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="run name"):
        tallyspan.run("")


def test_wraps_keep_the_function_identity() -> None:
    @tallyspan.tool
    def documented(x: int) -> int:
        """Doc."""
        return x

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Doc."


def test_run_span_is_the_parent_of_the_tools(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.tool
    def step() -> None:
        return None

    with tallyspan.run("support_agent") as run_span:
        step()
        assert run_span.is_recording()
    tool_span, run = raw_spans.get_finished_spans()
    assert run.name == "invoke_agent support_agent"
    assert dict(run.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "invoke_agent",
        semconv.GEN_AI_AGENT_NAME: "support_agent",
        semconv.RUN_NAME: "support_agent",
    }
    assert tool_span.parent is not None
    assert tool_span.parent.span_id == run.context.span_id


def test_run_as_decorator_sync_and_async_and_errors_pass_through(raw_spans: InMemorySpanExporter) -> None:
    @tallyspan.run("sync_agent")
    def agent() -> str:
        return "done"

    @tallyspan.run("async_agent")
    async def async_agent() -> str:
        return "async done"

    error = _BoomError("x")

    @tallyspan.run("failing")
    def failing() -> None:
        raise error

    assert agent() == "done"
    assert asyncio.run(async_agent()) == "async done"
    with pytest.raises(_BoomError) as raised:
        failing()
    assert raised.value is error
    spans = {span.name: span for span in raw_spans.get_finished_spans()}
    assert set(spans) == {"invoke_agent sync_agent", "invoke_agent async_agent", "invoke_agent failing"}
    assert spans["invoke_agent failing"].status.status_code is StatusCode.ERROR


def test_same_run_object_can_be_entered_nested(raw_spans: InMemorySpanExporter) -> None:
    outer = tallyspan.run("agent")
    with outer, outer:
        pass
    assert len(raw_spans.get_finished_spans()) == 2


async def test_cancelled_async_tool_is_failed_and_the_cancellation_passes_through(
    raw_spans: InMemorySpanExporter,
) -> None:
    started = asyncio.Event()

    @tallyspan.tool
    async def slow() -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(slow())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    attributes = _only(raw_spans).attributes or {}
    assert attributes[semconv.TOOL_OUTCOME] == "failed"
    assert attributes[semconv.ERROR_TYPE] == "CancelledError"


def test_unserialisable_result_is_captured_as_text_and_returned_unchanged(
    instrument_raw: Callable[..., InMemorySpanExporter],
) -> None:
    exporter = instrument_raw(capture_content=True)
    circular: list[object] = []
    circular.append(circular)

    @tallyspan.tool
    def loop() -> list[object]:
        return circular

    assert loop() is circular
    assert (_only(exporter).attributes or {})[semconv.GEN_AI_TOOL_CALL_RESULT] == "[[...]]"


def test_methods_can_be_tools(raw_spans: InMemorySpanExporter) -> None:
    class Agent:
        @tallyspan.tool(name="lookup")
        def lookup(self, key: str) -> str:
            return key * 2

    assert Agent().lookup("ab") == "abab"
    assert _only(raw_spans).name == "execute_tool lookup"


def test_ledger_module_docstring_example_runs() -> None:
    from tallyspan import ledger

    result = ledger.reconcile(
        [ledger.Observed("c1", "book_flight", "succeeded", seq=0)],
        [ledger.Claim("c1", "book_flight", "succeeded", "booked HAT001", seq=1)],
    )
    assert result.balanced
    assert result.protocol_ok
