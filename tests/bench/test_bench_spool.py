"""The spool benchmark still runs end to end (on a tiny count; no number is asserted)."""

from __future__ import annotations

import pytest
from tests.modules import run_bench

pytestmark = pytest.mark.slow  # a benchmark run-check: CI runs it (-m slow), the default run does not


def test_bench_spool_runs_on_a_tiny_count() -> None:
    done = run_bench("bench_spool.py", "--sizes", "0,300", "--appends", "3", timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0] == "Spool append + delete of 17 records of 3500 bytes, median of 3"
    assert [line.split()[0] for line in lines[2:]] == ["0", "300"]
