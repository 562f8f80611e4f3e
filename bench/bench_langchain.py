"""Per-call overhead of the LangChain / LangGraph instrumentation, against the same uninstrumented call.

Runs ``langchain_openai.ChatOpenAI`` against the local ``tallyspan.testing`` server, alone and inside a
LangGraph graph with a ToolNode (two model calls and one tool per run), alternating blocks of
uninstrumented and instrumented runs in one process (so machine drift hits both sides alike), and reports
medians, the added time per call and the ratio. The instrumented side has the OpenAI instrumentor on too,
as ``tallyspan.instrument()`` would: the provider span is skipped, so this is the cost of one span per
model call, not two.

Usage::

    python bench/bench_langchain.py                # defaults: 600 runs per case
    python bench/bench_langchain.py --calls 200 --rounds 4
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan.testing import OpenAICompatibleServer, RecordedRequest, ScriptedReply, ScriptedToolCall
from tallyspan_instrumentors.langchain import LangChainInstrumentor
from tallyspan_instrumentors.openai import OpenAIInstrumentor

ANSWER = "判定: 合格。今週の作業はすべて期限内に完了しました。" * 4


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


def _reply(request: RecordedRequest) -> ScriptedReply:
    """A tool call when the last message is the user's, else the answer: one tool round per graph run."""
    last = request.body.get("messages", [{}])[-1]
    if request.body.get("tools") and last.get("role") == "user":
        return ScriptedReply(tool_calls=[ScriptedToolCall("get_weather", {"city": "Tokyo"}, call_id="c1")])
    return ScriptedReply(text=ANSWER)


class _Instrumentors(AbstractContextManager[None]):
    """The LangChain and OpenAI instrumentors, on an SDK provider with no processors."""

    def __enter__(self) -> None:
        provider = TracerProvider()
        LangChainInstrumentor().instrument(tracer_provider=provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider)

    def __exit__(self, *exc: object) -> None:
        OpenAIInstrumentor().uninstrument()
        LangChainInstrumentor().uninstrument()


class _FullChain(AbstractContextManager[None]):
    """``tallyspan.instrument()`` with its whole processor chain (no contracts, no store)."""

    def __enter__(self) -> None:
        self._instrumentation = tallyspan.instrument(
            tracer_provider=TracerProvider(),
            store=None,
            instrumentors=["tallyspan_langchain", "tallyspan_openai"],
        )

    def __exit__(self, *exc: object) -> None:
        self._instrumentation.force_flush()
        tallyspan.uninstrument()


def _time_calls(call: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


def _measure(
    call: Callable[[], object], setup: type[AbstractContextManager[None]], calls: int, rounds: int
) -> tuple[float, float]:
    """Median ms of the plain call and of the instrumented call, interleaved in ``rounds`` blocks."""
    plain: list[float] = []
    traced: list[float] = []
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        plain += _time_calls(call, per_round)
        with setup():
            traced += _time_calls(call, per_round)
    return statistics.median(plain), statistics.median(traced)


def _graph(model: ChatOpenAI) -> Any:
    bound = model.bind_tools([get_weather])

    def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [bound.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(name="bench_agent")


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=600, help="runs per case and side (default 600)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks per case (default 5)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    rows: list[tuple[str, float, float]] = []
    with OpenAICompatibleServer(handler=_reply) as server:
        model = ChatOpenAI(model="bench-model", base_url=server.base_url, api_key="bench-key", max_retries=0)
        graph = _graph(model)

        def chat() -> object:
            return model.invoke("Write the weekly report.")

        def chat_stream() -> object:
            return list(model.stream("Write the weekly report."))

        def graph_run() -> object:
            return graph.invoke({"messages": [("user", "weather in Tokyo?")]})

        for call in (chat, chat_stream, graph_run):
            _time_calls(call, 30)  # warm up connections and lazy imports
        cases = (
            ("ChatOpenAI.invoke", chat),
            ("ChatOpenAI.stream", chat_stream),
            ("graph: 2 chats + 1 tool", graph_run),
        )
        for label, call in cases:
            for setup_label, setup in (("instrumentors", _Instrumentors), ("instrument() chain", _FullChain)):
                plain, traced = _measure(call, setup, args.calls, args.rounds)
                rows.append((f"{label} / {setup_label}", plain, traced))

    print(f"\nPer-run overhead, median of {args.calls} runs per side, {args.rounds} alternating rounds")
    print(f"{'case':<48} {'plain ms':>9} {'traced ms':>10} {'added ms':>9} {'ratio':>7}")
    for name, plain, traced in rows:
        print(f"{name:<48} {plain:>9.3f} {traced:>10.3f} {traced - plain:>9.3f} {traced / plain:>7.3f}")


if __name__ == "__main__":
    main()
