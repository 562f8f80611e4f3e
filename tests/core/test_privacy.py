"""Private by default, proven end to end: every instrumented library, every sink, real calls.

Each case drives a real client against a local server with marker strings planted in the prompt, the
system message, the model's answer and reasoning, tool-call arguments, the tool's result, the agent's
ledger summary and claimed outcome, an error body that echoes the prompt, and in the secrets: the API
key, an extra auth header and a ``user:password@`` base URL. Then everything that leaves the process is
serialised (every span as exported, the OTLP traces and ledger log records a real receiver decoded, what
a user's ledger sink got, every row of every table of the SQLite store, tallyspan's own log records),
and searched for the markers:

* capture off: no marker at all, but for the identifiers the agent claimed (a tool name and a call id),
  which the local store's ledger tables keep: the store is the user's own disk (SECURITY.md);
* capture on (the environment variable or ``capture_content=True``): the content markers each case
  plants are there (so the search can fail), the secrets still are not.
"""

from __future__ import annotations

import base64
import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.conftest import MakeInstrumented
from tests.recording import RecordingLedgerSink

import tallyspan
from tallyspan import semconv
from tallyspan.testing import (
    AnthropicReply,
    AnthropicServer,
    OllamaReply,
    OllamaServer,
    OpenAICompatibleServer,
    ScriptedReply,
    ScriptedToolCall,
)

# --- the markers -------------------------------------------------------------------------------------------

PROMPT = "PRVprompt4Q1"
SYSTEM = "PRVsystem8Z2"
ANSWER = "PRVanswer3K7"
REASONING = "PRVreason5J9"
TOOL_ARGUMENT = "PRVtoolarg6H4"
TOOL_RESULT = "PRVresult2M8"
SUMMARY = "PRVsummary9D3"
CLAIMED_OUTCOME = "PRVoutcome7F1"
#: The agent's own words in its log: a tool it names and a call id it gives that match nothing observed.
CLAIMED_TOOL = "PRVclaimtool5R3"
CLAIM_CALL_ID = "PRVcallid8S2"
ERROR_BODY = "PRVerrbody1W6"

API_KEY = "sk-PRVSECRETkey0T5-0123456789abcdef"
HEADER_SECRET = "PRVSECRETheader4N8"
PASSWORD = "PRVSECRETpass7B2"
USERNAME = "PRVSECRETuser3C9"
#: The backend's key the user gives the OTLP exporters; it goes to the backend in a header, nowhere else.
OTLP_HEADER_SECRET = "PRVSECRETotlp6V1"
BASIC_AUTH = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()

CONTENT_MARKERS = {
    "prompt": PROMPT,
    "system": SYSTEM,
    "answer": ANSWER,
    "reasoning": REASONING,
    "tool_argument": TOOL_ARGUMENT,
    "tool_result": TOOL_RESULT,
    "summary": SUMMARY,
    "claimed_outcome": CLAIMED_OUTCOME,
    "claimed_tool": CLAIMED_TOOL,
    "claim_call_id": CLAIM_CALL_ID,
    "error_body": ERROR_BODY,
}
#: Identifiers the agent claims: with capture off they stay on the user's disk (the store) only.
LOCAL_IDENTIFIERS = ("claimed_tool", "claim_call_id")
SECRET_MARKERS = {
    "api_key": "PRVSECRETkey0T5",
    "header": HEADER_SECRET,
    "password": PASSWORD,
    "username": USERNAME,
    "basic_auth": BASIC_AUTH,
    "otlp_header": OTLP_HEADER_SECRET,
}

