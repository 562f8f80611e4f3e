"""The saturated-app benchmark still runs end to end (on a tiny count; no number is asserted)."""

from __future__ import annotations

import pytest
from tests.modules import run_bench

pytestmark = pytest.mark.slow  # a benchmark run-check: CI runs it (-m slow), the default run does not


def test_bench_saturated_runs_on_a_tiny_count() -> None:
    done = run_bench("bench_saturated.py", "--calls", "100", timeout=300)
    assert "100 calls in" in done.stdout
    assert "flush delivered everything: True" in done.stdout
    assert "dropped." not in done.stdout
