"""``uninstrument()`` while model calls are in flight on other threads (issue 38, item 8): tried with 8
threads of plain and streamed OpenAI calls against a local server, no failure was found; this keeps it
so. The app gets every answer unchanged and no exception, each span ends once, and nothing is counted
as a failure of ours."""

from __future__ import annotations

import logging
import threading
from collections import Counter

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

THREADS = 8
CALLS = 40
ANSWER = "答えです。"


@pytest.mark.parametrize("stream", [False, True])
def test_uninstrument_while_calls_are_in_flight_on_other_threads(
    stream: bool, tracer_provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))  # the app's own, adopted
    answers: Counter[str] = Counter()
    errors: list[BaseException] = []
    halfway = threading.Event()
    caplog.set_level(logging.WARNING)
    with OpenAICompatibleServer(default_reply=ScriptedReply(text=ANSWER, delay_s=0.002)) as server:
        tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=["tallyspan_openai"])
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "q"}]

        def work() -> None:
            for number in range(CALLS):
                try:
                    if stream:
                        chunks = client.chat.completions.create(model="m", messages=messages, stream=True)
                        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                    else:
                        reply = client.chat.completions.create(model="m", messages=messages)
                        text = reply.choices[0].message.content or ""
                except BaseException as error:  # whatever reaches the app is the finding
                    errors.append(error)
                    continue
                answers[text] += 1
                if number == CALLS // 4:
                    halfway.set()

        threads = [threading.Thread(target=work) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        assert halfway.wait(60)
        tallyspan.uninstrument()
        for thread in threads:
            thread.join()
    assert errors == []
    assert answers == Counter({ANSWER: THREADS * CALLS})
    spans = exporter.get_finished_spans()
    ends = Counter(span.context.span_id for span in spans if span.context is not None)
    assert ends
    assert max(ends.values()) == 1  # each span ended (and was exported) once
    assert len(spans) <= THREADS * CALLS
    assert all(span.end_time is not None for span in spans)
    assert not [record for record in caplog.records if "ended span" in record.getMessage()]
    assert {key: value for key, value in tallyspan.stats().items() if key.startswith("errors.")} == {}
