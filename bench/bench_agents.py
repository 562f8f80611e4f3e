"""Per-run overhead of the OpenAI Agents SDK and MCP instrumentation, against the same uninstrumented run.

* Agents: ``Runner.run`` of an agent with one function tool against the local ``tallyspan.testing``
  server (two model calls and one tool per run). The instrumented side has the OpenAI instrumentor on
  too, as ``tallyspan.instrument()`` would (its span stands for each model call). Both sides run with
  the SDK's processor list emptied, so the SDK's own export does not weigh on either.
* MCP: ``Client.call_tool`` on an in-process ``MCPServer`` (client and server spans).

Blocks of uninstrumented and instrumented runs alternate in one process (machine drift hits both sides
alike); the table gives medians of wall time and of the calling thread's CPU time (what the app's thread
pays, immune to the local server's threads and other processes), the added CPU ms per run and the ratios.

Usage::

    python bench/bench_agents.py                  # defaults: 300 runs per case
    python bench/bench_agents.py --calls 100 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import warnings
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

import agents
import openai
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from mcp import Client
from mcp.server.mcpserver import MCPServer
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan.testing import OpenAICompatibleServer, RecordedRequest, ScriptedReply, ScriptedToolCall
from tallyspan_instrumentors.mcp import MCPInstrumentor
from tallyspan_instrumentors.openai import OpenAIInstrumentor
from tallyspan_instrumentors.openai_agents import OpenAIAgentsInstrumentor

ANSWER = "判定: 合格。今週の作業はすべて期限内に完了しました。" * 4


@function_tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


def _reply(request: RecordedRequest) -> ScriptedReply:
    """A tool call when the last message is the user's, else the answer: one tool round per run."""
    last = request.body.get("messages", [{}])[-1]
    if last.get("role") == "user":
        return ScriptedReply(tool_calls=[ScriptedToolCall("get_weather", {"city": "Tokyo"}, call_id="c1")])
    return ScriptedReply(text=ANSWER)


class _AgentInstrumentors(AbstractContextManager[None]):
    """The Agents SDK and OpenAI instrumentors, on an SDK provider with no processors."""

    def __enter__(self) -> None:
        provider = TracerProvider()
        OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider)

    def __exit__(self, *exc: object) -> None:
        OpenAIInstrumentor().uninstrument()
        OpenAIAgentsInstrumentor().uninstrument()


class _McpInstrumentor(AbstractContextManager[None]):
    """The MCP instrumentor alone, on an SDK provider with no processors."""

    def __enter__(self) -> None:
        MCPInstrumentor().instrument(tracer_provider=TracerProvider())

    def __exit__(self, *exc: object) -> None:
        MCPInstrumentor().uninstrument()


class _FullChain(AbstractContextManager[None]):
    """``tallyspan.instrument()`` with its whole processor chain (no contracts, no store)."""

    def __enter__(self) -> None:
        self._instrumentation = tallyspan.instrument(
            tracer_provider=TracerProvider(),
            store=None,
            instrumentors=["tallyspan_openai_agents", "tallyspan_openai", "tallyspan_mcp"],
        )

    def __exit__(self, *exc: object) -> None:
        self._instrumentation.force_flush()
        tallyspan.uninstrument()


async def _time_runs(run: Callable[[], Awaitable[object]], count: int) -> list[tuple[float, float]]:
    """(wall ms, CPU ms of this thread) per run: the local server answers on its own threads."""
    samples = []
    for _ in range(count):
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        await run()
        samples.append(((time.perf_counter_ns() - start) / 1e6, (time.thread_time_ns() - start_cpu) / 1e6))
    return samples


async def _measure(
    run: Callable[[], Awaitable[object]], setup: type[AbstractContextManager[None]], calls: int, rounds: int
) -> tuple[float, float, float, float]:
    """Median wall and CPU ms of the plain and the instrumented run, interleaved in ``rounds`` blocks."""
    plain: list[tuple[float, float]] = []
    traced: list[tuple[float, float]] = []
    per_round = max(1, calls // rounds)
    await _time_runs(run, 5)  # warm up connections and caches, on both sides
    with setup():
        await _time_runs(run, 5)
    for _ in range(rounds):
        plain += await _time_runs(run, per_round)
        with setup():
            traced += await _time_runs(run, per_round)
    return (
        statistics.median(s[0] for s in plain),
        statistics.median(s[0] for s in traced),
        statistics.median(s[1] for s in plain),
        statistics.median(s[1] for s in traced),
    )


def _mcp_server() -> MCPServer:
    server = MCPServer("bench")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return server


async def _bench(calls: int, rounds: int) -> list[tuple[str, float, float, float, float]]:
    rows: list[tuple[str, float, float, float, float]] = []
    with OpenAICompatibleServer(handler=_reply) as server:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="bench-key", max_retries=0) as client:
            model = OpenAIChatCompletionsModel(model="bench-model", openai_client=client)
            agent = Agent(name="bench", instructions="Be brief.", tools=[get_weather], model=model)

            async def agent_run() -> Any:
                return await Runner.run(agent, "Weather in Tokyo?")

            rows.append(
                (
                    "agents: Runner.run (2 model calls, 1 tool)",
                    *await _measure(agent_run, _AgentInstrumentors, calls, rounds),
                )
            )
            rows.append(("agents: same, full chain", *await _measure(agent_run, _FullChain, calls, rounds)))
    async with Client(_mcp_server()) as mcp_client:

        async def mcp_call() -> Any:
            return await mcp_client.call_tool("add", {"a": 1, "b": 2})

        rows.append(
            (
                "mcp: call_tool in-process (client+server)",
                *await _measure(mcp_call, _McpInstrumentor, calls * 4, rounds),
            )
        )
    return rows


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300, help="runs per case and side (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks per case (default 5)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    agents.set_trace_processors([])  # the SDK's own export weighs on neither side
    rows = asyncio.run(_bench(args.calls, args.rounds))
    header = ("case", "wall plain", "traced", "ratio", "cpu plain", "traced", "added", "ratio")
    print("{:<44} {:>10} {:>8} {:>6} {:>10} {:>8} {:>7} {:>6}".format(*header))
    for name, plain, traced, cpu_plain, cpu_traced in rows:
        print(
            f"{name:<44} {plain:>10.3f} {traced:>8.3f} {traced / plain:>6.3f}"
            f" {cpu_plain:>10.3f} {cpu_traced:>8.3f} {cpu_traced - cpu_plain:>7.3f} {cpu_traced / cpu_plain:>6.3f}"
        )


if __name__ == "__main__":
    main()
