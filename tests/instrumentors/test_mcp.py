"""MCP instrumentor: a real in-process MCP server and client, spans read from an in-memory exporter."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tallyspan
from tallyspan import semconv
from tallyspan._content import ToolContent, content_buffer
from tallyspan_instrumentors.mcp import MCPInstrumentor

INVALID_PARAMS = -32602


@pytest.fixture(autouse=True)
def _no_swallowed_errors() -> Iterator[None]:
    """Every test here also checks that tallyspan swallowed no error of its own along the way."""
    yield
    assert {k: v for k, v in tallyspan.stats().items() if k.startswith("errors.")} == {}


@pytest.fixture
def exporter(
    instrument_libraries: Callable[..., InMemorySpanExporter],
    tracer_provider: TracerProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> InMemorySpanExporter:
    """MCP instrumented on a private provider (content not captured).

    mcp 2 traces its own messages on the global provider, and its client span, when recording, is the
    parent it sends the server. A user's one provider sees the whole tree; here its spans go to the same
    private provider, so the tests see that tree whether or not an earlier test set a global provider."""
    if importlib.util.find_spec("mcp.shared._otel") is not None:  # mcp 2 and later
        monkeypatch.setattr("mcp.shared._otel._tracer", tracer_provider.get_tracer("mcp-python-sdk"))
    return instrument_libraries(MCPInstrumentor, capture_content=False)


def parent_tool_span(span: ReadableSpan, exporter: InMemorySpanExporter) -> ReadableSpan:
    """The nearest ancestor of ``span`` that is one of our tool spans, skipping mcp's own spans."""
    by_id = {s.context.span_id: s for s in exporter.get_finished_spans()}
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        found = by_id[parent.span_id]
        if found.name.startswith("execute_tool"):
            return found
        parent = found.parent
    raise AssertionError(f"no tool span above {span.name}: {sorted(s.name for s in by_id.values())}")


def make_server() -> MCPServer:
    server = MCPServer("tools")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def broken(reason: str) -> str:
        """A tool that fails inside (the server answers isError)."""
        raise ValueError(reason)

    @server.tool()
    def strict(value: str) -> str:
        """A tool that answers a JSON-RPC error."""
        raise MCPError(code=INVALID_PARAMS, message=f"bad value {value}")

    return server


def tool_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]


