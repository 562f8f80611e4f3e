"""A SIGTERM at any line of tallyspan's stopping code loses nothing: the handler flushes, or waits for the
flush under way, then the process ends by the signal.

``Pool.terminate()`` sends it while a worker may be anywhere, its exit hooks included: the SDK's provider
shutting our chain down on the main thread, where the handler runs between two lines. Before, a signal
between "the chain is off" and "a final flush is under way" found nothing to flush and nothing to wait
for: the worker ended with every span still queued, uncounted (a spawn pool lost one worker's runs in
about 1 terminated pool of 20). Here the signal is sent at each line in turn (tests/sigterm_app.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.forking import CHILD_GUARD_S, run_forked
from tests.stats import stored_jobs

from tallyspan._config import ENV_SHUTDOWN_TIMEOUT
from tallyspan._sigterm import final_flush, flush_on_sigterm

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGTERM") or os.name != "posix", reason="needs POSIX signals"
)

APP = Path(__file__).resolve().parents[1] / "sigterm_app.py"
RUNS = 5
AT_ONCE = 4


def _start(line: int, db_path: Path) -> subprocess.Popen[str]:
    environment = {
        **os.environ,
        "TALLYSPAN_DB": str(db_path),
        # The flush is under test, not its budget: on a loaded machine the default 3 s may not do.
        ENV_SHUTDOWN_TIMEOUT: "30",
    }
    return subprocess.Popen(
        [sys.executable, str(APP), str(line), str(RUNS)],
        env=environment,
        cwd=db_path.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _database(tmp_path: Path, line: int) -> Path:
    folder = tmp_path / str(line)
    folder.mkdir()
    return folder / "tallyspan.db"


def test_a_sigterm_at_any_line_of_the_stopping_code_loses_no_run(tmp_path: Path) -> None:
    # First without a signal: every run stored, and how many lines there are to signal at.
    unsignalled = _start(0, _database(tmp_path, 0))
    _, errors = unsignalled.communicate(timeout=120)
    assert unsignalled.returncode == 0, errors
    lines = int(errors.strip().splitlines()[-1])
    assert lines >= 10  # the switch, the final flush, the exit hook: the count is real
    assert stored_jobs(tmp_path / "0" / "tallyspan.db") == (RUNS, RUNS, [])

    outcomes: dict[int, tuple[int | None, int, int, list[tuple[str, int]]]] = {}
    failures: dict[int, str] = {}
    every_line = list(range(1, lines + 1))
    for start in range(0, lines, AT_ONCE):
        started = {
            line: _start(line, _database(tmp_path, line)) for line in every_line[start : start + AT_ONCE]
        }
        for line, process in started.items():
            _, errors = process.communicate(timeout=120)
            outcomes[line] = (process.returncode, *stored_jobs(tmp_path / str(line) / "tallyspan.db"))
            if process.returncode != -signal.SIGTERM:
                failures[line] = errors
    assert failures == {}
    # The signal ended every process, as it would have without us, and each stored all its runs first.
    assert outcomes == {line: (-signal.SIGTERM, RUNS, RUNS, []) for line in every_line}


def test_a_child_forked_during_a_final_flush_still_ends_by_sigterm() -> None:
    """The final flush under way is the parent's thread's: the child does not have that thread, and a
    count inherited from it would hold every SIGTERM of the child back for ever."""
    entered, release = threading.Event(), threading.Event()

    def flushing() -> None:
        with final_flush():
            entered.set()
            release.wait(CHILD_GUARD_S)

    thread = threading.Thread(target=flushing)
    thread.start()
    try:
        assert entered.wait(10)

        def child() -> bool:
            assert flush_on_sigterm(lambda ends: None, lambda: 1.0)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1_000_000):  # the handler runs in here
                pass
            return True  # not reached: the signal must end the process

        assert run_forked(child) == -signal.SIGTERM
    finally:
        release.set()
        thread.join()
