"""The ledger on real agent runs: tau-bench's historical gpt-4o airline trajectories (200 runs, 1,164 calls).

Each run's real tool calls are replayed, in order and with their recorded ids, through
``@tallyspan.tool`` functions that return the recorded results (a result starting with ``Error`` is
raised, so the call is observed as failed). The agent side logs each call right after it, through a
``log_action`` tool on even runs and ``tallyspan.ledger.claim()`` on odd ones, truthfully; then one known
mutation is applied to that log and the run span must carry exactly the expected discrepancies.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan
from tallyspan import semconv

pytestmark = pytest.mark.data

MUTATIONS = ("none", "drop", "duplicate", "invent", "flip", "rename", "move")


class ToolError(Exception):
    """The recorded tool result was an error."""


@dataclass(frozen=True)
class Call:
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: str

    @property
    def failed(self) -> bool:
        return self.result.startswith("Error")


@dataclass(frozen=True)
class Log:
    """One entry the agent writes: after call number ``after`` (an index into the run's calls)."""

    after: int
    call_id: str
    tool_name: str
    outcome: str


@dataclass(frozen=True)
class Run:
    key: str
    calls: tuple[Call, ...]


def _runs(shared_data: Path) -> list[Run]:
    raw = json.loads((shared_data / "tau-bench-historical" / "gpt-4o-airline.json").read_text())
    runs = []
    for number, run in enumerate(raw):
        requested = [
            (tool_call["id"], tool_call["function"])
            for message in run["traj"]
            for tool_call in message.get("tool_calls") or ()
        ]
        answered = [message for message in run["traj"] if message["role"] == "tool"]
        # ids are reused within some runs, so pair each request with its answer by position, as the traj does
        assert [call_id for call_id, _ in requested] == [message["tool_call_id"] for message in answered]
        calls = tuple(
            Call(call_id, function["name"], json.loads(function["arguments"]), message["content"])
            for (call_id, function), message in zip(requested, answered, strict=True)
        )
        runs.append(Run(f"{number}-task{run['task_id']}-trial{run['trial']}", calls))
    return runs


def _truthful_log(run: Run) -> list[Log]:
    return [
        Log(i, c.call_id, c.name, semconv.OUTCOME_FAILED if c.failed else semconv.OUTCOME_SUCCEEDED)
        for i, c in enumerate(run.calls)
    ]


def _unique(run: Run, index: int) -> bool:
    return sum(1 for c in run.calls if c.call_id == run.calls[index].call_id) == 1


def _mutate(run: Run, mutation: str) -> tuple[list[Log], list[tuple[str, str | None]]] | None:
    """The agent's log after ``mutation`` and the discrepancies (type, call id) it must cause; None: n/a."""
    log = _truthful_log(run)
    n = len(run.calls)
    if mutation == "none":
        return log, []
    # mutate a call whose id is unique in the run, so the expectation does not depend on id reuse
    candidates = [i for i in range(n) if _unique(run, i)]
    if mutation == "flip":
        candidates = [i for i in candidates if run.calls[i].failed]
    if mutation == "move":
        candidates = [i for i in candidates if i + 1 < n]
    if not candidates:
        return None
    k = candidates[len(candidates) // 2]
    target = log[k]
    if mutation == "drop":
        del log[k]
        kind = "unlogged_failure" if run.calls[k].failed else "unlogged_call"
        expected: list[tuple[str, str | None]] = [(kind, target.call_id)]
        if n == 1:
            expected.append(("ledger_missing", None))
        return log, expected
    if mutation == "duplicate":
        log.insert(k + 1, target)
        return log, [("duplicate_log", target.call_id)]
    if mutation == "invent":
        log.insert(k + 1, Log(k, "call_invented_by_the_agent", "issue_refund", semconv.OUTCOME_SUCCEEDED))
        # The id is the agent's own words and names no observed call: with capture off it stays in
        # the process (the discrepancy carries the placeholder).
        return log, [("phantom_log", semconv.LEDGER_UNOBSERVED)]
    if mutation == "flip":
        log[k] = replace(target, outcome=semconv.OUTCOME_SUCCEEDED)
        return log, [("mismatched_result", target.call_id)]
    if mutation == "rename":
        log[k] = replace(target, tool_name=f"{target.tool_name}_v2")
        return log, [("mismatched_result", target.call_id)]
    if mutation == "move":
        del log[k]
        log.insert(k + 1, replace(target, after=k + 1))  # logged after the next call: late
        return log, [("out_of_order_log", target.call_id)]
    raise AssertionError(mutation)


def _replay(run: Run, log: list[Log], *, via_tool: bool) -> None:
    @tallyspan.tool
    def log_action(
        call_id: str, tool_name: str, claimed_outcome: str, summary: str, tool_call_id: str
    ) -> str:
        return "logged"

    tools: dict[str, Any] = {}
    for name in {c.name for c in run.calls}:

        def execute(recorded: str, tool_call_id: str, **arguments: Any) -> str:
            if recorded.startswith("Error"):
                raise ToolError(recorded)
            return recorded

        tools[name] = tallyspan.tool(name=name)(execute)

    with tallyspan.run(f"tau-bench {run.key}"):
        for i, call in enumerate(run.calls):
            with contextlib.suppress(ToolError):
                tools[call.name](call.result, tool_call_id=call.call_id, **call.arguments)
            for n, entry in enumerate(e for e in log if e.after == i):
                if via_tool:
                    log_action(
                        entry.call_id,
                        entry.tool_name,
                        entry.outcome,
                        f"did {entry.tool_name}",
                        tool_call_id=f"log_{i}_{n}",
                    )
                else:
                    tallyspan.ledger.claim(
                        entry.call_id, entry.tool_name, entry.outcome, f"did {entry.tool_name}"
                    )


def _run_spans(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    prefix = "invoke_agent tau-bench "
    return {s.name[len(prefix) :]: s for s in exporter.get_finished_spans() if s.name.startswith(prefix)}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_real_runs_with_a_known_mutation_give_exactly_the_expected_discrepancies(
    mutation: str,
    shared_data: Path,
    instrumented: tallyspan.Instrumentation,
    span_exporter: InMemorySpanExporter,
) -> None:
    runs = _runs(shared_data)
    assert len(runs) == 200
    assert sum(len(r.calls) for r in runs) == 1164
    expected: dict[str, list[tuple[str, str | None]]] = {}
    for number, run in enumerate(runs):
        mutated = _mutate(run, mutation)
        if mutated is None:
            continue
        log, expected[run.key] = mutated
        _replay(run, log, via_tool=number % 2 == 0)
    assert instrumented.force_flush(60_000) is True
    spans = _run_spans(span_exporter)
    assert set(spans) == set(expected)
    for key, wanted in expected.items():
        attributes = spans[key].attributes or {}
        found = [
            (
                str((e.attributes or {})[semconv.LEDGER_DISCREPANCY_TYPE]),
                (e.attributes or {}).get(semconv.LEDGER_CALL_ID),
            )
            for e in spans[key].events
            if e.name == semconv.EVENT_LEDGER_DISCREPANCY
        ]
        assert Counter(found) == Counter(wanted), key
        types = tuple(sorted({t for t, _ in wanted}))
        assert attributes.get(semconv.LEDGER_DISCREPANCY_TYPES, ()) == types, key
        assert attributes[semconv.LEDGER_BALANCED] is (not types or types == ("out_of_order_log",)), key
        assert attributes[semconv.LEDGER_PROTOCOL_OK] is (mutation != "move"), key
    # how much real data each mutation exercised
    exercised = {
        "none": 200,
        "drop": 182,
        "duplicate": 182,
        "invent": 182,
        "flip": 34,
        "rename": 182,
        "move": 164,
    }
    assert len(expected) == exercised[mutation]
    assert tallyspan.stats().get("dropped.spans", 0) == 0


def test_reused_call_ids_in_real_runs_still_balance(
    shared_data: Path, instrumented: tallyspan.Instrumentation, span_exporter: InMemorySpanExporter
) -> None:
    runs = [r for r in _runs(shared_data) if len({c.call_id for c in r.calls}) < len(r.calls)]
    assert len(runs) >= 10  # the data reuses ids within a run: a real-world case the pairing must survive
    for run in runs:
        _replay(run, _truthful_log(run), via_tool=True)
    instrumented.force_flush(60_000)
    spans = _run_spans(span_exporter)
    assert len(spans) == len(runs)
    assert all((s.attributes or {})[semconv.LEDGER_BALANCED] is True for s in spans.values())
    assert all((s.attributes or {})[semconv.LEDGER_PROTOCOL_OK] is True for s in spans.values())
