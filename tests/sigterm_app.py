"""An app whose tracer provider shuts down at exit (as the SDK's own exit hook does) with tallyspan's SIGTERM
handler installed (as in a pool worker), and which sends itself SIGTERM at one line of tallyspan's stopping
code: for tests/core/test_sigterm_windows.py.

    python tests/sigterm_app.py LINE RUNS

``LINE`` counts the lines run in tallyspan's own stopping code (``_instrument.py`` and ``_sigterm.py``) on
the main thread from the moment the provider shuts down; at that one the signal is sent (0: never). Like
``Pool.terminate()``, it can land anywhere. Prints, on stderr, how many such lines there were (when the
signal did not end the process first). The store is ``TALLYSPAN_DB``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import tallyspan
from tallyspan._instrument import _flush_on_sigterm, _sigterm_wait_s
from tallyspan._sigterm import flush_on_sigterm

#: The modules whose lines are counted: where stopping the chain and handling SIGTERM are decided.
STOPPING_CODE = {
    str(Path(tallyspan.__file__).with_name("_instrument.py")),
    str(Path(tallyspan.__file__).with_name("_sigterm.py")),
}


class SignalAtLine:
    """A trace function: sends SIGTERM to this process at the ``target``-th line of ``STOPPING_CODE``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.lines = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> SignalAtLine | None:
        del arg
        if frame.f_code.co_filename not in STOPPING_CODE:
            return self  # called code may be ours again: trace into it
        if event == "line":
            self.lines += 1
            if self.lines == self.target:
                os.kill(os.getpid(), signal.SIGTERM)
        return self


def main(target: int, runs: int) -> None:
    instrumentation = tallyspan.instrument(instrumentors=[])
    assert flush_on_sigterm(_flush_on_sigterm, _sigterm_wait_s)

    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    for number in range(runs):
        with tallyspan.run(f"job-{number}"):
            search("flights", tool_call_id=f"c{number}")
    tracer = SignalAtLine(target)
    sys.settrace(tracer)
    try:
        instrumentation.tracer_provider.shutdown()
    finally:
        sys.settrace(None)
    print(tracer.lines, file=sys.stderr)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