STAGE = "weekly_report"
#: Fires many violation types on the answer below; every detail must stay free of the model's words.
CONTRACTS: dict[str, Any] = {
    "contracts": {
        STAGE: {
            "language": "ja",
            "min_chars": 400,
            "required": [r"^判定[:：]"],
            "forbidden": [{"name": "template token", "pattern": r"<\|im_end\|>"}],
            "allow_refusal": False,
            "allow_reasoning": False,
            "claims": {"allowed": []},
        },
        "json_report": {
            "json_schema": {
                "type": "object",
                "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}},
                "required": ["verdict"],
                "additionalProperties": False,
            },
        },
    },
}
#: An answer breaking the weekly_report contract in many ways, quoting the answer marker throughout.
VIOLATING_ANSWER = (
    f"<think>{ANSWER} first</think>I'm sorry, but I can't help with that. {ANSWER} is trusted by 500 "
    f"customers and cut costs by 40%. {ANSWER}<|im_end|>"
)
JSON_ANSWER = json.dumps({"verdict": ANSWER, ANSWER: ANSWER})


def _error_message() -> str:
    """What a provider's 400 says: it echoes the prompt and the (full) key it was sent."""
    return f"Invalid request {ERROR_BODY}: prompt {PROMPT!r} rejected for key {API_KEY}"


def _log_call(call_id: str, outcome: str, log_id: str) -> ScriptedToolCall:
    arguments = {"call_id": call_id, "tool_name": "lookup", "claimed_outcome": outcome, "summary": SUMMARY}
    return ScriptedToolCall("log_action", arguments, call_id=log_id)


#: The tool-calling turn: a real call whose arguments carry a marker, its log, a log whose claimed
#: outcome is the model's own words (malformed: the reconciliation must not quote them), and a log of a
#: call never made, in the agent's words (phantom: neither the tool nor the id may be quoted).
TOOL_TURN_CALLS = [
    ScriptedToolCall("lookup", {"query": TOOL_ARGUMENT}, call_id="c1"),
    _log_call("c1", "succeeded", "L1"),
    _log_call("c1", f"done {CLAIMED_OUTCOME}", "L2"),
    ScriptedToolCall(
        "log_action",
        {"call_id": CLAIM_CALL_ID, "tool_name": CLAIMED_TOOL, "claimed_outcome": "succeeded"},
        call_id="L3",
    ),
]
#: For frameworks that run the tools: a tool that fails with a message echoing its argument.
FAILING_CALL = ScriptedToolCall("broken", {"query": TOOL_ARGUMENT}, call_id="c3")


# --- what leaves the process ---------------------------------------------------------------------------


@dataclass
class Outgoing:
    """Everything that left the process, one text per item, labelled by where it went."""

    items: list[tuple[str, str]]

    def where(self, marker: str) -> list[str]:
        """Each item holding the marker, as its label and the text around the first occurrence."""
        found = []
        for label, text in self.items:
            at = text.find(marker)
            if at >= 0:
                found.append(f"{label}: ...{text[max(0, at - 160) : at + len(marker) + 40]!r}")
        return found

    def text(self) -> str:
        return "\n".join(text for _, text in self.items)


def _store_rows(db_path: Path) -> list[tuple[str, str]]:
    if not db_path.exists():
        return []
    db = sqlite3.connect(db_path)
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [
            (f"store {table}", repr(row))
            for table in tables
            for row in db.execute(f'SELECT * FROM "{table}"')
        ]
    finally:
        db.close()


def _own_log_records(records: Sequence[logging.LogRecord]) -> list[tuple[str, str]]:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return [
        (f"log {record.name}", formatter.format(record))
        for record in records
        if record.name.startswith("tallyspan")
    ]


# --- the cases: one real call sequence per library -------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[], Any]
    """Makes the calls (sync, or a coroutine function)."""
    captured: frozenset[str]
    """Content markers that must be exported when capture is on."""
    model_spans: int
    """How many checked model spans (``chat``) it makes, at least."""
    ledger: bool = True
    """Whether it runs an agent, so that ledger records go to the OTLP logs, the sinks and the store."""


def _openai_clients(server: OpenAICompatibleServer) -> dict[str, Any]:
    return {
        "base_url": server.base_url.replace("http://", f"http://{USERNAME}:{PASSWORD}@"),
        "api_key": API_KEY,
        "max_retries": 0,
        "default_headers": {"x-api-key": HEADER_SECRET},
    }


