"""What a saturated app loses: chain calls back to back, every span with a verdict, OTLP export on.

The real ``openai`` client talks to the in-process mock transport of ``compare_peers.py`` (no socket,
so the app thread never pauses), through ``tallyspan.instrument()`` with the store and OTLP export to
a receiver on 127.0.0.1 that accepts everything. The contract asks for English and the answer is
Japanese, so every span is violated and goes through the spool. Our threads (the checks' worker, the
store's writer, the OTLP intake and sender) run only on the GIL time the app leaves them. Printed: every
``dropped.*`` and ``errors.*`` counter, the turns given (``backpressure.*``), how many exports the
receiver took, and whether the final flush said everything was delivered. A run that keeps up prints
no ``dropped.*`` line.

Usage::

    python bench/bench_saturated.py                  # 20,000 calls (about half a minute here)
    python bench/bench_saturated.py --calls 200      # smoke
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import compare_peers


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts every export and counts them."""

    exports = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with _Receiver.lock:
            _Receiver.exports += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def run(calls: int) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider

    import tallyspan

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as folder:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{server.server_port}"
        os.environ["TALLYSPAN_SPOOL"] = str(Path(folder) / "spool.db")
        contract = {**compare_peers.CONTRACT, "language": "en"}  # the Japanese answer violates it
        provider = TracerProvider()
        tallyspan.instrument(
            {"default": contract},
            tracer_provider=provider,
            store=str(Path(folder) / "store.db"),
            instrumentors=["tallyspan_openai"],
            capture_content=True,
        )
        client = compare_peers._client()
        started = time.perf_counter()
        for _ in range(calls):
            client.chat.completions.create(model="bench-model", messages=compare_peers.MESSAGES)
        elapsed = time.perf_counter() - started
        delivered = provider.force_flush(120_000)
        counters = {
            key: value for key, value in tallyspan.stats().items() if not key.startswith("violations")
        }
        tallyspan.uninstrument()
        provider.shutdown()
    server.shutdown()
    return {"elapsed": elapsed, "delivered": delivered, "exports": _Receiver.exports, "counters": counters}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000, help="chain calls, back to back")
    args = parser.parse_args()
    result = run(args.calls)
    print(
        f"{args.calls} calls in {result['elapsed']:.1f} s; flush delivered everything: {result['delivered']}; "
        f"{result['exports']} exports received"
    )
    for key, value in sorted(result["counters"].items()):
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
