"""Zero-code: an OpenAI Agents SDK agent with no tallyspan line in it, checked and reconciled anyway.

Run it under ``opentelemetry-instrument``, configured by the environment, then read what was recorded::

    pip install 'tallyspan[agents]'
    TALLYSPAN_CONTRACTS=examples/zero_code_contracts.yaml opentelemetry-instrument python examples/zero_code_agent.py
    tallyspan report && tallyspan ledger

``opentelemetry-instrument`` loads tallyspan's hook and every installed instrumentation; the hook builds
the checks, the ledger and the store (``TALLYSPAN_DB``, default ``./.tallyspan/tallyspan.db``) on the
tracer provider, and exports over OTLP when the standard ``OTEL_EXPORTER_OTLP_*`` variables say so.

The model is whatever OpenAI-compatible server ``OPENAI_BASE_URL`` names (vLLM, llama.cpp, Ollama's
/v1; model from ``OPENAI_MODEL``), or OpenAI with ``OPENAI_API_KEY``. Without either it starts
tallyspan's scripted local server on 127.0.0.1, whose agent forgets to log one of its actions and
answers in English, so the checks and the ledger have something to catch.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool

INSTRUCTIONS = (
    "You write the weekly sales report in Japanese. Look the figures up, send the report to the "
    "manager, and after every other tool call, log it with log_action (its call id, tool name, outcome)."
)


@function_tool
def look_up_sales(region: str) -> str:
    """Look up this week's sales of a region."""
    return f"{region}: 1,200 units, +4% on last week"


@function_tool
def send_report(to: str, body: str) -> str:
    """Send the report by e-mail."""
    return f"sent to {to}"


@function_tool
def log_action(call_id: str, tool_name: str, claimed_outcome: str, summary: str) -> str:
    """Log one of your own actions in the activity log."""
    return "logged"


def scripted_replies() -> list[Any]:
    """The scripted server's answers: the agent logs its first call, never its second, answers in English."""
    from tallyspan.testing import ScriptedReply, ScriptedToolCall

    def tool(name: str, reply_id: str, **arguments: str) -> ScriptedReply:
        return ScriptedReply(tool_calls=[ScriptedToolCall(name, arguments, call_id=reply_id)])

    return [
        tool("look_up_sales", "c1", region="kanto"),
        tool(
            "log_action",
            "c2",
            call_id="c1",
            tool_name="look_up_sales",
            claimed_outcome="succeeded",
            summary="looked up the sales",
        ),
        tool("send_report", "c3", to="manager@example.com", body="..."),  # never logged
        ScriptedReply(text="Done, the report was sent."),  # English, where the contract asks for Japanese
    ]


@contextmanager
def model_server() -> Iterator[tuple[str | None, str]]:
    """The configured server's URL (None: the SDK's default) and model, else a scripted local server's."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        yield os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        return
    from tallyspan.testing import OpenAICompatibleServer

    with OpenAICompatibleServer(replies=scripted_replies()) as server:
        yield server.base_url, "local-model"


async def main() -> None:
    with model_server() as (base_url, model):
        # A local server needs no key; the SDK's own trace export to OpenAI reads OPENAI_API_KEY only.
        client = openai.AsyncOpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "local"))
        agent = Agent(
            name="weekly-reporter",
            instructions=INSTRUCTIONS,
            tools=[look_up_sales, send_report, log_action],
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        )
        try:
            result = await Runner.run(agent, "今週の営業週報を作って、部長に送ってください。")
        finally:
            await client.close()
    print(result.final_output)
    print("Recorded. See what was checked with:  tallyspan report   (and: tallyspan ledger)")


if __name__ == "__main__":
    asyncio.run(main())
