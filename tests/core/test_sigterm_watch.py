"""A SIGTERM whose handler the main thread never runs is still obeyed (tallyspan._sigterm's watch): a pool
worker's main thread asleep in C on the queue lock that ``Pool.terminate()`` holds never came back to run
it, and ``Pool.terminate()`` hung (about 1 of 15 forkserver pools). The signal's C handler writes its
number to the wakeup fd in any case; here that byte is written by hand, which is exactly what a handler
that never ran leaves behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM handlers are POSIX")

_APP = textwrap.dedent(
    """
    import os, signal, sys, time
    from tallyspan._sigterm import flush_on_sigterm

    def flush(ends):
        print("flushed", ends, flush=True)

    if sys.argv[2] == "app-handler":  # the app's own, which flush_on_sigterm chains to
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
    assert flush_on_sigterm(flush, lambda: 5.0)
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    assert wakeup != -1
    print("ready", flush=True)
    if sys.argv[1] == "missed":
        os.write(wakeup, bytes([signal.SIGTERM]))  # delivered, but the handler never runs
    else:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered and handled on the main thread
    time.sleep(60)
    print("still running", flush=True)
    """
)


def _run(how: str, before: str = "default") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _APP, how, before], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_sigterm_whose_handler_never_runs_is_flushed_and_obeyed_from_our_thread() -> None:
    done = _run("missed")
    assert done.stdout.splitlines() == ["ready", "flushed True"], done.stderr
    assert done.returncode == 128 + signal.SIGTERM
    assert "did not start on the main thread" in done.stderr


def test_a_missed_sigterm_runs_the_apps_handler_after_the_flush_and_ends_as_it_says() -> None:
    done = _run("missed", "app-handler")
    assert done.stdout.splitlines() == ["ready", "flushed False"], done.stderr
    assert done.returncode == 3


def test_a_sigterm_handled_on_the_main_thread_flushes_once_and_ends_by_the_signal() -> None:
    done = _run("handled")
    assert done.stdout.splitlines() == ["ready", "flushed True"], done.stderr
    assert done.returncode == -signal.SIGTERM
    assert "did not start" not in done.stderr


def test_the_apps_own_wakeup_fd_is_kept_and_no_watch_is_started() -> None:
    app = textwrap.dedent(
        """
        import os, signal, threading
        from tallyspan._sigterm import flush_on_sigterm
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd)
        assert flush_on_sigterm(lambda ends: None, lambda: 1.0)
        assert signal.set_wakeup_fd(-1) == write_fd
        assert not [t for t in threading.enumerate() if t.name == "tallyspan-sigterm-watch"]
        print("kept")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", app], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "kept"), done.stderr
