"""The script and the HTTP plumbing shared by the scripted provider servers (OpenAI, Anthropic, Ollama).

A server owns a queue of :class:`ScriptedReply` (or a handler choosing one per request), records every
request, and answers each POST through one template (:meth:`ScriptedServer._answer`): a raw body sent
verbatim, 404 for a route the provider does not serve, the provider's error body for a scripted status,
else the provider's JSON body or its stream. Providers supply only their routes, bodies, events and error
shape. Streams are written with chunked transfer encoding so a client sees each event as it is sent; a
reply can drop the connection mid-stream.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeVar

__all__ = [
    "RecordedRequest",
    "ReplyHandler",
    "ScriptedReply",
    "ScriptedServer",
    "ScriptedToolCall",
    "StreamAbortedError",
]


# --- the script ------------------------------------------------------------------------------------


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

    Token counts default to estimates from the text lengths. ``status`` other than 200 sends the
    provider's error body; ``raw_body`` sends that text verbatim instead of a well-formed reply;
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
        """True when the client asked for a stream."""
        return bool(self.body.get("stream"))

    @property
    def route(self) -> str:
        """The path without its query and trailing slash."""
        return self.path.split("?", 1)[0].rstrip("/")


ReplyHandler = Callable[[RecordedRequest], ScriptedReply]

_S = TypeVar("_S", bound="ScriptedServer")


# --- HTTP ------------------------------------------------------------------------------------------


class StreamAbortedError(Exception):
    """Raised while answering to drop the connection abruptly (a server dying mid-stream)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects
    disable_nagle_algorithm = True  # headers and body go out as separate writes; avoid 40 ms ACK stalls
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests and the demo own the terminal."""

    def do_POST(self) -> None:
        request = self._read_request()
        owner = self.server.owner
        try:
            reply = owner._next_reply(request)
        except Exception as exc:  # a broken test handler shows up as a 500 naming it, not a hang-up
            owner._send_error(self, 500, f"reply handler raised {type(exc).__name__}: {exc}")
            return
        if reply.delay_s > 0:
            time.sleep(reply.delay_s)
        try:
            owner._answer(self, request, reply)
        except (StreamAbortedError, ConnectionError):
            self.close_connection = True
            _hard_close(self.connection)

    def do_GET(self) -> None:
        self.server.owner._send_error(self, 404, f"no route for GET {self.path}")

    def _read_request(self) -> RecordedRequest:
        """The POST body as JSON; a body that is not a JSON object is recorded as ``{}``."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        return RecordedRequest(
            path=self.path, body=body, headers={k.lower(): v for k, v in self.headers.items()}
        )

    def send_body(self, status: int, data: bytes, content_type: str, headers: Mapping[str, str]) -> None:
        """Send ``data`` verbatim, with ``Content-Length``."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def send_chunked(
        self, status: int, content_type: str, chunks: Iterable[bytes], headers: Mapping[str, str]
    ) -> None:
        """Stream ``chunks`` one HTTP chunk each; a StreamAbortedError from them drops the connection."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _hard_close(sock: socket.socket) -> None:
    # The point is an abrupt close the client notices; errors closing a dead socket don't matter.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: ScriptedServer) -> None:
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


def _cut(chunks: Iterable[bytes], after: int | None) -> Iterator[bytes]:
    """``chunks``, raising StreamAbortedError in place of the one after the first ``after``."""
    for sent, chunk in enumerate(chunks):
        if after is not None and sent >= after:
            raise StreamAbortedError
        yield chunk


class ScriptedServer:
    """Base of the scripted provider servers: lifecycle, reply queue, recorded requests, the answer.

    Args:
        replies: replies to send, in order; when they run out, ``default_reply`` is sent.
        handler: instead of a queue, a function choosing the reply for each request.
        default_reply: the reply once the queue is empty (default: text ``"ok"``).
    """

    _thread_name = "tallyspan-scripted-server"
    _base_path = ""
    """What the provider's client expects after host and port in its base URL."""
    _default_reply = ScriptedReply(text="ok")
    _stream_type = "text/event-stream"
    _stream_end: tuple[bytes, ...] = ()
    """Sent after a scripted stream's events (not counted by ``abort_after_chunks``)."""

    def __init__(
        self,
        replies: Sequence[ScriptedReply] = (),
        *,
        handler: ReplyHandler | None = None,
        default_reply: ScriptedReply | None = None,
    ) -> None:
        self._replies: deque[ScriptedReply] = deque(replies)
        self._handler = handler
        self.default_reply = default_reply or self._default_reply
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._counters: dict[str, itertools.count[int]] = {}
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self: _S) -> _S:
        """Bind a free port and serve on a daemon thread; returns self."""
        if self._httpd is None:
            self._httpd = _HTTPServer(self)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, args=(0.05,), name=self._thread_name, daemon=True
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

    def __enter__(self: _S) -> _S:
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
        """``http://127.0.0.1:PORT`` with the API's path prefix: the base URL the provider's client takes."""
        return f"http://127.0.0.1:{self.port}{self._base_path}"

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

    def _answer(self, handler: _Handler, request: RecordedRequest, reply: ScriptedReply) -> None:
        """Write the answer to ``request``: raw, not found, scripted error, or the provider's reply."""
        streamed = self._streams(request)
        if reply.raw_body is not None:
            raw = reply.raw_body.encode()
            if streamed:
                self._send_stream(handler, reply.status, [raw], reply)
            else:
                handler.send_body(reply.status, raw, "application/json", self._headers(chunked=False))
        elif not self._serves(request.route):
            self._send_error(handler, 404, f"no route for POST {request.path}")
        elif reply.status != 200:
            self._send_error(handler, reply.status, self._error_message(reply))
        elif streamed:
            self._send_stream(handler, 200, self._events(request, reply), reply, end=self._stream_end)
        else:
            self._send_json(handler, 200, self._body(request, reply))

    def _send_json(self, handler: _Handler, status: int, payload: Any) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        handler.send_body(status, data, "application/json", self._headers(chunked=False))

    def _send_error(self, handler: _Handler, status: int, message: str) -> None:
        self._send_json(handler, status, self._error_body(status, message))

    def _send_stream(
        self,
        handler: _Handler,
        status: int,
        chunks: Iterable[bytes],
        reply: ScriptedReply,
        end: Iterable[bytes] = (),
    ) -> None:
        sent = itertools.chain(_cut(chunks, reply.abort_after_chunks), end)
        handler.send_chunked(status, self._stream_type, sent, self._headers(chunked=True))

    # --- what each provider supplies -----------------------------------------------------------------

    def _serves(self, route: str) -> bool:
        """True for the POST routes the provider answers."""
        raise NotImplementedError

    def _streams(self, request: RecordedRequest) -> bool:
        """True when the answer to ``request`` is a stream."""
        return request.stream

    def _headers(self, *, chunked: bool) -> dict[str, str]:
        """Extra response headers (a request id); called once per response."""
        return {}

    def _error_message(self, reply: ScriptedReply) -> str:
        return f"scripted error {reply.status}"

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        """The provider's error body."""
        return {"error": message}

    def _body(self, request: RecordedRequest, reply: ScriptedReply) -> Any:
        """The JSON body of a reply that is not streamed."""
        raise NotImplementedError

    def _events(self, request: RecordedRequest, reply: ScriptedReply) -> Iterable[bytes]:
        """The chunks of a streamed reply, one event each."""
        raise NotImplementedError
