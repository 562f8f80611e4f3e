"""The spool benchmark still runs end to end (on a tiny count; no number is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_spool.py"


def test_bench_spool_runs_on_a_tiny_count() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "0,300", "--appends", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Spool append + delete of 17 records of 3500 bytes, median of 3"
    assert [line.split()[0] for line in lines[2:]] == ["0", "300"]
