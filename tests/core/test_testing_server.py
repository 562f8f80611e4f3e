"""The shipped OpenAI-compatible test server, driven by the real ``openai`` client."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from tests.conftest import mid_stream_error_class

from tallyspan.testing import OpenAICompatibleServer, RecordedRequest, ScriptedReply, ScriptedToolCall

USER: Any = [{"role": "user", "content": "hi"}]


def _client(server: OpenAICompatibleServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)


def test_base_url_is_loopback_v1() -> None:
    with OpenAICompatibleServer() as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"


def test_chat_completion_carries_text_reasoning_and_usage_details() -> None:
    reply = ScriptedReply(
        text="hello",
        reasoning="thinking",
        prompt_tokens=11,
        completion_tokens=7,
        cached_tokens=3,
        reasoning_tokens=2,
    )
    with OpenAICompatibleServer(replies=[reply]) as server, _client(server) as client:
        result = client.chat.completions.create(model="m-1", messages=USER)
    assert result.choices[0].message.content == "hello"
    assert getattr(result.choices[0].message, "reasoning_content", None) == "thinking"
    assert result.choices[0].finish_reason == "stop"
    assert result.model == "m-1"
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (
        11,
        7,
        18,
    )
    assert result.usage.prompt_tokens_details is not None
    assert result.usage.prompt_tokens_details.cached_tokens == 3
    assert result.usage.completion_tokens_details is not None
    assert result.usage.completion_tokens_details.reasoning_tokens == 2


def test_requests_are_recorded_with_body_and_lowercase_headers() -> None:
    with OpenAICompatibleServer() as server, _client(server) as client:
        client.chat.completions.create(model="m", messages=USER)
        recorded = server.requests
    assert len(recorded) == 1
    assert isinstance(recorded[0], RecordedRequest)
    assert recorded[0].path == "/v1/chat/completions"
    assert recorded[0].body["messages"] == USER
    assert recorded[0].headers["authorization"] == "Bearer test-key"


def test_empty_queue_falls_back_to_default_reply_and_add_reply_queues() -> None:
    with OpenAICompatibleServer() as server, _client(server) as client:
        first = client.chat.completions.create(model="m", messages=USER)
        server.add_reply(ScriptedReply(text="queued"))
        second = client.chat.completions.create(model="m", messages=USER)
    assert first.choices[0].message.content == "ok"
    assert second.choices[0].message.content == "queued"


def test_handler_chooses_the_reply_from_the_request() -> None:
    def echo(request: RecordedRequest) -> ScriptedReply:
        return ScriptedReply(text=str(request.body["messages"][-1]["content"]).upper())

    with OpenAICompatibleServer(handler=echo) as server, _client(server) as client:
        result = client.chat.completions.create(model="m", messages=USER)
    assert result.choices[0].message.content == "HI"


def test_chat_stream_splits_text_and_tool_call_deltas_and_sends_usage_last() -> None:
    reply = ScriptedReply(
        text="a streamed answer of some length",
        tool_calls=[ScriptedToolCall("lookup", {"query": "a fairly long query string"})],
    )
    with OpenAICompatibleServer(replies=[reply]) as server, _client(server) as client:
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=USER,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    arguments = "".join(
        (call.function.arguments or "") if call.function else ""
        for c in chunks
        if c.choices
        for call in (c.choices[0].delta.tool_calls or [])
    )
    argument_chunks = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert text == "a streamed answer of some length"
    assert arguments == '{"query": "a fairly long query string"}'
    assert len(argument_chunks) > 2
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None


def test_chat_stream_helper_accumulates_final_completion() -> None:
    reply = ScriptedReply(text="final", tool_calls=[ScriptedToolCall("f", '{"x": 1}', call_id="call_fixed")])
    with (
        OpenAICompatibleServer(replies=[reply]) as server,
        _client(server) as client,
        client.chat.completions.stream(model="m", messages=USER) as stream,
    ):
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "final"
    assert message.tool_calls is not None
    assert message.tool_calls[0].id == "call_fixed"
    assert message.tool_calls[0].function.arguments == '{"x": 1}'


def test_responses_json_and_stream_helper_agree() -> None:
    reply = ScriptedReply(
        text="answer text",
        reasoning="why",
        tool_calls=[ScriptedToolCall("f", {"a": 1})],
        prompt_tokens=5,
        completion_tokens=9,
        reasoning_tokens=4,
    )
    with OpenAICompatibleServer(replies=[reply, reply]) as server, _client(server) as client:
        plain = client.responses.create(model="m", input="hi")
        with client.responses.stream(model="m", input="hi") as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_response()
    for response in (plain, streamed):
        assert response.output_text == "answer text"
        assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
        assert response.usage is not None
        assert (response.usage.input_tokens, response.usage.output_tokens) == (5, 9)
        assert response.usage.output_tokens_details.reasoning_tokens == 4
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert "response.function_call_arguments.delta" in kinds


def test_embeddings_decode_in_base64_and_float() -> None:
    with OpenAICompatibleServer() as server, _client(server) as client:
        default = client.embeddings.create(model="e", input=["a", "b"], dimensions=4)
        floats = client.embeddings.create(model="e", input="a", encoding_format="float")
    assert [len(item.embedding) for item in default.data] == [4, 4]
    assert len(floats.data[0].embedding) == 8


def test_non_200_status_sends_openai_error_body() -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(status=429)]) as server,
        _client(server) as client,
        pytest.raises(openai.RateLimitError) as caught,
    ):
        client.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 429
    assert caught.value.body == {
        "message": "scripted error 429",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_abort_after_chunks_breaks_the_stream_as_a_connection_error() -> None:
    reply = ScriptedReply(text="x" * 200, abort_after_chunks=3)
    with OpenAICompatibleServer(replies=[reply]) as server, _client(server) as client:
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)
        received = []

        def drain() -> None:
            for chunk in stream:
                received.append(chunk)

        with pytest.raises(mid_stream_error_class()):
            drain()
    assert len(received) == 3


def test_raw_body_is_sent_verbatim() -> None:
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(raw_body='{"choices": "nope"}')]) as server,
        _client(server) as client,
    ):
        raw = client.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert raw.text == '{"choices": "nope"}'


def test_async_client_works_with_keep_alive() -> None:
    async def run(server: OpenAICompatibleServer) -> list[str]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            texts = []
            for _ in range(3):
                result = await client.chat.completions.create(model="m", messages=USER)
                texts.append(result.choices[0].message.content or "")
            return texts

    with OpenAICompatibleServer() as server:
        assert asyncio.run(run(server)) == ["ok", "ok", "ok"]


def test_a_raising_handler_answers_500_naming_the_error() -> None:
    def broken(request: RecordedRequest) -> ScriptedReply:
        raise KeyError("no script for this")

    with (
        OpenAICompatibleServer(handler=broken) as server,
        _client(server) as client,
        pytest.raises(openai.InternalServerError, match="reply handler raised KeyError"),
    ):
        client.chat.completions.create(model="m", messages=USER)


def test_public_names_are_exported_from_tallyspan_testing() -> None:
    import tallyspan.testing

    assert tallyspan.testing.__all__ == sorted(tallyspan.testing.__all__)
    for name in ("OpenAICompatibleServer", "RecordedRequest", "ScriptedReply", "ScriptedToolCall"):
        assert getattr(tallyspan.testing, name).__module__ == "tallyspan.testing"