def by_kind(spans: list[ReadableSpan], kind: SpanKind) -> ReadableSpan:
    found = [s for s in spans if s.kind is kind]
    assert len(found) == 1, [(s.name, s.kind) for s in spans]
    return found[0]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_client_span_is_parent_of_server_span_in_one_trace(exporter, mode):
    async with Client(make_server(), mode=mode) as client:
        result = await client.call_tool("add", {"a": 2, "b": 3})
    assert result.is_error is False
    spans = tool_spans(exporter)
    assert len(spans) == 2
    client_span = by_kind(spans, SpanKind.CLIENT)
    server_span = by_kind(spans, SpanKind.SERVER)
    assert client_span.name == server_span.name == "execute_tool add"
    assert server_span.context.trace_id == client_span.context.trace_id
    assert server_span.parent is not None
    assert server_span.parent.is_remote is True
    assert parent_tool_span(server_span, exporter) is client_span
    for span in (client_span, server_span):
        attributes = dict(span.attributes or {})
        assert attributes[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
        assert attributes[semconv.GEN_AI_TOOL_NAME] == "add"
        assert attributes[semconv.MCP_METHOD_NAME] == "tools/call"
        assert attributes[semconv.TOOL_OUTCOME] == "succeeded"
        assert semconv.ERROR_TYPE not in attributes
        assert semconv.GEN_AI_TOOL_CALL_ARGUMENTS not in attributes  # content is opt-in
        assert span.status.status_code is StatusCode.UNSET
    assert isinstance(dict(server_span.attributes or {})[semconv.MCP_PROTOCOL_VERSION], str)
    assert dict(server_span.attributes or {})[semconv.JSONRPC_REQUEST_ID].isdigit()  # type: ignore[union-attr]


async def test_trace_context_travels_in_params_meta_without_touching_the_callers_meta(exporter):
    seen: list[dict[str, object]] = []
    server = MCPServer("meta")

    @server.tool()
    def echo_meta(text: str) -> str:
        """Echo."""
        return text

    original = server._lowlevel_server.middleware

    class Recorder:
        async def __call__(self, ctx, call_next):
            if ctx.method == "tools/call":
                seen.append(dict(ctx.params.get("_meta") or {}))
            return await call_next(ctx)

    server._lowlevel_server.middleware = [Recorder(), *original]
    caller_meta = {"example.com/tenant": "t1"}
    async with Client(server) as client:
        await client.call_tool("echo_meta", {"text": "hi"}, meta=caller_meta)  # type: ignore[arg-type]
    assert caller_meta == {"example.com/tenant": "t1"}
    client_span = by_kind(tool_spans(exporter), SpanKind.CLIENT)
    assert len(seen) == 1
    assert seen[0]["example.com/tenant"] == "t1"
    trace_id = format(client_span.context.trace_id, "032x")
    assert str(seen[0]["traceparent"]).split("-")[1] == trace_id


async def test_is_error_result_marks_both_spans_failed_with_tool_error(exporter):
    async with Client(make_server()) as client:
        result = await client.call_tool("broken", {"reason": "disk full"})
    assert result.is_error is True
    spans = tool_spans(exporter)
    assert len(spans) == 2
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes[semconv.TOOL_OUTCOME] == "failed"
        assert attributes[semconv.ERROR_TYPE] == "tool_error"
        assert span.status.status_code is StatusCode.ERROR


async def test_json_rpc_error_passes_through_unchanged_and_fails_the_spans(exporter):
    async with Client(make_server()) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("strict", {"value": "x"})
    assert raised.value.code == INVALID_PARAMS
    assert raised.value.message == "bad value x"
    spans = tool_spans(exporter)
    assert len(spans) == 2
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes[semconv.TOOL_OUTCOME] == "failed"
        assert attributes[semconv.ERROR_TYPE] == str(INVALID_PARAMS)


async def test_capture_content_exports_arguments_and_result(tracer_provider):
    memory = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = MCPInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, capture_content=True)
    try:
        async with Client(make_server()) as client:
            await client.call_tool("add", {"a": 20, "b": 22})
    finally:
        instrumentor.uninstrument()
    client_span = by_kind(tool_spans(memory), SpanKind.CLIENT)
    attributes = dict(client_span.attributes or {})
    assert json.loads(str(attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])) == {"a": 20, "b": 22}
    assert json.loads(str(attributes[semconv.GEN_AI_TOOL_CALL_RESULT])) == {"result": 42}


async def test_tool_content_reaches_the_content_buffer_when_consumed(exporter):
    buffer = content_buffer()
    buffer.add_consumer()
    try:
        async with Client(make_server()) as client:
            await client.call_tool("add", {"a": 1, "b": 1})
        client_span = by_kind(tool_spans(exporter), SpanKind.CLIENT)
        content = buffer.pop(client_span.context.span_id)
    finally:
        buffer.remove_consumer()
    assert content == ToolContent(arguments={"a": 1, "b": 1}, result={"result": 2})


async def test_client_span_nests_under_the_callers_span(exporter, tracer_provider):
    tracer = tracer_provider.get_tracer("app")
    async with Client(make_server()) as client:
        with tracer.start_as_current_span("agent step") as outer:
            await client.call_tool("add", {"a": 1, "b": 2})
    client_span = by_kind(tool_spans(exporter), SpanKind.CLIENT)
    assert client_span.parent is not None
    assert client_span.parent.span_id == outer.get_span_context().span_id
    assert trace.get_current_span().get_span_context().is_valid is False  # nothing left attached


