"""Arize Phoenix end to end: with content capture off, Phoenix shows no Output for a model call.

Phoenix fills a missing ``output.value`` in from ``gen_ai.response.id`` and ``gen_ai.response.model``
(``{"id": "chatcmpl-…", "model": …}``), which its Output panel then shows as if it were the model's
answer. Our model spans carry an empty ``output.value`` while content is off, which Phoenix keeps and
shows as no output at all; with content on, the output messages are there and no empty value is set.
"""

from __future__ import annotations

import uuid
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.e2e.phoenix_server import PROJECT_RESOURCE_ATTRIBUTE, Phoenix
from tests.e2e.violating_agent import CHAT_SPAN, run_weekly_agent

import tallyspan

_SPANS_PER_RUN = 5  # three chats, one tool call, the run

_SPAN_IO_QUERY = """
query ($project: ID!) {
  node(id: $project) {
    ... on Project {
      spans(first: 100) { edges { node { name input { value } output { value } } } }
    }
  }
}
"""


def _span_io(phoenix: Phoenix, capture_content: bool) -> list[dict[str, Any]]:
    """Run the agent into a project of its own; the input and output Phoenix shows for each span."""
    name = f"tallyspan-io-{uuid.uuid4().hex[:8]}"
    exporter = OTLPSpanExporter(endpoint=phoenix.traces_endpoint, timeout=30)
    try:
        run_weekly_agent(
            [SimpleSpanProcessor(exporter)],
            capture_content=capture_content,
            resource_attributes={PROJECT_RESOURCE_ATTRIBUTE: name},
        )
    finally:
        tallyspan.uninstrument()
    phoenix.wait_for_spans(name, _SPANS_PER_RUN)
    (project_id,) = [p["id"] for p in phoenix.get("/v1/projects")["data"] if p["name"] == name]
    data = phoenix.graphql(_SPAN_IO_QUERY, project=project_id)
    return [edge["node"] for edge in data["node"]["spans"]["edges"]]


def test_content_off_gives_model_spans_no_output_in_phoenix(phoenix: Phoenix) -> None:
    spans = _span_io(phoenix, capture_content=False)
    chats = [span for span in spans if span["name"] == CHAT_SPAN]
    assert len(chats) == 3
    for span in spans:
        assert span["output"] is None, span  # not {"id": "chatcmpl-…", "model": "m"}
        assert span["input"] is None, span


def test_content_on_still_shows_what_phoenix_derives(phoenix: Phoenix) -> None:
    chats = [span for span in _span_io(phoenix, capture_content=True) if span["name"] == CHAT_SPAN]
    assert len(chats) == 3
    for span in chats:
        assert span["output"] is not None  # no empty placeholder when the content is exported