def _error_reply() -> ScriptedReply:
    body = {
        "error": {"message": _error_message(), "type": "invalid_request_error", "param": None, "code": None}
    }
    return ScriptedReply(status=400, raw_body=json.dumps(body))


CHAT_MESSAGES: list[Any] = [
    {"role": "system", "content": f"Be brief. {SYSTEM}"},
    {"role": "user", "content": f"Report on {PROMPT}."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c0",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"query": TOOL_ARGUMENT})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "content": f"found {TOOL_RESULT}"},
]
ALL_MODEL_CONTENT = frozenset(
    {
        "prompt",
        "system",
        "answer",
        "reasoning",
        "tool_argument",
        "tool_result",
        "summary",
        "claimed_tool",
        "claim_call_id",
    }
)


def run_openai_chat() -> None:
    import openai

    replies = [
        ScriptedReply(tool_calls=TOOL_TURN_CALLS, reasoning=REASONING),
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        _error_reply(),
    ]
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(**_openai_clients(server)) as client,
        tallyspan.run("privacy_agent"),
        tallyspan.stage(STAGE),
    ):
        client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES)
        client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES)
        stream = client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES, stream=True)
        assert ANSWER in "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES)
        # httpx turns the URL's user:password into Basic auth, which then replaces the Bearer key.
        assert server.requests[0].headers["authorization"] == f"Basic {BASIC_AUTH}"
        assert server.requests[0].headers["x-api-key"] == HEADER_SECRET


RESPONSES_INPUT: list[Any] = [
    {"role": "user", "content": f"Report on {PROMPT}."},
    {
        "type": "function_call",
        "call_id": "c0",
        "name": "lookup",
        "arguments": json.dumps({"query": TOOL_ARGUMENT}),
    },
    {"type": "function_call_output", "call_id": "c0", "output": f"found {TOOL_RESULT}"},
]


def run_openai_responses() -> None:
    import openai

    replies = [
        ScriptedReply(tool_calls=TOOL_TURN_CALLS, reasoning=REASONING),
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        _error_reply(),
    ]
    instructions = f"Be brief. {SYSTEM}"
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(**_openai_clients(server)) as client,
        tallyspan.run("privacy_agent"),
        tallyspan.stage(STAGE),
    ):
        client.responses.create(model="gpt-4o", instructions=instructions, input=RESPONSES_INPUT)
        client.responses.create(model="gpt-4o", instructions=instructions, input=RESPONSES_INPUT)
        stream = client.responses.create(
            model="gpt-4o", instructions=instructions, input=RESPONSES_INPUT, stream=True
        )
        for _ in stream:
            pass
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="gpt-4o", instructions=instructions, input=RESPONSES_INPUT)


def run_openai_embeddings() -> None:
    import openai

    with (
        OpenAICompatibleServer(replies=[ScriptedReply(), _error_reply()]) as server,
        openai.OpenAI(**_openai_clients(server)) as client,
    ):
        client.embeddings.create(model="text-embedding-3-small", input=[f"Embed {PROMPT}"])
        with pytest.raises(openai.BadRequestError):
            client.embeddings.create(model="text-embedding-3-small", input=[f"Embed {PROMPT}"])


