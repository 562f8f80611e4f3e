"""A local OpenAI-compatible HTTP server that replays scripted replies, for tests and the demo.

It speaks the wire format the ``openai`` package parses (chat completions, Responses and embeddings,
JSON and server-sent events), on 127.0.0.1, with the standard library only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tallyspan.testing._openai_wire import (
    chat_body,
    chat_events,
    embeddings_body,
    error_body,
    new_response_id,
    response_object,
    responses_events,
)

__all__ = ["OpenAICompatibleServer", "RecordedRequest", "ScriptedReply", "ScriptedToolCall"]


@dataclass(frozen=True)
class ScriptedToolCall:
    """A function call the scripted model requests.

    Args:
        name: the function name.
        arguments: the argument text (sent verbatim) or a dict (sent as JSON).
        call_id: the call id; ``None`` numbers it ``call_1``, ``call_2``, ... per server.
    """

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    call_id: str | None = None

    @property
    def arguments_text(self) -> str:
        """The arguments as the wire carries them."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), ensure_ascii=False)


@dataclass(frozen=True)
class ScriptedReply:
    """What the server answers to one request.

    Token counts default to estimates from the text lengths. ``status`` other than 200 sends
    OpenAI's error body; ``raw_body`` sends that text verbatim instead of a well-formed reply;
    ``abort_after_chunks`` closes the connection mid-stream after that many events.
    """

    text: str = ""
    tool_calls: Sequence[ScriptedToolCall] = ()
    reasoning: str = ""
    """Sent as ``reasoning_content`` on chat completions, as a reasoning item on Responses."""
    finish_reason: str | None = None
    """Default: ``tool_calls`` when there are tool calls, else ``stop``."""
    model: str | None = None
    """Default: the request's model."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    status: int = 200
    delay_s: float = 0.0
    abort_after_chunks: int | None = None
    raw_body: str | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received: its path, parsed JSON body and headers (lower-case names)."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def stream(self) -> bool:
        """True when the client asked for server-sent events."""
        return bool(self.body.get("stream"))


ReplyHandler = Callable[[RecordedRequest], ScriptedReply]


def read_request(handler: BaseHTTPRequestHandler) -> RecordedRequest:
    """Read the POST body a handler received; a body that is not a JSON object is recorded as ``{}``."""
    length = int(handler.headers.get("content-length") or 0)
    raw = handler.rfile.read(length) if length else b""
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return RecordedRequest(
        path=handler.path, body=body, headers={k.lower(): v for k, v in handler.headers.items()}
    )


class _AbortedError(Exception):
    """Raised inside the handler to drop the connection mid-stream."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects
    disable_nagle_algorithm = True  # headers and body go out as separate writes; avoid 40 ms ACK stalls
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests and the demo own the terminal."""

    def do_POST(self) -> None:
        request = read_request(self)
        owner = self.server.owner
        try:
            reply = owner._next_reply(request)
        except Exception as exc:  # a broken test handler shows up as a 500 naming it, not a hang-up
            self._send_json(500, error_body(500, f"reply handler raised {type(exc).__name__}: {exc}"))
            return
        if reply.delay_s > 0:
            time.sleep(reply.delay_s)
        try:
            self._answer(owner, request, reply)
        except (_AbortedError, ConnectionError, BrokenPipeError):
            self.close_connection = True
            _hard_close(self.connection)

    def do_GET(self) -> None:
        self._send_json(404, error_body(404, f"no route for GET {self.path}"))

    def _answer(self, owner: OpenAICompatibleServer, request: RecordedRequest, reply: ScriptedReply) -> None:
        path = request.path.split("?", 1)[0].rstrip("/")
        if reply.raw_body is not None:
            if request.stream:
                self._send_stream(iter([reply.raw_body]), reply, raw=True)
            else:
                self._send_bytes(reply.status, reply.raw_body.encode(), "application/json")
            return
        if reply.status != 200:
            self._send_json(reply.status, error_body(reply.status, f"scripted error {reply.status}"))
            return
        if path.endswith("/chat/completions"):
            if request.stream:
                self._send_stream(chat_events(owner, request, reply), reply)
            else:
                self._send_json(200, chat_body(owner, request, reply))
        elif path.endswith("/responses"):
            if request.stream:
                self._send_stream(responses_events(owner, request, reply), reply)
            else:
                self._send_json(200, response_object(owner, request, reply, new_response_id(owner)))
        elif path.endswith("/embeddings"):
            self._send_json(200, embeddings_body(request, reply))
        else:
            self._send_json(404, error_body(404, f"no route for POST {self.path}"))

    def _send_json(self, status: int, payload: Mapping[str, Any]) -> None:
        self._send_bytes(status, json.dumps(payload, ensure_ascii=False).encode(), "application/json")

    def _send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_{self.server.owner._next_number('request')}")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_stream(self, events: Iterator[str], reply: ScriptedReply, *, raw: bool = False) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for sent, event in enumerate(events):
            if reply.abort_after_chunks is not None and sent >= reply.abort_after_chunks:
                raise _AbortedError
            data = event.encode() if raw else f"data: {event}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        if not raw:
            done = b"data: [DONE]\n\n"
            self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _hard_close(sock: socket.socket) -> None:
    # The point is an abrupt close the client notices; errors closing a dead socket don't matter.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: OpenAICompatibleServer) -> None:
        self.owner = owner
        self.open_connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet: clients dropping connections (resets, aborted streams) is what tests do."""

    def close_idle_connections(self) -> None:
        """Drop keep-alive connections so their handler threads finish when the server stops."""
        with self._connections_lock:
            connections = list(self.open_connections)
        for connection in connections:
            _hard_close(connection)


class OpenAICompatibleServer:
    """A scripted OpenAI-compatible server on 127.0.0.1, started by ``with`` or :meth:`start`.

    Args:
        replies: replies to send, in order; when they run out, ``default_reply`` is sent.
        handler: instead of a queue, a function choosing the reply for each request.
        default_reply: the reply once the queue is empty (text ``"ok"``).

    Example::

        with OpenAICompatibleServer(replies=[ScriptedReply(text="hello")]) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="test-key")
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert server.requests[0].body["model"] == "m"
    """

    def __init__(
        self,
        replies: Sequence[ScriptedReply] = (),
        *,
        handler: ReplyHandler | None = None,
        default_reply: ScriptedReply | None = None,
    ) -> None:
        self._replies: deque[ScriptedReply] = deque(replies)
        self._handler = handler
        self.default_reply = default_reply if default_reply is not None else ScriptedReply(text="ok")
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._counters: dict[str, itertools.count[int]] = {}
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> OpenAICompatibleServer:
        """Bind a free port and serve on a daemon thread; returns self."""
        if self._httpd is None:
            self._httpd = _HTTPServer(self)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, args=(0.05,), name="tallyspan-openai-server", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.close_idle_connections()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> OpenAICompatibleServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- public state ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the server must be started)."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; use `with` or start()")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the ``base_url`` for ``openai.OpenAI``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    def add_reply(self, reply: ScriptedReply) -> None:
        """Queue one more reply."""
        with self._lock:
            self._replies.append(reply)

    # --- used by the handler -----------------------------------------------------------------------

    def _next_reply(self, request: RecordedRequest) -> ScriptedReply:
        with self._lock:
            self._requests.append(request)
            if self._handler is None:
                return self._replies.popleft() if self._replies else self.default_reply
        return self._handler(request)

    def _next_number(self, kind: str) -> int:
        with self._lock:
            counter = self._counters.setdefault(kind, itertools.count(1))
            return next(counter)
