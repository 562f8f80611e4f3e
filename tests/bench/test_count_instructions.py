"""The instruction-count benchmark still runs (no number is asserted beyond "instrumenting adds some")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.modules import BENCH, load_script, run_bench

SCRIPT = BENCH / "count_instructions.py"


def test_the_per_thread_totals_are_read_from_callgrinds_files(tmp_path: Path) -> None:
    (tmp_path / "case.on.5-01").write_text("version: 1\ncreator: callgrind\nsummary: 1200\ntotals: 1200\n")
    (tmp_path / "case.on.5-02").write_text("summary: 34\n")
    (tmp_path / "case.on.50-01").write_text("summary: 99\n")  # another count of calls: not these
    assert load_script(SCRIPT)._thread_totals(str(tmp_path / "case.on.5")) == {1: 1200, 2: 34}


@pytest.mark.slow  # each runs the benchmark's child in a fresh interpreter
@pytest.mark.parametrize(
    "options",
    [
        ["--delay-scale", "1", "--warm-up", "5"],
        ["--delay-scale", "1", "--warm-up", "5", "--stream"],
        ["--delay-scale", "100", "--warm-up", "5"],  # the delays scaled: fails if their keywords moved
    ],
)
def test_the_child_makes_its_calls_without_valgrind(options: list[str]) -> None:
    run_bench("count_instructions.py", "--child", "tallyspan_chain:on:3", *options, timeout=120)


@pytest.mark.slow  # minutes under callgrind: half the suite's time before it was left to -m slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind on the PATH")
def test_counting_the_instrumentor_alone_on_a_tiny_count() -> None:
    done = run_bench(
        "count_instructions.py", "--cases", "tallyspan_instrumentor", "--calls", "10,40", "--warm-up", "10"
    )
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("tallyspan instrumentor alone")]
    plain, calling, others, added, ratio = row.split()[-5:]
    assert int(plain) > 1000  # thousands of instructions: a call through the client takes millions
    assert int(calling) > 0
    assert abs(int(added) - int(calling) - int(others)) <= 1  # each rounded on its own
    assert float(ratio) > 1.0
