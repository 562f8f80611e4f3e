"""Quickstart: one line turns every model call of an ordinary app into a checked OpenTelemetry span.

Run it, then read what was recorded::

    python examples/quickstart.py
    tallyspan report

With ``OPENAI_API_KEY`` set it calls OpenAI (or any OpenAI-compatible server named by
``OPENAI_BASE_URL``: vLLM, llama.cpp, Ollama's /v1; model from ``OPENAI_MODEL``). Without them it
starts tallyspan's scripted local server on 127.0.0.1, so it runs anywhere, offline.

Spans go to the local store (``./.tallyspan/tallyspan.db``, or ``TALLYSPAN_DB``) and, when the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, to your tracing backend too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import openai

import tallyspan

# What a support answer must look like; usually this lives in a contracts.yaml file.
CONTRACTS = {
    "support_answer": {
        "language": "en",
        "min_chars": 60,
        "allow_refusal": False,
        "allow_reasoning": False,
    }
}

tallyspan.instrument(contracts=CONTRACTS)  # the one line

QUESTIONS = [
    "How do I reset my password?",
    "Can I export my invoices as CSV?",
    "Why was my card declined?",
]


@contextmanager
def openai_client() -> Iterator[tuple[openai.OpenAI, str]]:
    """A client for the configured server, else for a scripted local one (so the example runs offline)."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        with openai.OpenAI() as client:
            yield client, os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        return
    from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

    replies = [
        ScriptedReply(
            text="Open Settings > Security, choose 'Reset password' and follow the link we email you. "
            "The link is valid for 30 minutes."
        ),
        ScriptedReply(text="Yes: Billing > Invoices > Export, then pick CSV."),
        ScriptedReply(text="I'm sorry, but I can't help with that request."),
    ]
    with (
        OpenAICompatibleServer(replies=replies) as server,
        openai.OpenAI(base_url=server.base_url, api_key="local") as client,
    ):
        yield client, "local-model"


def answer(client: openai.OpenAI, model: str, question: str) -> str:
    """The app's own code: unchanged, except for naming the stage whose contract applies."""
    with tallyspan.stage("support_answer"):
        response = client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": "You are a helpful support agent for an invoicing app."},
                {"role": "user", "content": question},
            ],
        )
    return response.choices[0].message.content or ""


def main() -> None:
    with openai_client() as (client, model):
        for question in QUESTIONS:
            print(f"Q: {question}\nA: {answer(client, model, question)}\n")
    active = tallyspan.instrumentation()
    if active is not None:
        active.force_flush()  # also done at exit; here so the report below is complete
    print("Recorded. See what was checked with:  tallyspan report   (or: tallyspan spans)")


if __name__ == "__main__":
    main()
