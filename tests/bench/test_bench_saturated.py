"""The saturated-app benchmark still runs end to end (on a tiny count; no number is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_saturated.py"


def test_bench_saturated_runs_on_a_tiny_count() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--calls", "100"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "100 calls in" in done.stdout
    assert "flush delivered everything: True" in done.stdout
    assert "dropped." not in done.stdout
