"""``output.value`` / ``input.value`` (OpenInference's names, which Arize Phoenix shows as a span's Output
and Input): with content capture off our model spans carry an empty ``output.value`` and no
``input.value``, so Phoenix has nothing to show (it would otherwise show ``{"id": …, "model": …}``
derived from ``gen_ai.response.*``, which reads like the model's answer); with capture on, neither is
set by us. tests/e2e/test_phoenix_output.py checks the same against a real Phoenix.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.instrumentors.conftest import InstrumentLibraries

from tallyspan import semconv
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

ANSWER = "The model's private answer."
USER: Any = [{"role": "user", "content": "A private question?"}]
INPUT_VALUE = "input.value"


def make_every_kind_of_call(server: OpenAICompatibleServer, client: openai.OpenAI) -> None:
    for _ in range(3):
        server.add_reply(ScriptedReply(text=ANSWER))
    client.chat.completions.create(model="m1", messages=USER)
    for _chunk in client.chat.completions.create(model="m1", messages=USER, stream=True):
        pass
    client.responses.create(model="m1", input="A private question?")
    client.embeddings.create(model="e1", input="text")


@pytest.mark.parametrize("capture_content", [False, True])
def test_model_spans_give_phoenix_no_output_unless_content_is_captured(
    capture_content: bool,
    instrument_openai: InstrumentLibraries,
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
) -> None:
    spans: InMemorySpanExporter = instrument_openai(capture_content=capture_content)
    make_every_kind_of_call(openai_server, client)
    finished = spans.get_finished_spans()
    assert sorted(span.name for span in finished) == ["chat m1", "chat m1", "chat m1", "embeddings e1"]
    for span in finished:
        attributes = span.attributes or {}
        assert INPUT_VALUE not in attributes
        if capture_content:
            assert semconv.OPENINFERENCE_OUTPUT_VALUE not in attributes
        else:
            assert attributes[semconv.OPENINFERENCE_OUTPUT_VALUE] == ""
            assert semconv.GEN_AI_RESPONSE_MODEL in attributes  # what Phoenix would have shown instead
