"""Failures: the app's errors pass through unchanged, ours are swallowed and counted; switches work."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import openai
import pytest
from openai.resources.chat import AsyncCompletions, Completions
from openai.resources.embeddings import Embeddings
from openai.resources.responses import Responses
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.stats import losses

import tallyspan
from tallyspan import semconv
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply
from tallyspan_instrumentors.openai import OpenAIInstrumentor

USER: Any = [{"role": "user", "content": "hi"}]


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [span.name for span in spans]
    return spans[0]


def test_http_error_passes_through_and_sets_status_code_error_type(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    openai_server.add_reply(ScriptedReply(status=500))
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 500
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "500"
    assert (span.attributes or {})[semconv.ERROR_TYPE] == "500"
    assert semconv.GEN_AI_RESPONSE_ID not in (span.attributes or {})


async def test_async_http_error_sets_error_type(
    openai_spans: InMemorySpanExporter,
    openai_server: OpenAICompatibleServer,
    async_client: openai.AsyncOpenAI,
) -> None:
    openai_server.add_reply(ScriptedReply(status=429))
    with pytest.raises(openai.RateLimitError):
        await async_client.responses.create(model="m", input="hi")
    assert (only_span(openai_spans).attributes or {})[semconv.ERROR_TYPE] == "429"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_refused_sets_exception_class_error_type(openai_spans: InMemorySpanExporter) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with (
        openai.OpenAI(base_url=url, api_key="k", max_retries=0) as client,
        pytest.raises(openai.APIConnectionError),
    ):
        client.chat.completions.create(model="m", messages=USER)
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})[semconv.ERROR_TYPE] == "APIConnectionError"


def _outcome(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        result = call()
    except Exception as exc:
        return ("raised", type(exc).__name__)
    return ("returned", repr(result))


@pytest.mark.parametrize(
    "body",
    [
        '{"choices": "nope", "usage": 5, "model": 3}',
        '{"id": "x", "choices": [{"message": null, "finish_reason": 7}], "usage": {"prompt_tokens": "many"}}',
        "[1, 2, 3]",
        "{not json",
    ],
)
def test_malformed_body_gives_the_app_the_sdks_own_outcome(
    instrument_openai: Callable[..., InMemorySpanExporter],
    openai_server: OpenAICompatibleServer,
    client: openai.OpenAI,
    body: str,
) -> None:
    openai_server.add_reply(ScriptedReply(raw_body=body))
    openai_server.add_reply(ScriptedReply(raw_body=body))

    def call() -> Any:
        return client.chat.completions.create(model="m", messages=USER)

    plain = _outcome(call)
    exporter = instrument_openai(capture_content=True)
    traced = _outcome(call)
    assert traced == plain
    span = only_span(exporter)
    assert span.name == "chat m"
    if plain[0] == "raised":
        assert (span.attributes or {})[semconv.ERROR_TYPE] == plain[1]


def test_fields_of_the_wrong_type_are_skipped_and_the_rest_is_read(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    body = (
        '{"id": 5, "model": "served", "choices": [null, {"index": 1, "message": {"content": "ok",'
        ' "tool_calls": 7}, "finish_reason": ["x"]}], "usage": {"prompt_tokens": 3, "completion_tokens": "2"}}'
    )
    openai_server.add_reply(ScriptedReply(raw_body=body))
    result = client.chat.completions.create(model="m", messages=USER)
    assert result.choices[0] is None
    span = only_span(openai_spans)
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.OPENINFERENCE_OUTPUT_VALUE: "",  # content off: nothing for Phoenix to show
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: "m",
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: openai_server.port,
        semconv.GEN_AI_RESPONSE_MODEL: "served",  # the id 5 is no string id: left out
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 3,
    }
    assert losses() == {}


def test_malformed_stream_event_does_not_break_iteration(
    openai_spans: InMemorySpanExporter, openai_server: OpenAICompatibleServer, client: openai.OpenAI
) -> None:
    events = 'data: {"id": 5, "choices": [{"delta": {"tool_calls": "x"}, "index": "a"}]}\n\ndata: [DONE]\n\n'
    openai_server.add_reply(ScriptedReply(raw_body=events))
    chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
    assert len(chunks) == 1
    only_span(openai_spans)


def test_suppress_instrumentation_makes_no_span(
    openai_spans: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    with suppress_instrumentation():
        client.chat.completions.create(model="m", messages=USER)
        list(client.chat.completions.create(model="m", messages=USER, stream=True))
        client.embeddings.create(model="e", input="x")
    assert openai_spans.get_finished_spans() == ()
    client.chat.completions.create(model="m", messages=USER)
    only_span(openai_spans)


def test_uninstrument_restores_the_original_methods(
    instrument_openai: Callable[..., InMemorySpanExporter], client: openai.OpenAI
) -> None:
    originals = (
        Completions.create,
        AsyncCompletions.create,
        Responses.create,
        Embeddings.create,
        Completions.parse,
    )
    exporter = instrument_openai()
    assert Completions.create is not originals[0]
    OpenAIInstrumentor().uninstrument()
    assert (
        Completions.create,
        AsyncCompletions.create,
        Responses.create,
        Embeddings.create,
        Completions.parse,
    ) == originals
    client.chat.completions.create(model="m", messages=USER)
    assert exporter.get_finished_spans() == ()


def test_unreadable_request_still_runs_the_call_untraced(
    openai_spans: InMemorySpanExporter, client: openai.OpenAI
) -> None:
    class Exploding(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            raise RuntimeError("unreadable message")

        def __iter__(self) -> Iterator[str]:
            raise RuntimeError("unreadable message")

        def __len__(self) -> int:
            return 1

    with pytest.raises(RuntimeError, match="unreadable message"):
        client.chat.completions.create(model="m", messages=[Exploding()])  # type: ignore[list-item]
    assert tallyspan.stats().get("errors.span.start") == 1
    assert openai_spans.get_finished_spans() == ()


def test_every_table_entry_present_in_the_sdk_is_wrapped_then_unwrapped(
    instrument_openai: Callable[..., InMemorySpanExporter],
) -> None:
    import importlib

    import wrapt

    # wrapt 2 splits BaseObjectProxy (what a function wrapper is) from ObjectProxy; wrapt 1 has only the latter
    proxy_type = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)
    from tallyspan_instrumentors.openai._instrumentor import _WRAPPED

    def attributes() -> dict[str, object]:
        found = {}
        for module_name, name, _factory in _WRAPPED:
            class_name, method = name.rsplit(".", 1)
            try:
                owner = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError):
                continue
            found[f"{module_name}.{name}"] = owner.__dict__[method]
        return found

    before = attributes()
    assert len(before) >= 14
    instrument_openai()
    assert all(isinstance(value, proxy_type) for value in attributes().values())
    OpenAIInstrumentor().uninstrument()
    assert attributes() == before