async def test_suppress_instrumentation_emits_no_span(exporter):
    async with Client(make_server()) as client:
        with suppress_instrumentation():
            result = await client.call_tool("add", {"a": 1, "b": 2})
    assert result.is_error is False
    assert tool_spans(exporter) == []


async def test_uninstrument_stops_spans_even_on_an_open_connection(tracer_provider):
    memory = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = MCPInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    async with Client(make_server(), mode="legacy") as client:
        await client.call_tool("add", {"a": 1, "b": 2})
        assert len(tool_spans(memory)) == 2
        instrumentor.uninstrument()
        result = await client.call_tool("add", {"a": 1, "b": 2})
    assert result.is_error is False
    assert len(tool_spans(memory)) == 2
    from mcp.client.session import ClientSession
    from mcp.server.runner import ServerRunner

    assert not hasattr(ClientSession.call_tool, "__wrapped__")
    assert not hasattr(ServerRunner._on_request, "__wrapped__")


async def test_inside_a_framework_tool_span_the_client_enriches_it_instead_of_adding_a_span(
    exporter, tracer_provider
):
    tracer = tracer_provider.get_tracer("agent framework")
    tool_attributes = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: "mcp_broken",
    }
    async with Client(make_server()) as client:
        with tracer.start_as_current_span("execute_tool mcp_broken", attributes=tool_attributes) as outer:
            result = await client.call_tool("broken", {"reason": "quota"})
    assert result.is_error is True
    spans = tool_spans(exporter)
    assert sorted((s.name, s.kind) for s in spans) == [
        ("execute_tool broken", SpanKind.SERVER),
        ("execute_tool mcp_broken", SpanKind.INTERNAL),
    ]
    server_span = by_kind(spans, SpanKind.SERVER)
    assert server_span.parent is not None
    assert server_span.parent.span_id == outer.get_span_context().span_id
    framework_span = by_kind(spans, SpanKind.INTERNAL)
    attributes = dict(framework_span.attributes or {})
    assert attributes[semconv.GEN_AI_TOOL_NAME] == "mcp_broken"
    assert attributes[semconv.MCP_METHOD_NAME] == "tools/call"
    assert attributes[semconv.TOOL_OUTCOME] == "failed"
    assert attributes[semconv.ERROR_TYPE] == "tool_error"


async def test_server_side_tool_span_opens_no_books_of_its_own(make_instrumented, span_exporter):
    instrumentation = make_instrumented().instrumentation
    async with Client(make_server()) as client:
        with tallyspan.run("agent"):
            await client.call_tool("add", {"a": 1, "b": 2})
    instrumentation.force_flush()
    spans = tool_spans(span_exporter)
    server_span = by_kind(spans, SpanKind.SERVER)
    assert semconv.LEDGER_DISCREPANCY_TYPES not in dict(server_span.attributes or {})
    assert semconv.LEDGER_OBSERVED_COUNT not in dict(server_span.attributes or {})
    (run_span,) = [s for s in span_exporter.get_finished_spans() if s.name == "invoke_agent agent"]
    run_attributes = dict(run_span.attributes or {})
    # The client span is the one observed call; the server's view of it is not counted again.
    assert run_attributes[semconv.LEDGER_OBSERVED_COUNT] == 1
    assert run_attributes[semconv.LEDGER_CLAIMED_COUNT] == 0


def test_instrument_does_not_import_mcp_and_patches_when_the_app_does():
    code = (
        "import sys\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from tallyspan_instrumentors.mcp import MCPInstrumentor\n"
        "instrumentor = MCPInstrumentor()\n"
        "instrumentor.instrument(tracer_provider=TracerProvider())\n"
        "assert 'mcp' not in sys.modules\n"
        "from mcp.client.session import ClientSession\n"
        "from mcp.server.runner import ServerRunner\n"
        "assert hasattr(ClientSession.call_tool, '__wrapped__')\n"
        "assert hasattr(ServerRunner._on_request, '__wrapped__')\n"
        "instrumentor.uninstrument()\n"
        "assert not hasattr(ClientSession.call_tool, '__wrapped__')\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
