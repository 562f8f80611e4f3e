"""An app started the way Phoenix's documentation starts one: ``phoenix.otel.register()``, then
``tallyspan.instrument()``, then one model call in an agent run.

A program, not a module of the tests: ``register()`` sets the global TracerProvider, which a process
can set only once. tests/e2e/test_phoenix_register.py runs it as
``python phoenix_register_app.py ENDPOINT PROJECT simple|batch plain|auto`` (``auto`` passes
``auto_instrument=True``) and reads the one JSON line it prints: what ``force_flush()`` answered and
``tallyspan.stats()``. The store goes where ``TALLYSPAN_DB`` says.
"""

from __future__ import annotations

import json
import sys

import openai
from phoenix.otel import register

import tallyspan
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

AGENT = "phoenix-agent"
STAGE = "weekly_report"
CONTRACTS = {STAGE: {"language": "ja"}}
#: English for a Japanese contract: the call is not_japanese, and its run is red.
REPLY = "The weekly report: every ticket was closed on time."


def main(endpoint: str, project: str, processor: str, instrumentation: str) -> None:
    register(
        project_name=project,
        endpoint=endpoint,
        batch=processor == "batch",
        auto_instrument=instrumentation == "auto",
        verbose=False,
    )
    active = tallyspan.instrument(contracts=CONTRACTS)
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text=REPLY)]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0) as client,
        tallyspan.run(AGENT),
        tallyspan.stage(STAGE),
    ):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "今週の週報を書いてください"}]
        )
    flushed = active.force_flush()
    print(json.dumps({"flushed": flushed, "stats": tallyspan.stats()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
