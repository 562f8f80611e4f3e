"""Instructions per call, counted under valgrind's callgrind: the stable measure on a shared machine.

Timings on a shared, virtualised host swing by a factor of two within one run (other tenants, CPU
frequency), so two timed runs can hardly tell a 5 % change from noise. The count of instructions a
call executes does not depend on the host's load: this script counts them for each case of
``compare_peers.py`` (the same mock transport and the same 1,000-character Japanese answer), per
thread, and prints what the instrumentation adds to a plain call.

Each side runs twice in a fresh interpreter under callgrind, with N1 and N2 non-streaming calls after a
warm-up; (I(N2) - I(N1)) / (N2 - N1) is one call's instructions, without start-up and warm-up.
``--separate-threads=yes`` splits them by thread: the calling thread (the app's) first, then the
threads of the instrumentation (tallyspan's worker and store writer; a peer's batch processor).
Instructions are not time (a cache miss costs more than an add), so this complements the timed
figures of ``compare_peers.py``; it does not replace them.

``--stream`` counts streaming calls instead (51 chunks each) and prints instructions per chunk.

valgrind runs a call about a hundred times slower, while the chain's worker and store writer gather
their batches for a wall-clock delay (50 ms, 500 ms): at their own delays they would handle 1.7 spans a
batch and write 13 a transaction under callgrind, where a full-speed run of the same loop hands the
checks 54-60 spans a batch and writes 250-285 a transaction, and the count would charge each span the
overhead of a batch and of a commit. ``--delay-scale`` (100 by default; 1 for the real delays)
multiplies both delays in the counted process, which brings the batches to 26-29 spans and the
transactions to 120-150. The warm-up is long enough (400 calls) for the store's statements to be
prepared in every shape its batches take: after 50 calls, preparing the remaining shapes (up to 64 rows
of 23 columns each, about a million instructions apiece) still fell inside the counted calls. Measured
on the chain (its added instructions a call): 1,233k with the real delays after 50 calls, 1,152k after
400, 1,060k after 400 with the delays scaled, where the store's writer went from 153k to 61k.

Needs ``valgrind`` on the PATH (``apt-get install valgrind``); a case takes about a minute.

Usage::

    python bench/count_instructions.py --python /tmp/peers-venv/bin/python
    python bench/count_instructions.py --cases tallyspan_chain --calls 100,500
    python bench/count_instructions.py --cases tallyspan_chain --stream --calls 20,100
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare_peers import (
    CASES,
    MESSAGES,
    STREAM_CHUNKS,
    _client,
    _Toggle,
    _version,
    capture_content_by_default,
    interpreter_for,
)

WARM_UP_CALLS = 400
DEFAULT_DELAY_SCALE = 100


def scale_deferred_delays(scale: float) -> None:
    """Multiply the default batch delay of tallyspan's worker and schedule delay of its store writer by
    ``scale`` in this process (before ``instrument()``): under valgrind, the batches the chain makes at
    full speed."""
    from tallyspan_exporters._writer import WriterThread
    from tallyspan_processors._worker import OffThreadProcessor

    for function, parameter in (
        (OffThreadProcessor.__init__, "batch_delay_millis"),
        (WriterThread.__init__, "schedule_delay_millis"),
    ):
        defaults = dict(function.__kwdefaults__ or {})
        if parameter not in defaults:  # renamed: fail loudly rather than count at the wrong delays
            raise RuntimeError(f"{function.__qualname__} has no keyword {parameter!r} any more")
        defaults[parameter] = type(defaults[parameter])(defaults[parameter] * scale)
        function.__kwdefaults__ = defaults


def run_calls(
    case: str, instrumented: bool, calls: int, *, stream: bool, delay_scale: float, warm_up: int
) -> None:
    """In this process: warm up, then ``calls`` calls (the counted part), then flush."""
    capture_content_by_default()
    if instrumented and case.startswith("tallyspan") and delay_scale != 1:
        scale_deferred_delays(delay_scale)
    with tempfile.TemporaryDirectory() as store_dir:
        toggle = _Toggle(case, store_dir)
        if instrumented:
            toggle.on()
        client = _client()

        def call() -> object:
            if stream:  # read to the end, as an app does
                return list(
                    client.chat.completions.create(model="bench-model", messages=MESSAGES, stream=True)
                )
            return client.chat.completions.create(model="bench-model", messages=MESSAGES)

        for _ in range(warm_up):
            call()
        toggle.flush()
        gc.collect()  # both sides start the counted calls with the same collector state
        for _ in range(calls):
            call()
        toggle.flush()
        if instrumented:
            toggle.off()


def _thread_totals(prefix: str) -> dict[int, int]:
    """Instructions per thread (1 is the main thread) from callgrind's per-thread output files."""
    totals: dict[int, int] = {}
    for path in glob.glob(f"{prefix}-*"):
        thread = int(path.rsplit("-", 1)[1])
        with open(path) as file:
            for line in file:
                if line.startswith("summary:"):
                    totals[thread] = int(line.split()[1])
                    break
    return totals


