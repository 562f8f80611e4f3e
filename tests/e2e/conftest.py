"""A real Arize Phoenix server for the end-to-end tests, started once per session (it takes a while)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.conftest import skip_or_fail_in_ci
from tests.e2e.phoenix_server import PHOENIX_VENV_ENV, Phoenix, phoenix_executable, running_phoenix


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test against the real Phoenix is marked ``phoenix``: starting the server takes a minute, so the
    default run leaves these out and CI runs them (``python -m pytest -m phoenix``)."""
    for item in items:
        if "phoenix" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.phoenix)


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    """A running Phoenix on 127.0.0.1 (offline); skips when scripts/install-phoenix.sh has not run, fails
    so in CI."""
    executable = phoenix_executable()
    if executable is None:
        skip_or_fail_in_ci(
            f"Arize Phoenix is not installed: run scripts/install-phoenix.sh (venv from ${PHOENIX_VENV_ENV}, "
            "default ~/.cache/tallyspan/phoenix-venv)"
        )
    with running_phoenix(executable, tmp_path_factory.mktemp("phoenix")) as server:
        yield server
