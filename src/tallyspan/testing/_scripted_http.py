"""The HTTP plumbing shared by the scripted provider servers (Anthropic, Ollama) on 127.0.0.1.

A server owns a queue of :class:`~tallyspan.testing.ScriptedReply` (or a handler choosing one per
request), records every request, and answers through :meth:`ScriptedServer._answer`, which each
provider implements with its own wire format. Streams are written with chunked transfer encoding so
a client sees each event as it is sent; a reply can drop the connection mid-stream.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, TypeVar

from tallyspan.testing._openai_server import RecordedRequest, ScriptedReply, read_request

__all__ = ["ScriptedServer", "StreamAbortedError"]

_R = TypeVar("_R", bound=ScriptedReply)
_S = TypeVar("_S", bound="ScriptedServer[Any]")


class StreamAbortedError(Exception):
    """Raised while answering to drop the connection abruptly (a server dying mid-stream)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects
    disable_nagle_algorithm = True  # headers and body go out as separate writes; avoid 40 ms ACK stalls
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests own the terminal."""

    def do_POST(self) -> None:
        request = read_request(self)
        owner = self.server.owner
        reply = owner._next_reply(request)
        if reply.delay_s > 0:
            time.sleep(reply.delay_s)
        try:
            owner._answer(self, request, reply)
        except (StreamAbortedError, ConnectionError):
            self.close_connection = True
            _hard_close(self.connection)

    def do_GET(self) -> None:
        self.server.owner._answer_get(self)

    # --- writers used by the providers -------------------------------------------------------------

    def send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        """Send ``payload`` as a JSON body with ``Content-Length``."""
        self.send_body(status, json.dumps(payload, ensure_ascii=False).encode(), "application/json", headers)

    def send_body(
        self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        """Send ``data`` verbatim."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def send_chunked(
        self,
        status: int,
        content_type: str,
        pieces: Iterable[bytes],
        *,
        abort_after: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Stream ``pieces`` one chunk each; after ``abort_after`` pieces, drop the connection."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        for sent, piece in enumerate(pieces):
            if abort_after is not None and sent >= abort_after:
                raise StreamAbortedError
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
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

    def __init__(self, owner: ScriptedServer[Any]) -> None:
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


class ScriptedServer(Generic[_R]):
    """Base of the scripted provider servers: lifecycle, reply queue, recorded requests.

    Args:
        replies: replies to send, in order; when they run out, ``default_reply`` is sent.
        handler: instead of a queue, a function choosing the reply for each request.
        default_reply: the reply once the queue is empty.
    """

    _thread_name = "tallyspan-scripted-server"

    def __init__(
        self,
        replies: Sequence[_R] = (),
        *,
        handler: Callable[[RecordedRequest], _R] | None = None,
        default_reply: _R,
    ) -> None:
        self._replies: deque[_R] = deque(replies)
        self._handler = handler
        self.default_reply = default_reply
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
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    def add_reply(self, reply: _R) -> None:
        """Queue one more reply."""
        with self._lock:
            self._replies.append(reply)

    # --- used by the handler -----------------------------------------------------------------------

    def _next_reply(self, request: RecordedRequest) -> _R:
        with self._lock:
            self._requests.append(request)
            if self._handler is None:
                return self._replies.popleft() if self._replies else self.default_reply
        return self._handler(request)

    def _next_number(self, kind: str) -> int:
        with self._lock:
            counter = self._counters.setdefault(kind, itertools.count(1))
            return next(counter)

    def _answer(self, handler: _Handler, request: RecordedRequest, reply: _R) -> None:
        """Write the provider's answer to ``request``; implemented by each provider."""
        raise NotImplementedError

    def _answer_get(self, handler: _Handler) -> None:
        """Answer a GET; providers without GET routes send 404."""
        handler.send_json(404, {"error": f"no route for GET {handler.path}"})


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token), for usage the reply does not script."""
    return max(1, (len(text) + 3) // 4)


def pieces(text: str, size: int = 12) -> list[str]:
    """``text`` cut into pieces of ``size`` characters, so clients see several deltas."""
    return [text[i : i + size] for i in range(0, len(text), size)]
