"""``multiprocessing`` workers flush before they exit: a forked ``Pool`` worker leaves with ``os._exit``
(no atexit hook runs), after the finalizers of ``multiprocessing.util``; tallyspan registers one there.
Before, a fork pool closed and joined cleanly stored 154 of 200 runs, and counted nothing."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import warnings
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from tests.forking import run_forked
from tests.stats import stored_jobs

import tallyspan
from tallyspan._config import ENV_SHUTDOWN_TIMEOUT
from tallyspan._sigterm import flush_on_sigterm, installed_handler

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

RUNS = 200


def _job(number: int) -> int:
    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    with tallyspan.run(f"job-{number}"):
        search("flights", tool_call_id=f"c{number}")
    return os.getpid()


def test_a_fork_pool_closed_and_joined_stores_every_run(
    tracer_provider: TracerProvider, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The flush is under test, not its budget: four workers and this process share one SQLite file, and
    # on a loaded machine their last writes may wait on each other longer than the default 3 s.
    monkeypatch.setenv(ENV_SHUTDOWN_TIMEOUT, "30")
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    context = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads: exactly the case under test.
        warnings.simplefilter("ignore", DeprecationWarning)
        pool = context.Pool(4)
    try:
        workers = set(pool.map(_job, range(RUNS), chunksize=5))
    finally:
        pool.close()
        pool.join()
    assert instrumentation.force_flush(10_000)
    assert os.getpid() not in workers  # the runs were made in the pool's workers
    # Each worker's losses are on record beside what it kept: there were none.
    assert stored_jobs(db_path) == (RUNS, RUNS, [])


POOL_APP = Path(__file__).resolve().parents[1] / "pool_app.py"


@pytest.mark.parametrize(
    ("method", "way", "end"),
    [
        # Pool.terminate() (also the end of `with Pool() as pool:`) stops its workers with SIGTERM, whose
        # default action skips every flush: 0 to 51 of 200 runs stored before, nothing counted.
        ("fork", "parent", "terminate"),
        ("spawn", "module", "terminate"),
        ("spawn", "initializer", "terminate"),
        ("spawn", "module", "close"),
        # A forkserver child leaves with os._exit: before, 0 of 200 runs stored even closed and joined.
        ("forkserver", "module", "close"),
        ("forkserver", "initializer", "close"),
        ("forkserver", "initializer", "terminate"),
    ],
)
def test_pool_workers_store_every_run_however_the_pool_ends(
    method: str, way: str, end: str, db_path: Path, tmp_path: Path
) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    environment = {
        **os.environ,
        "TALLYSPAN_DB": str(db_path),
        "POOL_APP_WAY": way,
        # The flush is under test, not its budget (see above).
        ENV_SHUTDOWN_TIMEOUT: "30",
    }
    done = subprocess.run(
        [sys.executable, str(POOL_APP), method, end, str(RUNS)],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    app = json.loads(done.stdout.splitlines()[-1])
    assert len(app["exitcodes"]) == 4
    # The signal still ends the workers as it would have (one that had already left on the pool's stop
    # message exits 0; one whose handler the main thread never ran is ended by our watch with the shell's
    # status for SIGTERM, tallyspan._sigterm); the app sees no difference.
    ended = {0, -signal.SIGTERM, 128 + signal.SIGTERM}
    assert set(app["exitcodes"]) <= (ended if end == "terminate" else {0})
    runs, reconciled, losses = stored_jobs(db_path)
    assert (runs, reconciled, losses) == (RUNS, RUNS, [])


def _app_sigterm_handler(signum: int, frame: object) -> None:
    """The app's own SIGTERM handler, inherited by the fork pool's workers: it leaves its mark and exits 7."""
    del frame
    Path(os.environ["APP_MARKS"], str(os.getpid())).write_text(str(signum))
    os._exit(7)


def test_a_terminated_fork_pool_flushes_then_runs_the_apps_own_sigterm_handler(
    tracer_provider: TracerProvider, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SHUTDOWN_TIMEOUT, "30")
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("APP_MARKS", str(marks))
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    before = signal.signal(signal.SIGTERM, _app_sigterm_handler)
    try:
        context = multiprocessing.get_context("fork")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pool = context.Pool(4)
        workers = multiprocessing.active_children()
        pool.map(_job, range(RUNS), chunksize=5)
        pool.terminate()
        pool.join()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert signal.getsignal(signal.SIGTERM) is before  # nothing of ours left in the parent
    assert instrumentation.force_flush(10_000)
    for worker in workers:
        worker.join()
    handled = {int(mark.name) for mark in marks.iterdir()}
    # Every worker the signal reached ran the app's handler (after our flush), and it decided the exit code.
    assert handled == {worker.pid for worker in workers if worker.exitcode == 7}
    assert {worker.exitcode for worker in workers} <= {0, 7}
    assert all((marks / str(pid)).read_text() == str(int(signal.SIGTERM)) for pid in handled)
    assert stored_jobs(db_path) == (RUNS, RUNS, [])


def test_a_sigterm_flush_that_hangs_costs_its_wait_and_the_process_still_ends_by_sigterm() -> None:
    def child() -> bool:
        held = threading.Lock()

        def flush(ends: bool) -> None:
            # It needs a lock the main thread holds when the signal comes (our own code interrupted).
            with held:
                pass

        assert flush_on_sigterm(flush, lambda: 0.2)
        with held:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1_000_000):  # the handler runs in here
                pass
        return True  # not reached: the signal must end the process

    assert run_forked(child) == -signal.SIGTERM


def _report_sigterm_handler(pipe: Connection) -> None:
    pipe.send(installed_handler() is not None)


def _has_sigterm_handler() -> bool:
    return installed_handler() is not None


def test_the_sigterm_handler_is_only_in_pool_workers(
    tracer_provider: TracerProvider, db_path: Path, tmp_path: Path
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=[])
    assert signal.getsignal(signal.SIGTERM) is before  # not in the app's own process
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        process = context.Process(target=_report_sigterm_handler, args=(sender,))
        process.start()
        assert receiver.recv() is False  # nor in a plain child process, which the app stops as it likes
        process.join()
        with context.Pool(1) as pool:
            assert pool.apply(_has_sigterm_handler) is True
