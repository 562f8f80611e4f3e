"""What the providers' wire formats share: token estimates, stream pieces, the model, tool arguments, SSE."""

from __future__ import annotations

import json
from typing import Any

from tallyspan.testing._scripted_http import RecordedRequest, ScriptedReply, ScriptedToolCall

__all__ = ["arguments_object", "estimate_tokens", "pieces", "reply_model", "sse_event"]


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token), for usage the reply does not script."""
    return max(1, (len(text) + 3) // 4)


def pieces(text: str, size: int = 12) -> list[str]:
    """``text`` cut into pieces of ``size`` characters, so clients see several deltas."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def reply_model(request: RecordedRequest, reply: ScriptedReply) -> str:
    """The model the reply names, else the one the request asked for."""
    return reply.model if reply.model is not None else str(request.body.get("model", "unknown-model"))


def arguments_object(call: ScriptedToolCall) -> Any:
    """The call's arguments as a JSON value, for providers that send objects (empty text: ``{}``)."""
    if not isinstance(call.arguments, str):
        return dict(call.arguments)
    return json.loads(call.arguments) if call.arguments.strip() else {}


def sse_event(data: str, name: str | None = None) -> bytes:
    """One server-sent event: ``data`` (and its ``event`` name, where the provider sends one)."""
    head = f"event: {name}\n" if name is not None else ""
    return f"{head}data: {data}\n\n".encode()
