"""An app that makes agent runs in a ``multiprocessing`` pool, for tests/core/test_multiprocessing.py.

    python tests/pool_app.py START_METHOD END RUNS

``END`` is ``terminate`` (``Pool.terminate()``, as leaving ``with Pool() as pool:`` does) or ``close``
(``close()`` then ``join()``). ``POOL_APP_WAY`` says how the workers are instrumented, the ways the README
gives: ``module`` (``instrument()`` at the top of the main module, which a ``spawn`` or ``forkserver`` child
imports again), ``initializer`` (``Pool(initializer=tallyspan.instrument)``) or ``parent`` (the parent
alone: a ``fork`` child inherits it). The store is ``TALLYSPAN_DB``. Prints one JSON line: the pids that
made runs and the exit codes of the pool's workers.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import sys
import warnings

import tallyspan

WAY = os.environ.get("POOL_APP_WAY", "parent")
if WAY == "module":
    tallyspan.instrument(instrumentors=[])


def job(number: int) -> int:
    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    with tallyspan.run(f"job-{number}"):
        search("flights", tool_call_id=f"c{number}")
    return os.getpid()


def main(method: str, end: str, runs: int) -> None:
    if WAY != "module":
        tallyspan.instrument(instrumentors=[])
    initializer = functools.partial(tallyspan.instrument, instrumentors=[]) if WAY == "initializer" else None
    context = multiprocessing.get_context(method)
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads.
        warnings.simplefilter("ignore", DeprecationWarning)
        pool = context.Pool(4, initializer=initializer)
    pids = set(pool.map(job, range(runs), chunksize=5))
    workers = multiprocessing.active_children()
    if end == "terminate":
        pool.terminate()
    else:
        pool.close()
    pool.join()
    for worker in workers:
        worker.join()
    print(json.dumps({"pids": sorted(pids), "exitcodes": [worker.exitcode for worker in workers]}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
