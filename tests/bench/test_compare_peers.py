"""The peer comparison benchmark still runs end to end (on a tiny count; no number is asserted)."""

from __future__ import annotations

import re
import subprocess

import pytest
from tests.modules import run_bench

pytestmark = pytest.mark.slow  # a benchmark run-check: CI runs it (-m slow), the default run does not


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("compare_peers.py", "--rounds", "1", "--startup-repeats", "1", *args)


def test_compare_peers_runs_on_a_tiny_count() -> None:
    done = _run(
        "--calls", "20", "--rss-calls", "50", "--store-spans", "50",
        "--cases", "tallyspan_instrumentor,tallyspan_chain,openai_v2,openinference",
    )  # fmt: skip
    for line in (
        "Per non-streaming call",
        "Per async non-streaming call",
        "Streaming, per chunk",
        "Import + instrument",
        "RSS over",
        "Store:",
    ):
        assert line in done.stdout
    assert "tallyspan instrument() + contract + store" in done.stdout
    header = next(line for line in done.stdout.splitlines() if "thread CPU" in line)
    assert header.split()[-4:] == ["other", "threads", "kernel", "collector"]
    chain_row = next(line for line in done.stdout.splitlines() if line.startswith("tallyspan instrument()"))
    # spread (a range) and the three added figures after it, each a signed number of microseconds
    assert re.fullmatch(r"[+-]\d+\.\.[+-]\d+(\s+[+-]\d+\.\d){3}", " ".join(chain_row.split()[-4:]))


def test_no_startup_repeats_leaves_the_import_figure_out() -> None:
    # It was a median of no figure at all, after every other figure had been measured.
    done = _run(
        "--calls", "10", "--startup-repeats", "0", "--rss-calls", "0", "--store-spans", "0",
        "--cases", "tallyspan_instrumentor",
    )  # fmt: skip
    assert "Per non-streaming call" in done.stdout
    assert "Import + instrument" not in done.stdout


def test_a_zero_count_leaves_the_rss_and_store_figures_out() -> None:
    # It was a division by zero after every other figure had been measured.
    done = _run("--calls", "10", "--rss-calls", "0", "--store-spans", "0", "--cases", "tallyspan_chain")
    assert "Per non-streaming call" in done.stdout
    assert "RSS over" not in done.stdout
    assert "Store:" not in done.stdout
