"""The dependency check without packaging (``tallyspan._requirements``), held to packaging itself.

Every verdict the fast path gives must be the one ``packaging`` gives (``SpecifierSet.contains``, which
OpenTelemetry's ``get_dependency_conflicts`` asks); a form it does not decide is left to packaging.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.instrumentation.dependencies import DependencyConflict, get_dependency_conflicts
from packaging.requirements import Requirement

from tallyspan._requirements import (
    UnmetRequirements,
    conflict_message,
    dependency_conflict,
    requirements_met,
    satisfies,
    simple_name,
)

RELEASES = [
    "0",
    "0.9",
    "1",
    "1.0",
    "1.0.0",
    "1.0.1",
    "1.2",
    "1.10",
    "1.40",
    "1.39.9",
    "2",
    "2.0.0.0",
    "10.0",
    "01.2",
]
OPERATORS = [">=", "<=", ">", "<", "==", "!="]


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_over_plain_releases_agrees_with_packaging(operator: str) -> None:
    for wanted, installed in itertools.product(RELEASES, RELEASES):
        requirement = f"lib {operator} {wanted}"
        expected = Requirement(requirement).specifier.contains(installed)
        assert satisfies(requirement, installed) is expected, (requirement, installed)


def test_ranges_of_two_clauses_agree_with_packaging() -> None:
    for low, high, installed in itertools.product(["1.0", "1.2"], ["1.10", "2"], RELEASES):
        for requirement in (f"lib>={low},<{high}", f"lib >= {low} , != {high}", f"lib<{high},>{low}"):
            expected = Requirement(requirement).specifier.contains(installed)
            assert satisfies(requirement, installed) is expected, (requirement, installed)


def test_no_specifier_means_any_plain_release() -> None:
    assert satisfies("lib", "0.1") is True
    assert Requirement("lib").specifier.contains("0.1")


@pytest.mark.parametrize(
    "installed",
    ["1.0rc1", "2.0.0b1", "1.0.post1", "1.0.dev0", "1.0+local", "v1.0", " 1.0", "1.0 ", "1!1.0", "١.٠", None],
)
def test_a_version_that_is_not_a_plain_release_is_left_to_packaging(installed: str | None) -> None:
    assert satisfies("lib >= 0.1", installed) is None


@pytest.mark.parametrize(
    "requirement",
    [
        "lib ~= 1.0",
        "lib === 1.0",
        "lib == 1.*",
        "lib >= 1.0rc1",
        "lib[extra] >= 1.0",
        "lib >= 1.0; python_version > '3'",
        "lib >= 1.0,",
        "lib >= ١.٠",
        "lib >= 1.0 <2",
        "-lib >= 1.0",
        "lib- >= 1.0",
        "lib >= 1..0",
        "lib >= ",
        "lib =< 1.0",
        "lib >= 1.0 ; extra == 'x'",
    ],
)
def test_another_form_of_requirement_is_left_to_packaging(requirement: str) -> None:
    assert simple_name(requirement) is None
    assert satisfies(requirement, "1.0") is None


def test_our_instrumentors_requirements_are_all_of_the_simple_form() -> None:
    from importlib.metadata import entry_points

    ours = [
        entry_point.load()
        for entry_point in entry_points(group="opentelemetry_instrumentor")
        if entry_point.value.startswith("tallyspan_instrumentors")
    ]
    assert len(ours) == 6
    for instrumentor in ours:
        for requirement in instrumentor._instruments:
            assert simple_name(requirement) == str(Requirement(requirement).name), requirement


def _distribution(root: Path, name: str, version: str) -> None:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )


def test_installed_versions_are_read_from_the_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _distribution(tmp_path, "tallyspan_probe_lib", "1.4.2")
    _distribution(tmp_path, "tallyspan_probe_pre", "2.0rc1")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert requirements_met(["tallyspan_probe_lib >= 1.4"]) is True
    assert requirements_met(["tallyspan-probe-lib >= 1.4", "tallyspan_probe_lib < 2"]) is True
    assert requirements_met(["tallyspan_probe_lib >= 1.5"]) is False
    assert requirements_met(["tallyspan_probe_absent >= 1.0"]) is False
    assert requirements_met(["tallyspan_probe_pre >= 1.0"]) is None  # packaging's pre-release rule
    assert requirements_met(["tallyspan_probe_pre >= 1.0", "tallyspan_probe_absent"]) is False
    assert requirements_met([]) is True


def test_a_conflict_is_packaging_s_and_its_text_opentelemetry_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _distribution(tmp_path, "tallyspan_probe_lib", "1.4.2")
    _distribution(tmp_path, "tallyspan_probe_pre", "2.0rc1")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert dependency_conflict(["tallyspan_probe_lib >= 1.4"]) is None
    for requirements in (["tallyspan_probe_lib >= 1.5"], ["tallyspan_probe_absent >= 1"]):
        unmet = dependency_conflict(requirements)
        assert isinstance(unmet, UnmetRequirements)
        upstream = get_dependency_conflicts(requirements)
        assert upstream is not None
        assert str(unmet) == str(upstream)
        assert unmet.conflict().required == upstream.required
        assert unmet.conflict().found == upstream.found
    # Undecided here: packaging decides (whether a pre-release is in ">= 1.0" changed in packaging 26).
    for requirement in (
        "tallyspan_probe_pre >= 1.0",
        "tallyspan_probe_pre < 2",
        "tallyspan_probe_pre >= 2.0rc1",
    ):
        upstream = get_dependency_conflicts([requirement])
        unmet = dependency_conflict([requirement])
        assert (unmet is None) is (upstream is None), requirement
        assert unmet is None or str(unmet) == str(upstream)


def test_deciding_loads_no_packaging_until_a_conflict_is_read() -> None:
    code = textwrap.dedent(
        """
        import sys
        from tallyspan._requirements import dependency_conflict

        assert dependency_conflict(["openai >= 1.0"]) is None
        unmet = dependency_conflict(["tallyspan-no-such-library >= 1.0"])
        print("packaging" in sys.modules)
        print(str(unmet))
        print("packaging" in sys.modules)
        """
    )
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, conflict, after = lines.splitlines()
    assert (before, after) == ("False", "True")
    # OpenTelemetry's own words, which its releases change (before 0.61b0: 'DependencyConflict: requested: ...')
    assert '"tallyspan-no-such-library >= 1.0"' in conflict


@pytest.mark.parametrize(
    ("conflict", "message"),
    [
        (
            DependencyConflict("openai >= 9"),
            'X only instruments "openai >= 9", but no installed version was found, so nothing can be '
            "instrumented.",
        ),
        (
            DependencyConflict("openai >= 9", "openai 1.2"),
            'X only instruments "openai >= 9", but currently installed version ("openai 1.2") falls '
            "outside of that range, so nothing can be instrumented.",
        ),
        (
            DependencyConflict(required_any=["a >= 1", "b >= 2"]),
            'X requires any of "a >= 1, b >= 2", but none are installed, so nothing can be instrumented.',
        ),
        (
            DependencyConflict(required_any=["a >= 1", "b >= 2"], found_any=["a 0.5"]),
            'X instruments any of "a >= 1, b >= 2", but currently installed version(s) ("a 0.5") fall '
            "outside of that range, so nothing can be instrumented.",
        ),
        (DependencyConflict(), "X has an unknown dependency conflict, so nothing can be instrumented."),
    ],
)
def test_a_conflict_is_told_in_opentelemetrys_latest_words_whatever_its_release(
    conflict: DependencyConflict, message: str
) -> None:
    # The words of opentelemetry-instrumentation 0.61b0 on (``_format_message``); before it, ``str()`` said
    # 'DependencyConflict: requested: ...', and ``tallyspan doctor`` and our instrumentors' log showed that.
    assert conflict_message(conflict, "X") == message
    assert conflict_message(conflict).startswith("This instrumentation ")
