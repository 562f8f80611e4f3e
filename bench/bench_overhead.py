"""Per-call overhead of the OpenAI instrumentation, against the same uninstrumented call in the same run.

Runs the real ``openai`` client against the local ``tallyspan.testing`` server, alternating blocks of
uninstrumented and instrumented calls (so machine drift hits both sides alike), and reports medians,
the added time per call and the ratio, both in wall time and in CPU time of the calling thread (the
latter is what the app's thread pays, and is immune to other processes competing for the CPU; the
local server runs on its own threads and is not counted). Also measures, in fresh interpreters, the import time of
``tallyspan`` and the time of ``tallyspan.instrument()``.

Usage::

    python bench/bench_overhead.py                # defaults: 2000 calls per case
    python bench/bench_overhead.py --calls 500 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import openai
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply
from tallyspan_instrumentors.openai import OpenAIInstrumentor

MESSAGES: Any = [{"role": "user", "content": "Write the weekly report."}]
ANSWER = "判定: 合格。今週の作業はすべて期限内に完了しました。" * 4


class _InstrumentorOnly(AbstractContextManager[None]):
    """The OpenAI instrumentor alone, on an SDK provider with no processors."""

    def __enter__(self) -> None:
        OpenAIInstrumentor().instrument(tracer_provider=TracerProvider())

    def __exit__(self, *exc: object) -> None:
        OpenAIInstrumentor().uninstrument()


class _FullChain(AbstractContextManager[None]):
    """``tallyspan.instrument()`` with its whole processor chain (no contracts, no store)."""

    def __enter__(self) -> None:
        self._instrumentation = tallyspan.instrument(
            tracer_provider=TracerProvider(), store=None, instrumentors=["tallyspan_openai"]
        )

    def __exit__(self, *exc: object) -> None:
        self._instrumentation.force_flush()
        tallyspan.uninstrument()


def _time_calls(call: Callable[[], object], count: int) -> list[tuple[float, float]]:
    """(wall ms, calling-thread CPU ms) per call."""
    samples = []
    for _ in range(count):
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        call()
        samples.append(((time.perf_counter_ns() - wall) / 1e6, (time.thread_time_ns() - cpu) / 1e6))
    return samples


def _measure(
    call: Callable[[], object], setup: Callable[[], AbstractContextManager[None]], calls: int, rounds: int
) -> tuple[float, float, float, float]:
    """Medians (plain wall, traced wall, plain CPU, traced CPU), interleaved in ``rounds`` blocks."""
    plain: list[tuple[float, float]] = []
    traced: list[tuple[float, float]] = []
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        with nullcontext():
            plain += _time_calls(call, per_round)
        with setup():
            traced += _time_calls(call, per_round)
    return (
        statistics.median(sample[0] for sample in plain),
        statistics.median(sample[0] for sample in traced),
        statistics.median(sample[1] for sample in plain),
        statistics.median(sample[1] for sample in traced),
    )


def _startup_seconds(code: str, repeats: int) -> float:
    """Median wall time of ``code`` in a fresh interpreter (it prints its own measurement)."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TALLYSPAN_DB": os.path.join(tmp, "bench.db")}
        for _ in range(repeats):
            out = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
            ).stdout
            results.append(float(json.loads(out.strip().splitlines()[-1])))
    return statistics.median(results)


_IMPORT_CODE = "import time; t = time.perf_counter(); import tallyspan; print(time.perf_counter() - t)"
_INSTRUMENT_CODE = (
    "import time, tallyspan; from opentelemetry.sdk.trace import TracerProvider; t = time.perf_counter(); "
    "tallyspan.instrument(tracer_provider=TracerProvider(), store=None{extra}); print(time.perf_counter() - t)"
)


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per case and side (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks per case (default 5)")
    parser.add_argument(
        "--startup-repeats", type=int, default=3, help="fresh interpreters per startup figure"
    )
    args = parser.parse_args()

    rows: list[tuple[str, float, float, float, float]] = []
    with OpenAICompatibleServer(default_reply=ScriptedReply(text=ANSWER)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="bench-key", max_retries=0)

        def chat() -> object:
            return client.chat.completions.create(model="bench-model", messages=MESSAGES)

        def chat_stream() -> object:
            return list(client.chat.completions.create(model="bench-model", messages=MESSAGES, stream=True))

        _time_calls(chat, 50)  # warm up connections and the SDK's lazy imports
        _time_calls(chat_stream, 20)
        for label, call in (("chat, non-streaming", chat), ("chat, streaming", chat_stream)):
            for setup_label, setup in (
                ("instrumentor only", _InstrumentorOnly),
                ("instrument() chain", _FullChain),
            ):
                rows.append((f"{label} / {setup_label}", *_measure(call, setup, args.calls, args.rounds)))
        client.close()

    print(f"\nPer-call overhead, median of {args.calls} calls per side, {args.rounds} alternating rounds")
    print(f"{'':<44} {'--------- wall ms ---------':>28} {'--- calling-thread CPU ms ---':>30}")
    header = f"{'plain':>7} {'traced':>7} {'added':>6} {'ratio':>6}"
    print(f"{'case':<44} {header} {header}")
    for name, plain, traced, plain_cpu, traced_cpu in rows:
        wall = f"{plain:>7.3f} {traced:>7.3f} {traced - plain:>6.3f} {traced / plain:>6.3f}"
        cpu = f"{plain_cpu:>7.3f} {traced_cpu:>7.3f} {traced_cpu - plain_cpu:>6.3f} {traced_cpu / plain_cpu:>6.3f}"
        print(f"{name:<44} {wall} {cpu}")

    import_s = _startup_seconds(_IMPORT_CODE, args.startup_repeats)
    openai_only_s = _startup_seconds(
        _INSTRUMENT_CODE.format(extra=", instrumentors=['tallyspan_openai']"), args.startup_repeats
    )
    all_s = _startup_seconds(_INSTRUMENT_CODE.format(extra=""), args.startup_repeats)
    print(f"\nStartup, median of {args.startup_repeats} fresh interpreters")
    print(f"{'import tallyspan':<48} {import_s * 1000:>9.1f} ms")
    print(f"{'instrument(instrumentors=[tallyspan_openai])':<48} {openai_only_s * 1000:>9.1f} ms")
    print(f"{'instrument() with every installed instrumentor':<48} {all_s * 1000:>9.1f} ms")


if __name__ == "__main__":
    main()
