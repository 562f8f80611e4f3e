#!/usr/bin/env python
"""Semantic mutations: bugs a developer could write, each kept with the tests that must catch it.

mutmut (``scripts/mutation.sh``) flips operators and constants; the bugs that ship are semantic: a wrong
exception class, a forgotten release, a filter that means "all" instead of "any". Each entry of
``MUTATIONS`` is one such bug, written as an edit of the code (the exact text it replaces, found once),
with the tests that must fail on it. The script applies each alone, runs its tests, restores the file and
reports ``caught`` (a test failed), ``survived`` (they all passed) or ``clean-fails`` (the tests already
fail on unchanged code, so a failure would prove nothing).

Usage (in a virtual environment with the test extra, from anywhere)::

    python scripts/semantic_mutations.py                   # every mutation
    python scripts/semantic_mutations.py --area delivery   # one area: streams, delivery, engine, store, cli, ...
    python scripts/semantic_mutations.py --name spool-owner-kept-after-fork
    python scripts/semantic_mutations.py --list            # the mutations, by area

It edits the files of the working tree in place, one at a time, and restores each byte for byte, also
when interrupted; run it on a clean tree. A new rule, exit or delivery promise comes with its entry here:
the bug its test would catch.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    area: str
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    """pytest arguments: test files, node ids, or ``-k`` and an expression."""
    also: tuple[tuple[str, str, str], ...] = ()
    """More edits of the same bug, ``(file, old, new)``: where two layers guard one promise, the bug
    removes both (one alone changes nothing, an equivalent mutant)."""

    @property
    def edits(self) -> tuple[tuple[str, str, str], ...]:
        return ((self.file, self.old, self.new), *self.also)


STREAM_ENDS = "tests/instrumentors/test_stream_ends.py"
DELIVERY = "tests/exporters/test_delivery_promises.py"
STREAMS = "instrumentors/tallyspan_instrumentors/_streams.py"
OUTBOX = "exporters/tallyspan_exporters/_delivery.py"
OTLP = "exporters/tallyspan_exporters/_otlp.py"
SPOOL = "exporters/tallyspan_exporters/_spool.py"
FAILURE_LOGS = "src/tallyspan/_datasets/_failure_logs.py"

MUTATIONS: tuple[Mutation, ...] = (
    # --- streams: every exit of every stream ---------------------------------------------------------------
    Mutation(
        "streams",
        "async-stream-end-is-an-error",
        STREAMS,
        "_END_OF_ITEMS = (StopIteration, StopAsyncIteration)",
        "_END_OF_ITEMS = (StopIteration,)",
        (STREAM_ENDS, "-k", "async"),
    ),
    Mutation(
        "streams",
        "read-to-the-end-without-finish-reason-is-abandoned",
        STREAMS,
        "                and not self.exhausted\n",
        "",
        (STREAM_ENDS, "-k", "finish_reason"),
    ),
    Mutation(
        "streams",
        "stream-span-ended-twice",
        STREAMS,
        "        if self.finalized:\n            return\n        self.finalized = True\n",
        "        self.finalized = True\n",
        also=(
            (
                "instrumentors/tallyspan_instrumentors/_calls.py",
                "        if self.ended:\n            return\n        self.ended = True\n        if self.joined and",
                "        self.ended = True\n        if self.joined and",
            ),
        ),
        tests=(
            "tests/instrumentors/test_anthropic.py",
            "tests/instrumentors/test_ollama.py",
            "tests/instrumentors/test_langchain.py",
            "-k",
            "stream",
        ),
    ),
    Mutation(
        "streams",
        "parallel-tool-calls-merged",
        "instrumentors/tallyspan_instrumentors/openai/_extract_chat.py",
        'entry = item.tool_calls.setdefault(index if isinstance(index, int) else 0, [None, "", []])',
        'entry = item.tool_calls.setdefault(0, [None, "", []])',
        (STREAM_ENDS, "-k", "parallel"),
    ),
    Mutation(
        "streams",
        "sync-close-leaves-the-span-open",
        STREAMS,
        "        try:\n            self.__wrapped__.close()\n        finally:\n"
        "            self._tallyspan_finalize()\n\n\ndef _no_context_manager",
        "        self.__wrapped__.close()\n\n\ndef _no_context_manager",
        (STREAM_ENDS,),
    ),
    Mutation(
        "streams",
        "async-generator-aclose-leaves-the-span-open",
        STREAMS,
        "            await self.__wrapped__.aclose()\n        finally:\n            self._tallyspan_finalize()",
        "            await self.__wrapped__.aclose()\n        finally:\n            pass",
        ("tests/instrumentors",),
    ),
    Mutation(
        "streams",
        "with-exit-by-an-error-ends-the-span-ok",
        STREAMS,
        "            return self.__wrapped__.__exit__(exc_type, exc, traceback)\n        finally:\n"
        "            self._tallyspan_finalize(_exit_error(exc))",
        "            return self.__wrapped__.__exit__(exc_type, exc, traceback)\n        finally:\n"
        "            self._tallyspan_finalize()",
        ("tests/instrumentors",),
    ),
    Mutation(
        "streams",
        "async-with-exit-by-an-error-ends-the-span-ok",
        STREAMS,
        "            return await self.__wrapped__.__aexit__(exc_type, exc, traceback)\n        finally:\n"
        "            self._tallyspan_finalize(_exit_error(exc))",
        "            return await self.__wrapped__.__aexit__(exc_type, exc, traceback)\n        finally:\n"
        "            self._tallyspan_finalize()",
        ("tests/instrumentors",),
    ),
    Mutation(
        "streams",
        "collected-stream-keeps-its-span-open",
        STREAMS,
        "                state.finalize()  # once: a stream that ended before does nothing here",
        "                pass",
        ("tests/instrumentors",),
    ),
    Mutation(
        "streams",
        "time-to-first-chunk-taken-at-every-chunk",
        STREAMS,
        "            if self.first_item_at is None:\n                self.first_item_at = time.monotonic()",
        "            self.first_item_at = time.monotonic()",
        ("tests/instrumentors",),
    ),
    Mutation(
        "streams",
        "a-failed-stream-is-also-abandoned",
        STREAMS,
        "                error is None\n                and not self.exhausted",
        "                not self.exhausted",
        (STREAM_ENDS, "-k", "left_by_an_error"),
    ),
    Mutation(
        "streams",
        "ended-stream-keeps-its-chunks",
        STREAMS,
        "        accumulator, self.accumulator = self.accumulator, None",
        "        accumulator = self.accumulator",
        ("tests/instrumentors",),
    ),
    # --- delivery: the spool, the outbox, the OTLP session ----------------------------------------------------
    Mutation(
        "delivery",
        "unbalanced-run-with-status-ok-not-spooled",
        OTLP,
        "        or attributes.get(semconv.LEDGER_BALANCED) is False\n",
        "",
        (f"{DELIVERY}::test_the_run_span_of_unbalanced_books_is_spooled_even_with_status_ok",),
    ),
    Mutation(
        "delivery",
        "flush-true-after-losses-with-nothing-outstanding",
        OUTBOX,
        "            if not any(t <= ticket for t in self._outstanding):\n                return self._answer_flush()",
        "            if not any(t <= ticket for t in self._outstanding):\n                return True",
        (DELIVERY, "-k", "force_flush or loss"),
    ),
    Mutation(
        "delivery",
        "record-larger-than-the-spool-not-a-loss",
        OUTBOX,
        "                        self._losses += 1\n                        self._resolve([item.ticket])",
        "                        self._resolve([item.ticket])",
        (f"{DELIVERY}::test_a_record_larger_than_the_whole_spool_is_a_loss_force_flush_reports",),
    ),
    Mutation(
        "delivery",
        "retry-after-on-429-only",
        OTLP,
        "if status in (429, 503) else None",
        "if status == 429 else None",
        (DELIVERY, "-k", "retry_after"),
    ),
    Mutation(
        "delivery",
        "exporters-own-retry-before-retry-after",
        OTLP,
        "        if time.monotonic() < self._held_until:",
        "        if False:",
        (DELIVERY, "-k", "retry_after"),
    ),
    Mutation(
        "delivery",
        "shutdown-keeps-the-spools-rows",
        OUTBOX,
        "            self._spool.release()\n            self._spool.close()",
        "            self._spool.close()",
        (f"{DELIVERY}::test_shutdown_releases_the_spools_rows_for_the_next_process",),
    ),
    Mutation(
        "delivery",
        "spool-owner-kept-after-fork",
        SPOOL,
        "            self._db, self._pid = None, os.getpid()\n            self._owner = _owner_name()\n",
        "            self._db, self._pid = None, os.getpid()\n",
        (f"{DELIVERY}::test_a_forked_child_owns_only_the_rows_it_writes",),
    ),
    # --- the check engine ---------------------------------------------------------------------------------
    Mutation(
        "engine",
        "gateway-timeout-is-a-process-error",
        "src/tallyspan/_engine/_checks.py",
        r"|\b408\b|\b504\b",
        "",
        ("tests/core/test_checks.py", "-k", "classified"),
    ),
    Mutation(
        "engine",
        "process-error-checked-before-timeout",
        "src/tallyspan/_engine/_checks.py",
        "    if _TIMEOUT_ERROR.search(description) or isinstance(error, TimeoutError):\n"
        '        return _violation(ViolationType.TIMEOUT, f"the call failed with a timeout ({name})")\n'
        "    if _PROCESS_ERROR.search(description) or isinstance(error, ConnectionError):\n"
        '        return _violation(ViolationType.PROCESS_ERROR, f"the inference server failed ({name})")\n',
        "    if _PROCESS_ERROR.search(description) or isinstance(error, ConnectionError):\n"
        '        return _violation(ViolationType.PROCESS_ERROR, f"the inference server failed ({name})")\n'
        "    if _TIMEOUT_ERROR.search(description) or isinstance(error, TimeoutError):\n"
        '        return _violation(ViolationType.TIMEOUT, f"the call failed with a timeout ({name})")\n',
        ("tests/core/test_checks.py", "-k", "classified"),
    ),
    Mutation(
        "engine",
        "reasoning-cut-at-the-first-lone-closing-tag",
        "src/tallyspan/_engine/_refusal.py",
        "text = text[closing[-1].end() :]",
        "text = text[closing[0].end() :]",
        ("tests/core/test_refusal.py",),
    ),
    Mutation(
        "engine",
        "any-remark-before-a-decline-is-courtesy",
        "src/tallyspan/_engine/_refusal.py",
        '    r"\\s*(?:(?:それは|これは)[^。！？!?\\n]{0,16}"',
        '    r"\\s*(?:(?:[^。！？!?\\n]{0,16})"',
        ("tests/core/test_refusal.py", "-k", "remark_on_the_question"),
    ),
    Mutation(
        "engine",
        "an-objection-after-its-reason-declines",
        "src/tallyspan/_engine/_refusal.py",
        "if len(lead) > _REFUSAL_LEAD_CHARS or _JA_REASON.search(lead):",
        "if len(lead) > _REFUSAL_LEAD_CHARS:",
        ("tests/core/test_refusal.py", "-k", "remark_on_the_question"),
    ),
    Mutation(
        "engine",
        "a-restated-task-taken-for-a-new-one",
        "src/tallyspan/_engine/_relevance.py",
        "    if len(new) < _MIN_NEW_TASK_FEATURES:\n        return None\n",
        "",
        ("tests/core/test_relevance.py", "-k", "rewritten_about_new_material"),
    ),
    Mutation(
        "engine",
        "an-apology-hides-the-english-decline",
        "src/tallyspan/_engine/_refusal.py",
        """_EN_DECLINE.match(_EN_APOLOGY.sub("", sentence.lstrip("\\"'“ "), count=1))""",
        """_EN_DECLINE.match(sentence.lstrip("\\"'“ "))""",
        ("tests/core/test_refusal.py", "-k", "any_wording"),
    ),
    Mutation(
        "engine",
        "untagged-reasoning-judged-with-the-answer",
        "src/tallyspan/_engine/_refusal.py",
        "        if rest:\n            return rest\n",
        "",
        ("tests/core/test_refusal.py", "-k", "reasoning"),
    ),
    Mutation(
        "engine",
        "pattern-budget-on-the-wall-clock",
        "src/tallyspan/_contract/_patterns.py",
        "        now = time.thread_time()\n        self._unclocked_steps = 0",
        "        now = time.monotonic()\n        self._unclocked_steps = 0",
        ("tests/core/test_linear_patterns.py", "-k", "budget"),
    ),
    Mutation(
        "engine",
        "pattern-overshoots-the-budget",
        "src/tallyspan/_contract/_patterns.py",
        "timeout = min(self._per_pattern_s, remaining)",
        "timeout = self._per_pattern_s",
        ("tests/core/test_linear_patterns.py", "-k", "budget"),
    ),
    # --- the store and the CLI ------------------------------------------------------------------------------
    Mutation(
        "store",
        "prune-dates-a-trace-by-its-first-span",
        "src/tallyspan/_store/_store_prune.py",
        '" HAVING max(coalesce(end_unix_nano, start_unix_nano, 0)) < ?"',
        '" HAVING min(coalesce(end_unix_nano, start_unix_nano, 0)) < ?"',
        ("tests/cli/test_prune.py",),
    ),
    Mutation(
        "store",
        "prune-dates-a-trace-by-its-starts",
        "src/tallyspan/_store/_store_prune.py",
        '" HAVING max(coalesce(end_unix_nano, start_unix_nano, 0)) < ?"',
        '" HAVING max(coalesce(start_unix_nano, 0)) < ?"',
        ("tests/cli/test_prune.py",),
    ),
    Mutation(
        "cli",
        "export-types-mean-all-not-any",
        FAILURE_LOGS,
        'and (not self.types or not self.types.isdisjoint(record["violation_types"]))',
        'and (not self.types or self.types.issubset(record["violation_types"]))',
        ("tests/cli/test_failure_records.py",),
    ),
    Mutation(
        "cli",
        "diagnosis-types-mean-all-not-any",
        "src/tallyspan/cli/export.py",
        "and (not keep.types or not keep.types.isdisjoint(types))",
        "and (not keep.types or keep.types.issubset(types))",
        ("tests/cli/test_export.py", "-k", "two_types"),
    ),
    Mutation(
        "cli",
        "balanced-run-with-broken-protocol-not-exported",
        FAILURE_LOGS,
        "if books.balanced is not False and books.protocol_ok is not False:",
        "if books.balanced is not False:",
        ("tests/cli/test_failure_records.py",),
    ),
    Mutation(
        "cli",
        "span-failure-filtered-by-its-start",
        FAILURE_LOGS,
        "            at = span.end_unix_nano or span.start_unix_nano\n",
        "            at = span.start_unix_nano or span.end_unix_nano\n",
        ("tests/cli/test_failure_records.py",),
    ),
    Mutation(
        "cli",
        "span-failure-record-dated-by-its-start",
        FAILURE_LOGS,
        "        span.end_unix_nano or span.start_unix_nano,\n",
        "        span.start_unix_nano or span.end_unix_nano,\n",
        ("tests/cli/test_failure_records.py",),
    ),
    # --- processors -----------------------------------------------------------------------------------------
    Mutation(
        "processors",
        "violation-count-is-the-number-of-types",
        "processors/tallyspan_processors/_checks.py",
        "added[semconv.VIOLATION_COUNT] = len(result.violations)",
        "added[semconv.VIOLATION_COUNT] = len(result.violation_types)",
        ("tests/e2e/test_rotel_filter.py", "tests/processors/test_checks_processor.py"),
    ),
    Mutation(
        "processors",
        "worker-forwards-without-gathering",
        "processors/tallyspan_processors/_worker.py",
        "                        self._gather()  # the first span after a pause: let the next ones gather",
        "                        pass",
        ("tests/processors/test_worker.py", "-k", "gather or whole_batch"),
    ),
    Mutation(
        "processors",
        "worker-batch-one-span-short",
        "processors/tallyspan_processors/_worker.py",
        "elif queued >= self._batch_spans or (now := time.monotonic()) >= self._due:",
        "elif queued >= self._batch_spans - 1 or (now := time.monotonic()) >= self._due:",
        ("tests/processors/test_worker.py", "-k", "whole_batch"),
    ),
)


def _pytest(tests: tuple[str, ...], timeout_s: float) -> tuple[int, float]:
    """Run the tests in a fresh interpreter (its own bytecode cache: no stale .pyc); exit code, seconds."""
    with tempfile.TemporaryDirectory(prefix="semantic-mutation-") as cache:
        env = {**os.environ, "PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": "1"}
        started = time.monotonic()
        try:
            done = subprocess.run(
                # One process: xdist's workers stopped by -x end the run "interrupted" (exit 2).
                [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *tests],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout_s,
                check=False,
            )
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = -1  # a mutant that hangs its tests is caught as well
        return code, time.monotonic() - started


def _apply(mutation: Mutation) -> dict[Path, bytes]:
    """Make the mutation's edits; the original bytes of each file changed."""
    originals: dict[Path, bytes] = {}
    for file, old, new in mutation.edits:
        path = ROOT / file
        originals.setdefault(path, path.read_bytes())
        path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    return originals


def _misplaced(mutation: Mutation) -> str | None:
    """Why the mutation cannot be applied as written (its text is not found exactly once), or None."""
    for file, old, _ in mutation.edits:
        found = (ROOT / file).read_text(encoding="utf-8").count(old)
        if found != 1:
            return f"{mutation.name}: its text is found {found} times in {file}: update it"
    return None


def _stop(signum: int, frame: object) -> None:
    # SIGTERM (a timeout, a CI runner ending the job) kills without running ``finally``: it would leave a
    # mutation in the working tree. Raised as SystemExit, it runs the restore like Ctrl-C does.
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--area", action="append", help="only this area (repeatable)")
    parser.add_argument("--name", action="append", help="only this mutation (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per test run (default 600)")
    options = parser.parse_args()
    chosen = [
        m
        for m in MUTATIONS
        if (not options.area or m.area in options.area) and (not options.name or m.name in options.name)
    ]
    if options.list:
        for mutation in chosen:
            print(f"{mutation.area:<11} {mutation.name:<52} {mutation.file}")
        return 0
    if not chosen:
        print("no mutation matches", file=sys.stderr)
        return 2
    for mutation in chosen:  # every edit must still apply before any runs
        problem = _misplaced(mutation)
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
    clean: dict[tuple[str, ...], int] = {}
    results: Counter[tuple[str, str]] = Counter()
    for mutation in chosen:
        if mutation.tests not in clean:
            clean[mutation.tests], _ = _pytest(mutation.tests, options.timeout)
        if clean[mutation.tests] != 0:
            verdict, took = "clean-fails", 0.0
        else:
            originals: dict[Path, bytes] = {}
            try:
                originals = _apply(mutation)
                code, took = _pytest(mutation.tests, options.timeout)
            finally:
                for path, original in originals.items():
                    path.write_bytes(original)
            verdict = "survived" if code == 0 else "caught" if code in (1, -1) else f"error (exit {code})"
        results[(mutation.area, verdict)] += 1
        print(f"{verdict:<12} {mutation.area:<11} {mutation.name}  ({took:.0f} s)", flush=True)
    print()
    for area in dict.fromkeys(m.area for m in chosen):
        caught = results[(area, "caught")]
        total = sum(n for (a, _), n in results.items() if a == area)
        print(f"{area:<11} caught {caught} of {total}")
    caught = sum(n for (_, verdict), n in results.items() if verdict == "caught")
    print(f"{'all':<11} caught {caught} of {len(chosen)}")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
