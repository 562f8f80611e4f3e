"""The app's per-call latency with the OTLP backend down, against the same with it up, in the same run.

Runs the real ``openai`` client against the local ``tallyspan.testing`` server inside an agent run,
through ``tallyspan.instrument()`` with OTLP export to a local receiver that is up, refuses connections,
hangs (reads the request and never answers) or answers 503. Every answer breaks the contract, so every
model span and every run carries a verdict and goes through the spool, with the run's ledger records.
The states alternate in rounds (machine drift hits all alike); medians of wall time and of the calling
thread's CPU time (what the app pays) per call, and each state's ratio to the backend up. An
uninstrumented column shows what the instrumentation costs at all.

Usage::

    python bench/bench_backend_down.py                 # defaults: 600 calls per state
    python bench/bench_backend_down.py --calls 200 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
from bench_overhead import _time_calls  # this folder is on sys.path when the script runs
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

MESSAGES: Any = [{"role": "user", "content": "Write the weekly report."}]
ANSWER = "Sorry, I can't help with that."
CONTRACTS = {"contracts": {"weekly_report": {"min_chars": 200, "allow_refusal": False}}}


class _Backend:
    """An OTLP/HTTP receiver on 127.0.0.1 that accepts, hangs or answers 503; or a closed port."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._release = threading.Event()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if backend.mode == "hang":
                    backend._release.wait(120)
                    self.close_connection = True
                    return
                self.send_response(503 if backend.mode == "503" else 200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        if mode == "refused":
            self._server.server_close()  # the port is known and nothing listens on it
        else:
            threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._release.set()
        if self.mode != "refused":
            self._server.shutdown()
            self._server.server_close()


@contextmanager
def _instrumented(endpoint: str | None, folder: str) -> Iterator[None]:
    if endpoint is None:
        yield
        return
    if endpoint == "none":  # instrumented, no OTLP export at all
        tallyspan.instrument(
            CONTRACTS, tracer_provider=TracerProvider(), store=None, instrumentors=["tallyspan_openai"]
        )
        try:
            yield
        finally:
            tallyspan.uninstrument()
        return
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    os.environ["TALLYSPAN_SPOOL"] = os.path.join(folder, f"spool-{time.monotonic_ns()}.db")
    tallyspan.instrument(
        CONTRACTS, tracer_provider=TracerProvider(), store=None, instrumentors=["tallyspan_openai"]
    )
    try:
        yield
    finally:
        tallyspan.uninstrument()  # within the shutdown budget; not timed
        del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=600, help="calls per state (default 600)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating blocks (default 3)")
    args = parser.parse_args()
    per_round = max(1, args.calls // args.rounds)
    states = ("uninstrumented", "no OTLP export", "backend up", "refused", "hanging", "503")
    samples: dict[str, list[tuple[float, float]]] = {state: [] for state in states}
    with (
        tempfile.TemporaryDirectory() as folder,
        OpenAICompatibleServer(default_reply=ScriptedReply(text=ANSWER)) as server,
        openai.OpenAI(base_url=server.base_url, api_key="bench-key", max_retries=0) as client,
    ):

        def call() -> object:
            with tallyspan.run("bench_agent"), tallyspan.stage("weekly_report"):
                return client.chat.completions.create(model="bench-model", messages=MESSAGES)

        _time_calls(call, 50)  # warm up connections and the SDK's lazy imports
        for _ in range(args.rounds):
            for state in states:
                mode = {"backend up": "up", "refused": "refused", "hanging": "hang", "503": "503"}.get(state)
                backend = _Backend(mode) if mode is not None else None
                endpoint = (
                    backend.endpoint
                    if backend is not None
                    else ("none" if state == "no OTLP export" else None)
                )
                try:
                    with _instrumented(endpoint, folder):
                        samples[state] += _time_calls(call, per_round)
                finally:
                    if backend is not None:
                        backend.close()

    up_wall = statistics.median(s[0] for s in samples["backend up"])
    up_cpu = statistics.median(s[1] for s in samples["backend up"])
    print(f"\nPer-call latency of an agent step (run + chat call), median of {args.calls} calls per state,")
    print(
        f"{args.rounds} alternating rounds; every span carries a verdict (spooled); ratio = state / backend up"
    )
    print(f"{'state':<18} {'wall ms':>9} {'ratio':>7} {'CPU ms':>9} {'ratio':>7}")
    for state in states:
        wall = statistics.median(s[0] for s in samples[state])
        cpu = statistics.median(s[1] for s in samples[state])
        print(f"{state:<18} {wall:>9.3f} {wall / up_wall:>7.3f} {cpu:>9.3f} {cpu / up_cpu:>7.3f}")


if __name__ == "__main__":
    main()
