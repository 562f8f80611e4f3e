"""The OTLP spool's cost per append as it fills, as during a backend outage.

Each append is what the outbox's intake writes every 20 ms under load: a batch of spans with verdicts
(17 here, 3.5 KB each), after evicting what expired and summing the sizes for the limit. The spool is
first filled to each size, then the batch is appended and deleted again (the sender's part) ``--appends``
times; CPU time and wall per append+delete, medians. With every statement on an index the cost stays
about flat; a statement that reads every row (a row's body included) makes it grow with the spool.

Usage::

    python bench/bench_spool.py                          # 0, 2,000, 6,000 and 18,000 rows (64 MB)
    python bench/bench_spool.py --sizes 0,500 --appends 20
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tallyspan_exporters._spool import Spool

BODY = "x" * 3500
"""About a span with a 1,000-character Japanese answer, its prompt and its verdicts, as spooled JSON."""
BATCH = 17
"""Spans with verdicts an intake writes at once at ~850 spans/s (its 20 ms of gathering)."""


def cost_at(rows: int, appends: int, folder: Path) -> tuple[float, float]:
    """Median (CPU ms, wall ms) of one append of a batch and its delete, with ``rows`` already spooled."""
    spool = Spool(folder / f"spool-{rows}.db", max_bytes=1 << 30, max_age_s=7 * 86400)
    try:
        for start in range(0, rows, 1000):
            spool.append("traces", [(f"old{n}", BODY) for n in range(start, min(rows, start + 1000))])
        cpu: list[float] = []
        wall: list[float] = []
        for number in range(appends):
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            seqs = spool.append("traces", [(f"new{number}.{n}", BODY) for n in range(BATCH)])
            spool.delete(seqs or [])
            cpu.append((time.process_time() - started_cpu) * 1000)
            wall.append((time.perf_counter() - started_wall) * 1000)
        return statistics.median(cpu), statistics.median(wall)
    finally:
        spool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="0,2000,6000,18000", help="rows spooled before, comma-separated")
    parser.add_argument("--appends", type=int, default=50, help="appends measured at each size")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    print(f"Spool append + delete of {BATCH} records of {len(BODY)} bytes, median of {args.appends}")
    print(f"{'rows spooled':>13} {'CPU ms':>8} {'wall ms':>8}")
    with tempfile.TemporaryDirectory() as folder:
        for rows in sizes:
            cpu, wall = cost_at(rows, args.appends, Path(folder))
            print(f"{rows:>13} {cpu:>8.3f} {wall:>8.3f}")


if __name__ == "__main__":
    main()