def run_anthropic() -> None:
    import anthropic

    replies: list[ScriptedReply] = [
        AnthropicReply(tool_calls=TOOL_TURN_CALLS, reasoning=REASONING),
        AnthropicReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        AnthropicReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        AnthropicReply(
            status=400,
            raw_body=json.dumps(
                {"type": "error", "error": {"type": "invalid_request_error", "message": _error_message()}}
            ),
        ),
    ]
    messages: list[Any] = [
        {"role": "user", "content": f"Report on {PROMPT}."},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c0", "name": "lookup", "input": {"query": TOOL_ARGUMENT}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c0", "content": f"found {TOOL_RESULT}"}],
        },
    ]
    request: dict[str, Any] = {
        "model": "claude-test-4",
        "max_tokens": 200,
        "system": f"Be brief. {SYSTEM}",
        "messages": messages,
    }
    with AnthropicServer(replies=replies) as server:
        base_url = server.base_url.replace("http://", f"http://{USERNAME}:{PASSWORD}@")
        with (
            anthropic.Anthropic(
                base_url=base_url,
                api_key=API_KEY,
                max_retries=0,
                default_headers={"Authorization": f"Bearer {HEADER_SECRET}"},
            ) as client,
            tallyspan.run("privacy_agent"),
            tallyspan.stage(STAGE),
        ):
            client.messages.create(**request)
            client.messages.create(**request)
            for _ in client.messages.create(**request, stream=True):
                pass
            with pytest.raises(anthropic.BadRequestError):
                client.messages.create(**request)
        print(server.requests[0].headers)


def run_ollama() -> None:
    import ollama

    replies: list[ScriptedReply] = [
        OllamaReply(tool_calls=TOOL_TURN_CALLS, reasoning=REASONING),
        OllamaReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        OllamaReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        OllamaReply(status=400, raw_body=json.dumps({"error": _error_message()})),
        OllamaReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        OllamaReply(status=400, raw_body=json.dumps({"error": _error_message()})),
    ]
    messages: list[Any] = [
        {"role": "system", "content": f"Be brief. {SYSTEM}"},
        {"role": "user", "content": f"Report on {PROMPT}."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "lookup", "arguments": {"query": TOOL_ARGUMENT}}}],
        },
        {"role": "tool", "content": f"found {TOOL_RESULT}"},
    ]
    with OllamaServer(replies=replies) as server:
        host = server.base_url.replace("http://", f"http://{USERNAME}:{PASSWORD}@")
        with (
            ollama.Client(
                host=host, headers={"Authorization": f"Bearer {API_KEY}", "x-api-key": HEADER_SECRET}
            ) as client,
            tallyspan.run("privacy_agent"),
            tallyspan.stage(STAGE),
        ):
            client.chat(model="llama3.2", messages=messages, stream=False)
            client.chat(model="llama3.2", messages=messages, stream=False)
            for _ in client.chat(model="llama3.2", messages=messages, stream=True):
                pass
            with pytest.raises(ollama.ResponseError):
                client.chat(model="llama3.2", messages=messages, stream=False)
            generate: dict[str, Any] = {
                "model": "llama3.2",
                "prompt": f"Report on {PROMPT}.",
                "system": f"Be brief. {SYSTEM}",
                "stream": False,
            }
            client.generate(**generate)
            with pytest.raises(ollama.ResponseError):
                client.generate(**generate)


def run_langchain() -> None:
    import openai
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import ToolException, tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from pydantic import SecretStr

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {TOOL_RESULT} for {query}"

    @tool
    def log_action(call_id: str, tool_name: str, claimed_outcome: str, summary: str) -> str:
        """Log one of your own actions."""
        return "logged"

    @tool
    def broken(query: str) -> str:
        """Fails; the ToolNode hands the message (which echoes the argument) back to the model."""
        raise ToolException(f"{ERROR_BODY}: cannot look up {query}")

    tools = [lookup, log_action, broken]
    replies = [
        ScriptedReply(tool_calls=[*TOOL_TURN_CALLS, FAILING_CALL], reasoning=REASONING),
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        _error_reply(),
    ]
    with OpenAICompatibleServer(replies=replies) as server:
        settings = _openai_clients(server)
        model = ChatOpenAI(
            model="gpt-4o-mini",
            base_url=settings["base_url"],
            api_key=SecretStr(API_KEY),
            max_retries=0,
            default_headers=settings["default_headers"],
        )
        bound = model.bind_tools(tools)

        def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
            return {"messages": [bound.invoke(state["messages"])]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", RunnableLambda(call_model))
        builder.add_node("tools", ToolNode(tools, handle_tool_errors=True))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition, ["tools", END])
        builder.add_edge("tools", "agent")
        graph = builder.compile(name="privacy_graph")
        inputs: Any = {"messages": [("system", f"Be brief. {SYSTEM}"), ("user", f"Report on {PROMPT}.")]}
        with tallyspan.stage(STAGE):
            graph.invoke(inputs)
            with pytest.raises(openai.BadRequestError):
                graph.invoke(inputs)


