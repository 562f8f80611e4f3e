"""The shipped Anthropic and Ollama test servers, on the wire: event order, bodies, errors, recording."""

from __future__ import annotations

import json

import httpx

from tallyspan.testing import AnthropicReply, AnthropicServer, OllamaReply, OllamaServer, ScriptedToolCall

TOOL = ScriptedToolCall("get_weather", {"city": "東京"}, call_id="toolu_1")


def sse_events(text: str) -> list[tuple[str, dict[str, object]]]:
    events = []
    for block in text.strip().split("\n\n"):
        name_line, data_line = block.split("\n")
        events.append((name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))))
    return events


def test_anthropic_stream_sends_the_real_event_sequence() -> None:
    reply = AnthropicReply(
        text="答え", reasoning="考え", tool_calls=[TOOL], prompt_tokens=4, completion_tokens=9
    )
    with AnthropicServer(replies=[reply]) as server:
        response = httpx.post(
            f"{server.base_url}/v1/messages",
            json={"model": "m", "max_tokens": 5, "messages": [], "stream": True},
        )
    assert response.headers["content-type"] == "text/event-stream"
    events = sse_events(response.text)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    deltas = [data["delta"]["type"] for name, data in events if name == "content_block_delta"]  # type: ignore[index]
    assert deltas == [
        "thinking_delta",
        "signature_delta",
        "text_delta",
        "input_json_delta",
        "input_json_delta",
    ]
    message_delta = events[-2][1]
    assert message_delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert message_delta["usage"] == {
        "input_tokens": 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 9,
    }


def test_anthropic_json_body_error_body_and_recorded_request() -> None:
    with AnthropicServer(
        replies=[AnthropicReply(text="ok", stop_sequence="END"), AnthropicReply(status=529)]
    ) as server:
        body = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        message = httpx.post(f"{server.base_url}/v1/messages", json=body, headers={"x-api-key": "k"}).json()
        error = httpx.post(f"{server.base_url}/v1/messages", json=body)
        missing = httpx.post(f"{server.base_url}/v1/complete", json=body)
        assert server.requests[0].body == body
        assert server.requests[0].headers["x-api-key"] == "k"
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": "ok", "citations": None}]
    assert message["stop_sequence"] == "END"
    assert message["stop_reason"] == "end_turn"
    assert error.status_code == 529
    assert error.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "scripted error 529"},
    }
    assert error.headers["request-id"].startswith("req_")
    assert missing.status_code == 404


def test_ollama_stream_is_ndjson_ending_with_the_counts() -> None:
    reply = OllamaReply(
        text="答え", reasoning="考え", tool_calls=[TOOL], prompt_tokens=3, completion_tokens=5
    )
    with OllamaServer(replies=[reply]) as server:
        response = httpx.post(f"{server.base_url}/api/chat", json={"model": "m", "messages": []})
    assert response.headers["content-type"] == "application/x-ndjson"
    parts = [json.loads(line) for line in response.text.splitlines()]
    assert [part["done"] for part in parts] == [False, False, False, True]
    assert parts[0]["message"]["thinking"] == "考え"
    assert parts[1]["message"]["content"] == "答え"
    assert parts[2]["message"]["tool_calls"] == [
        {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "東京"}}, "id": "toolu_1"}
    ]
    assert parts[3]["done_reason"] == "stop"
    assert (parts[3]["prompt_eval_count"], parts[3]["eval_count"]) == (3, 5)


def test_ollama_json_bodies_and_errors() -> None:
    replies = [
        OllamaReply(text="ひとつ", reasoning="r"),
        OllamaReply(text="生成"),
        OllamaReply(status=404, error_message="model 'x' not found"),
        OllamaReply(text="abc" * 10, stream_error_after=1, error_message="boom"),
    ]
    with OllamaServer(replies=replies) as server:
        chat = httpx.post(f"{server.base_url}/api/chat", json={"model": "m", "stream": False}).json()
        generate = httpx.post(f"{server.base_url}/api/generate", json={"model": "m", "stream": False}).json()
        missing = httpx.post(f"{server.base_url}/api/chat", json={"model": "x", "stream": False})
        cut = httpx.post(f"{server.base_url}/api/generate", json={"model": "m"})
    assert chat["message"] == {"role": "assistant", "content": "ひとつ", "thinking": "r"}
    assert chat["done"] is True
    assert generate["response"] == "生成"
    assert generate["context"] == [1, 2, 3]
    assert missing.status_code == 404
    assert missing.json() == {"error": "model 'x' not found 404"}
    assert [json.loads(line) for line in cut.text.splitlines()][-1] == {"error": "boom"}
