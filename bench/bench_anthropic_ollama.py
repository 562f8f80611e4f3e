"""Per-call overhead of the Anthropic and Ollama instrumentation, against the same uninstrumented call.

Drives the real ``anthropic`` and ``ollama`` clients against the local ``tallyspan.testing`` servers,
alternating blocks of uninstrumented and instrumented calls in one process (so machine drift hits
both sides alike), and reports medians, the added time per call and the ratio. Two instrumented
setups: the instrumentor alone on an SDK provider with no processors, and ``tallyspan.instrument()``
with its whole processor chain (no contracts, no store).

Usage::

    python bench/bench_anthropic_ollama.py                # defaults: 600 calls per case and side
    python bench/bench_anthropic_ollama.py --calls 200 --rounds 4
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager

import anthropic
import ollama
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan.testing import AnthropicReply, AnthropicServer, OllamaReply, OllamaServer
from tallyspan_instrumentors.anthropic import AnthropicInstrumentor
from tallyspan_instrumentors.ollama import OllamaInstrumentor

ANSWER = "判定: 合格。今週の作業はすべて期限内に完了しました。" * 4
USER = [{"role": "user", "content": "今週の週報を書いて"}]


class _Instrumentors(AbstractContextManager[None]):
    """Both instrumentors on an SDK provider with no processors: the cost of the spans alone."""

    def __enter__(self) -> None:
        provider = TracerProvider()
        AnthropicInstrumentor().instrument(tracer_provider=provider)
        OllamaInstrumentor().instrument(tracer_provider=provider)

    def __exit__(self, *exc: object) -> None:
        OllamaInstrumentor().uninstrument()
        AnthropicInstrumentor().uninstrument()


class _FullChain(AbstractContextManager[None]):
    """``tallyspan.instrument()`` with its whole processor chain (no contracts, no store)."""

    def __enter__(self) -> None:
        self._instrumentation = tallyspan.instrument(
            tracer_provider=TracerProvider(),
            store=None,
            instrumentors=["tallyspan_anthropic", "tallyspan_ollama"],
        )

    def __exit__(self, *exc: object) -> None:
        self._instrumentation.force_flush()
        tallyspan.uninstrument()


def _time_calls(call: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


def _measure(
    call: Callable[[], object], setup: type[AbstractContextManager[None]], calls: int, rounds: int
) -> tuple[float, float]:
    """Median ms of the plain call and of the instrumented call, interleaved in ``rounds`` blocks."""
    plain: list[float] = []
    traced: list[float] = []
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        plain += _time_calls(call, per_round)
        with setup():
            traced += _time_calls(call, per_round)
    return statistics.median(plain), statistics.median(traced)


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=600, help="calls per case and side (default 600)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks per case (default 5)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    rows: list[tuple[str, float, float]] = []
    with (
        AnthropicServer(default_reply=AnthropicReply(text=ANSWER)) as anthropic_server,
        OllamaServer(default_reply=OllamaReply(text=ANSWER)) as ollama_server,
        anthropic.Anthropic(base_url=anthropic_server.base_url, api_key="bench-key", max_retries=0) as claude,
        ollama.Client(host=ollama_server.base_url) as local,
    ):

        def create() -> object:
            return claude.messages.create(model="claude-bench", max_tokens=256, messages=USER)  # type: ignore[arg-type]

        def create_stream() -> object:
            stream = claude.messages.create(model="claude-bench", max_tokens=256, messages=USER, stream=True)  # type: ignore[arg-type]
            return list(stream)

        def stream_manager() -> object:
            with claude.messages.stream(model="claude-bench", max_tokens=256, messages=USER) as stream:  # type: ignore[arg-type]
                return stream.get_final_message()

        def chat() -> object:
            return local.chat("llama-bench", USER)

        def chat_stream() -> object:
            return list(local.chat("llama-bench", USER, stream=True))

        cases = (
            ("anthropic messages.create", create),
            ("anthropic create(stream=True)", create_stream),
            ("anthropic messages.stream", stream_manager),
            ("ollama chat", chat),
            ("ollama chat(stream=True)", chat_stream),
        )
        for _, call in cases:
            _time_calls(call, 30)  # warm up connections and lazy imports
        for label, call in cases:
            for setup_label, setup in (("instrumentors", _Instrumentors), ("instrument() chain", _FullChain)):
                plain, traced = _measure(call, setup, args.calls, args.rounds)
                rows.append((f"{label} / {setup_label}", plain, traced))

    print(f"\nPer-call overhead, median of {args.calls} calls per side, {args.rounds} alternating rounds")
    print(f"{'case':<52} {'plain ms':>9} {'traced ms':>10} {'added ms':>9} {'ratio':>7}")
    for name, plain, traced in rows:
        print(f"{name:<52} {plain:>9.3f} {traced:>10.3f} {traced - plain:>9.3f} {traced / plain:>7.3f}")


if __name__ == "__main__":
    main()
