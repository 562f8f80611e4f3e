"""The check engine on every hand-labelled real answer whose text CI has: the floors below are today's
figures (bench/label_agreement.py prints them per model), so a change that loses ground on any set fails.

The sets and their sources are in bench/label_agreement.py; the ELYZA set's texts live in another
repository, so it is measured by the benchmark where a clone is at hand, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.modules import BENCH, load_script

pytestmark = pytest.mark.data

#: Exact share per set, at or above what the engine gives today.
FLOORS = {"mtbench-dev": 0.97, "mtbench-dev2": 0.93, "mtbench-dev3": 0.93}
#: Precision per type over every set, where a type was predicted at least this often.
PRECISION_FLOOR = 0.9
MIN_PREDICTED = 10


@cache
def _bench() -> ModuleType:
    return load_script(BENCH / "label_agreement.py")


@cache
def _results(data: Path) -> Sequence[tuple[Any, frozenset[str]]]:
    bench = _bench()
    return tuple(
        (case, frozenset(bench.judge(case).violation_types)) for case in bench.load_cases(data, None)
    )


def test_every_set_keeps_its_exact_share(shared_data: Path) -> None:
    shares = {}
    for name in FLOORS:
        results = [(case, got) for case, got in _results(shared_data) if case.set == name]
        shares[name] = round(sum(case.labels == got for case, got in results) / len(results), 3)
    assert {
        name: share >= floor for name, share in shares.items() for floor in [FLOORS[name]]
    } == dict.fromkeys(FLOORS, True), shares


def test_the_sets_have_their_answers(shared_data: Path) -> None:
    sizes: dict[str, int] = {}
    for case, _ in _results(shared_data):
        sizes[case.set] = sizes.get(case.set, 0) + 1
    assert sizes == {"mtbench-dev": 100, "mtbench-dev2": 164, "mtbench-dev3": 300}


def test_no_type_predicted_often_falls_below_the_precision_floor(shared_data: Path) -> None:
    counts = _bench().type_counts(_results(shared_data))
    below = {
        kind: (count["tp"], count["fp"])
        for kind, count in counts.items()
        if count["tp"] + count["fp"] >= MIN_PREDICTED
        and count["tp"] / (count["tp"] + count["fp"]) < PRECISION_FLOOR
    }
    assert below == {}


def test_off_topic_is_precise_and_finds_two_thirds(shared_data: Path) -> None:
    count = _bench().type_counts(_results(shared_data))["off_topic"]
    assert count["fp"] <= 1
    assert count["tp"] >= 70