def run_mcp() -> Any:
    from mcp import Client
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.exceptions import MCPError

    server = MCPServer("tools")

    @server.tool()
    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {TOOL_RESULT} for {query}"

    @server.tool()
    def broken(query: str) -> str:
        """Fails inside: the server answers isError with the message."""
        raise ValueError(f"{ERROR_BODY}: cannot look up {query}")

    @server.tool()
    def strict(query: str) -> str:
        """Answers a JSON-RPC error that echoes the argument."""
        raise MCPError(code=-32602, message=f"{ERROR_BODY}: bad query {query}")

    async def calls() -> None:
        async with Client(server) as client:
            with tallyspan.run("privacy_agent"):
                await client.call_tool("lookup", {"query": TOOL_ARGUMENT})
                assert (await client.call_tool("broken", {"query": TOOL_ARGUMENT})).is_error
                with pytest.raises(MCPError):
                    await client.call_tool("strict", {"query": TOOL_ARGUMENT})

    return calls()


def run_openai_agents() -> Any:
    import openai
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool

    @function_tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"found {TOOL_RESULT} for {query}"

    @function_tool
    def log_action(call_id: str, tool_name: str, claimed_outcome: str, summary: str) -> str:
        """Log one of your own actions."""
        return "logged"

    @function_tool
    def broken(query: str) -> str:
        """Fails; the SDK hands the message (which echoes the argument) back to the model."""
        raise ValueError(f"{ERROR_BODY}: cannot look up {query}")

    replies = [
        ScriptedReply(tool_calls=[*TOOL_TURN_CALLS, FAILING_CALL], reasoning=REASONING),
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        _error_reply(),
        # the same agent on the Responses model
        ScriptedReply(tool_calls=[*TOOL_TURN_CALLS, FAILING_CALL], reasoning=REASONING),
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
    ]

    async def calls() -> None:
        with OpenAICompatibleServer(replies=replies) as server:
            client = openai.AsyncOpenAI(**_openai_clients(server))
            try:
                agent = Agent(
                    name="privacy_agent",
                    instructions=f"Be brief. {SYSTEM}",
                    tools=[lookup, log_action, broken],
                    model=OpenAIChatCompletionsModel(model="m1", openai_client=client),
                )
                with tallyspan.stage(STAGE):
                    result = await Runner.run(agent, f"Report on {PROMPT}.")
                    assert ANSWER in result.final_output
                    with pytest.raises(openai.BadRequestError):
                        await Runner.run(agent, f"Report on {PROMPT}.")
                    on_responses = agent.clone(model=OpenAIResponsesModel(model="m1", openai_client=client))
                    result = await Runner.run(on_responses, f"Report on {PROMPT}.")
                    assert ANSWER in result.final_output
            finally:
                await client.close()

    return calls()


def run_tallyspan_tool() -> None:
    @tallyspan.tool
    def lookup(query: str, tool_call_id: str) -> str:
        return f"found {TOOL_RESULT} for {query}"

    @tallyspan.tool
    def broken(query: str, tool_call_id: str) -> str:
        raise ValueError(f"{ERROR_BODY}: cannot look up {query}")

    with tallyspan.run("privacy_agent"):
        lookup(TOOL_ARGUMENT, tool_call_id="c1")
        with pytest.raises(ValueError, match=ERROR_BODY):
            broken(TOOL_ARGUMENT, tool_call_id="c2")
        tallyspan.ledger.claim("c1", "lookup", "succeeded", summary=SUMMARY)
        tallyspan.ledger.claim("c2", "broken", f"done {CLAIMED_OUTCOME}", summary=SUMMARY)
        tallyspan.ledger.claim(CLAIM_CALL_ID, CLAIMED_TOOL, "succeeded")
    with pytest.raises(ValueError, match=ERROR_BODY), tallyspan.run("failing_agent"):
        raise ValueError(f"{ERROR_BODY}: the agent gave up on {PROMPT}")