def count(
    python: str,
    case: str,
    instrumented: bool,
    calls: tuple[int, int],
    work_dir: str,
    options: Sequence[str],
) -> dict[int, float]:
    """Instructions per call by thread: two callgrind runs (side by side), differenced; ``options`` are
    this script's own (``--stream``, ``--delay-scale``, ``--warm-up``), handed to each run."""
    side = "on" if instrumented else "off"

    def one(n: int) -> dict[int, int]:
        prefix = os.path.join(work_dir, f"{case}.{side}.{n}")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={prefix}",
            python,
            os.path.abspath(__file__),
            "--child",
            f"{case}:{side}:{n}",
            *options,
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same hashes, so the same dict and set orders
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{case} ({side}, {n} calls) failed:\n{done.stderr[-3000:]}")
        return _thread_totals(prefix)

    with ThreadPoolExecutor(2) as pool:
        low, high = pool.map(one, calls)
    span = calls[1] - calls[0]
    return {thread: (high[thread] - low.get(thread, 0)) / span for thread in sorted(high)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases of compare_peers.py")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter for the peers (a venv that has them)"
    )
    parser.add_argument("--calls", default="100,500", help="the two counts of calls, N1,N2")
    parser.add_argument("--stream", action="store_true", help="streaming calls, counted per chunk")
    parser.add_argument(
        "--delay-scale",
        type=float,
        default=DEFAULT_DELAY_SCALE,
        help="multiply tallyspan's worker and store writer delays by this under valgrind (1: as they are)",
    )
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP_CALLS, help="calls before the counted ones, in each process"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:  # under valgrind: case:on|off:calls, with the options of the run that started it
        case, side, calls = args.child.split(":")
        run_calls(
            case,
            side == "on",
            int(calls),
            stream=args.stream,
            delay_scale=args.delay_scale,
            warm_up=args.warm_up,
        )
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not on the PATH: install it (apt-get install valgrind) to count instructions")
        return 2
    low, high = (int(part) for part in args.calls.split(","))
    if not 0 <= low < high:
        parser.error("--calls wants two counts, the first smaller")

    options = ["--delay-scale", f"{args.delay_scale:g}", "--warm-up", str(args.warm_up)]
    if args.stream:
        options.append("--stream")
    rows: list[tuple[str, dict[int, float], dict[int, float]]] = []
    plain: dict[str, dict[int, float]] = {}  # per interpreter: the same client, uninstrumented
    with tempfile.TemporaryDirectory() as work_dir:
        for case in args.cases.split(","):
            python = interpreter_for(case, args.python)
            if python is None:
                continue
            label = f"{CASES[case][1]} {_version(python, case)}"
            print(f"counting {label} ...", flush=True)
            if python not in plain:
                plain[python] = count(python, case, False, (low, high), work_dir, options)
            rows.append((label, plain[python], count(python, case, True, (low, high), work_dir, options)))

    per = STREAM_CHUNKS if args.stream else 1
    what = f"streamed chunk ({STREAM_CHUNKS} a call, " if args.stream else "non-streaming call ("
    print(f"\nInstructions per {what}callgrind, {high} - {low} calls), thousands")
    print(f"{'':<48} {'plain':>8} {'calling thread':>15} {'other threads':>14} {'added':>8} {'ratio':>6}")
    for label, base, traced in rows:
        base_total = sum(base.values()) / per
        added = sum(traced.values()) / per - base_total
        calling = (traced.get(1, 0.0) - base.get(1, 0.0)) / per
        others = added - calling
        print(
            f"{label:<48} {base_total / 1000:8.0f} {calling / 1000:+15.0f} {others / 1000:+14.0f} "
            f"{added / 1000:+8.0f} {(base_total + added) / base_total:6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
