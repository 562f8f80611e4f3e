"""Benchmark: reconciling one run of 10,000 tool calls (target: under 50 ms).

Run: ``python bench/bench_ledger.py``. Prints the best and median of several rounds, for three runs:
balanced (every call logged right after it), messy (drops, duplicates, phantoms, late logs,
id-less claims), and one with no claims at all. Then the whole path: 10,000 ``@tallyspan.tool`` calls
each logged through a ``log_action`` tool in one ``tallyspan.run``, with the ledger processor (run span
reconciled), as a ratio to the same spans made with a plain SDK provider and no processor.
"""

from __future__ import annotations

import statistics
import time

from tallyspan.ledger import Claim, Observed, reconcile

CALLS = 10_000
ROUNDS = 15


def _balanced() -> tuple[list[Observed], list[Claim]]:
    observed = [Observed(f"c{i}", f"tool{i % 7}", "succeeded", 2 * i) for i in range(CALLS)]
    claims = [Claim(f"c{i}", f"tool{i % 7}", "succeeded", "done", 2 * i + 1) for i in range(CALLS)]
    return observed, claims


def _messy() -> tuple[list[Observed], list[Claim]]:
    outcomes = ("succeeded", "failed", "rejected")
    observed = [Observed(f"c{i}", f"tool{i % 7}", outcomes[i % 3], 3 * i) for i in range(CALLS)]
    claims: list[Claim] = []
    for i in range(CALLS):
        if i % 10 == 0:
            continue  # dropped
        call_id = None if i % 13 == 0 else f"c{i}"
        seq = 3 * i + (5 if i % 17 == 0 else 1)  # some late
        claims.append(Claim(call_id, f"tool{i % 7}", outcomes[(i + (i % 11 == 0)) % 3], "", seq))
        if i % 19 == 0:
            claims.append(Claim(f"c{i}", f"tool{i % 7}", outcomes[i % 3], "", seq + 1))  # duplicate
        if i % 23 == 0:
            claims.append(Claim(f"x{i}", "ghost", "succeeded", "", seq + 1))  # phantom
    return observed, claims


def _time(observed: list[Observed], claims: list[Claim]) -> tuple[float, float, float]:
    """Best and median wall-clock ms, and best CPU ms (steadier on a shared machine)."""
    samples = []
    cpu = []
    for _ in range(ROUNDS):
        start, start_cpu = time.perf_counter(), time.process_time()
        reconcile(observed, claims)
        samples.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return min(samples), statistics.median(samples), min(cpu)


def _tool_loop(instrumented: bool) -> float:
    """Seconds for CALLS tool calls + CALLS log calls in one run, flushed through the chain."""
    from opentelemetry.sdk.trace import TracerProvider

    import tallyspan

    provider = TracerProvider()
    if instrumented:
        tallyspan.instrument(tracer_provider=provider, store=None, instrumentors=())
    tracer = provider.get_tracer("bench")

    @tallyspan.tool
    def work(n: int, tool_call_id: str) -> int:
        return n

    @tallyspan.tool
    def log_action(call_id: str, tool_name: str, claimed_outcome: str, tool_call_id: str) -> str:
        return "ok"

    start = time.perf_counter()
    if instrumented:
        with tallyspan.run("bench"):
            for i in range(CALLS):
                work(i, tool_call_id=f"c{i}")
                log_action(f"c{i}", "work", "succeeded", tool_call_id=f"L{i}")
        current = tallyspan.instrumentation()
        assert current is not None
        current.force_flush()
    else:  # the same spans, made by hand on a provider with no processor
        with tracer.start_as_current_span("invoke_agent bench"):
            for i in range(CALLS):
                with tracer.start_as_current_span("execute_tool work"):
                    work.__wrapped__(i, tool_call_id=f"c{i}")  # type: ignore[attr-defined]
                with tracer.start_as_current_span("execute_tool log_action"):
                    log_action.__wrapped__(f"c{i}", "work", "succeeded", tool_call_id=f"L{i}")  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - start
    tallyspan.uninstrument()
    provider.shutdown()
    return elapsed


def main() -> None:
    for label, (observed, claims) in (
        ("balanced", _balanced()),
        ("messy", _messy()),
        ("no claims", (_balanced()[0], [])),
    ):
        best, median, best_cpu = _time(observed, claims)
        result = reconcile(observed, claims)
        print(
            f"reconcile {CALLS:,} calls, {len(claims):,} claims ({label}): best {best:.1f} ms, "
            f"median {median:.1f} ms, CPU {best_cpu:.1f} ms, {len(result.discrepancies):,} discrepancies"
        )
    baseline = min(_tool_loop(False) for _ in range(3))
    instrumented = min(_tool_loop(True) for _ in range(3))
    print(
        f"{2 * CALLS:,} tool spans in one run: baseline {baseline * 1000:.0f} ms, with the ledger "
        f"{instrumented * 1000:.0f} ms (x{instrumented / baseline:.2f}, "
        f"{(instrumented - baseline) / (2 * CALLS) * 1e6:.1f} us per span)"
    )


if __name__ == "__main__":
    main()