CASES = [
    Case("openai_chat", run_openai_chat, ALL_MODEL_CONTENT, 2),
    Case("openai_responses", run_openai_responses, ALL_MODEL_CONTENT, 2),
    # Embeddings inputs are never exported (the conventions define no attribute for them).
    Case("openai_embeddings", run_openai_embeddings, frozenset(), 0, ledger=False),
    Case("anthropic", run_anthropic, ALL_MODEL_CONTENT, 2),
    Case("ollama", run_ollama, ALL_MODEL_CONTENT, 3),
    # langchain-openai drops the provider's reasoning_content: there is no reasoning to capture.
    Case("langchain", run_langchain, ALL_MODEL_CONTENT - {"reasoning"}, 1),
    Case("mcp", run_mcp, frozenset({"tool_argument", "tool_result"}), 0),
    Case("openai_agents", run_openai_agents, ALL_MODEL_CONTENT, 2),
    Case(
        "tallyspan_tool",
        run_tallyspan_tool,
        frozenset({"tool_argument", "tool_result", "summary", "claimed_tool", "claim_call_id"}),
        0,
    ),
]


# --- the harness -----------------------------------------------------------------------------------------


def _run_case(
    case: Case,
    capture: str,
    *,
    tracer_provider: TracerProvider,
    db_path: Path,
    otlp_receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> Outgoing:
    """Instrument everything with every sink, run the case, flush, and collect all that left."""
    import asyncio

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer {OTLP_HEADER_SECRET}")
    if capture == "env":
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    caplog.set_level(logging.DEBUG)
    exported = InMemorySpanExporter()
    sink = RecordingLedgerSink()
    instrumentation = tallyspan.instrument(
        contracts=CONTRACTS,
        tracer_provider=tracer_provider,
        store=db_path,
        capture_content=True if capture == "argument" else None,
        evaluation_events=True,
        span_processors=[SimpleSpanProcessor(exported)],
        ledger_sinks=[sink],
    )
    try:
        outcome = case.run()
        if asyncio.iscoroutine(outcome):
            asyncio.run(outcome)
        assert instrumentation.force_flush(30_000)
    finally:
        tallyspan.uninstrument()
    spans = exported.get_finished_spans()
    assert spans, "the case made no span"
    checked = [span for span in spans if (span.attributes or {}).get(semconv.VIOLATION_TYPES)]
    assert len(checked) >= case.model_spans, [span.name for span in spans]
    with otlp_receiver.lock:
        otlp_spans = list(otlp_receiver.spans)
        otlp_logs = list(otlp_receiver.log_records)
    assert len(otlp_spans) == len(spans)
    assert bool(otlp_logs) is bool(sink.records) is case.ledger
    items: list[tuple[str, str]] = [(f"span {span.name}", span.to_json()) for span in spans]
    items += [(f"otlp span {span.name}", str(span)) for span in otlp_spans]
    items += [("otlp ledger log", str(record)) for record in otlp_logs]
    items += [("ledger sink entry", repr(entry)) for entry in sink.entries]
    items += [("ledger sink record", repr(record)) for record in sink.records]
    items += _store_rows(db_path)
    items += _own_log_records(caplog.records)
    return Outgoing(items)


def _assert_absent(outgoing: Outgoing, markers: dict[str, str]) -> None:
    leaks = [f"{name} in {where}" for name, marker in markers.items() for where in outgoing.where(marker)]
    if leaks:
        pytest.fail(f"{len(leaks)} leak(s):\n" + "\n".join(leaks), pytrace=False)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
@pytest.mark.parametrize("capture", ["off", "env", "argument"])
def test_nothing_private_leaves_unless_asked_and_secrets_never(
    case: Case,
    capture: str,
    request: pytest.FixtureRequest,
    tracer_provider: TracerProvider,
    db_path: Path,
    otlp_receiver: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if case.name == "openai_agents":
        request.getfixturevalue("agents_export")
    outgoing = _run_case(
        case,
        capture,
        tracer_provider=tracer_provider,
        db_path=db_path,
        otlp_receiver=otlp_receiver,
        monkeypatch=monkeypatch,
        caplog=caplog,
    )
    _assert_absent(outgoing, SECRET_MARKERS)
    if capture == "off":
        identifiers = {name: CONTENT_MARKERS[name] for name in LOCAL_IDENTIFIERS}
        _assert_absent(outgoing, {k: v for k, v in CONTENT_MARKERS.items() if k not in identifiers})
        # The claimed identifiers are on the user's disk, in the store's ledger tables, and nowhere else.
        places = {
            name: sorted({where.split(":")[0] for where in outgoing.where(marker)})
            for name, marker in identifiers.items()
        }
        expected = ["store ledger_entries", "store ledger_reconciliations"]
        assert places == {name: expected if name in case.captured else [] for name in identifiers}
    else:
        text = outgoing.text()
        missing = sorted(name for name in case.captured if CONTENT_MARKERS[name] not in text)
        assert missing == []


def test_violation_details_and_status_never_quote_the_model_even_when_content_is_captured(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, make_instrumented: MakeInstrumented
) -> None:
    """The answer's words may be in gen_ai.output.messages when captured; never in what the checks write."""
    import openai

    made = make_instrumented(contracts=CONTRACTS, capture_content=True, evaluation_events=True)
    instrumentation, exported = made.instrumentation, made.spans
    long_reasoning = f"{REASONING} the weekly report needs the figures first, then the verdict."
    replies = [
        ScriptedReply(text=VIOLATING_ANSWER, reasoning=REASONING),
        ScriptedReply(text=f"{long_reasoning} {ANSWER}", reasoning=long_reasoning),
        ScriptedReply(text=JSON_ANSWER),
    ]
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as client,
    ):
        with tallyspan.stage(STAGE):
            client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES)
            client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES)
        with tallyspan.stage("json_report"):
            client.chat.completions.create(model="gpt-4o", messages=CHAT_MESSAGES)
    assert instrumentation.force_flush(30_000)
    tallyspan.uninstrument()
    spans = [span for span in exported.get_finished_spans() if span.name.startswith("chat ")]
    assert len(spans) == 3
    assert all(ANSWER in str((span.attributes or {})[semconv.GEN_AI_OUTPUT_MESSAGES]) for span in spans)
    fired = [tuple((span.attributes or {})[semconv.VIOLATION_TYPES]) for span in spans]  # type: ignore[arg-type]
    assert fired == [
        (
            "forbidden_present",
            "missing_required",
            "not_japanese",
            "reasoning_leaked",
            "refusal",
            "too_short",
            "unearned_claim",
        ),
        ("missing_required", "not_japanese", "reasoning_leaked", "too_short"),
        ("missing_required",),
    ]
    written = [span.status.description or "" for span in spans]
    for span in spans:
        for event in span.events:
            written += [str(value) for value in (event.attributes or {}).values()]
    db = sqlite3.connect(db_path)
    try:
        written += [row[0] for row in db.execute("SELECT detail FROM violations")]
        written += [row[0] or "" for row in db.execute("SELECT status_description FROM spans")]
    finally:
        db.close()
    assert len(written) > 20
    quoted = [text for text in written for marker in (ANSWER, REASONING, PROMPT) if marker in text]
    assert quoted == []
