"""The diagnosis on real agent runs: tau-bench's 200 historical airline trajectories, replayed through the
instrumented ``openai`` client with a seeded mutation of each run's action log.

The replay is the agent loop: each real tool call is requested by a model turn (the recorded arguments
and id) and executed through ``@tallyspan.tool`` (a recorded ``Error...`` result is raised); after each
call the model asks for the ``log_action`` calls the agent's log holds for it; the recorded text turns
are model turns too. Each run gets one known mutation of its log (the mutations of
``test_ledger_tau_bench``, taking turns over the runs); the exported diagnosis of every mutated run must
name as first failing step the step that carries the mutation (the unlogged tool call, or the model turn
that asked for the wrong log entry), and no run without one may be exported. Nothing is tuned to the
data: no contract, the default log tool.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner
from tests.conftest import MakeInstrumented
from tests.core.test_ledger_tau_bench import Log, Run, ToolError, _mutate, _runs, _truthful_log

import tallyspan
from tallyspan.cli import main
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

pytestmark = pytest.mark.data

MUTATIONS = ("drop", "duplicate", "invent", "flip", "rename", "move")
LOG_TOOL = "log_action"


@dataclass
class Replayed:
    """What the replay of one run expects the diagnosis to say."""

    run_name: str
    mutation: str
    step: int | None
    """Index of the step carrying the mutation; None for an unmutated run."""


def _texts(shared_data: Path) -> list[list[str]]:
    """The recorded text turns of each run (assistant messages without tool calls)."""
    raw = json.loads((shared_data / "tau-bench-historical" / "gpt-4o-airline.json").read_text())
    return [
        [
            m["content"]
            for m in run["traj"]
            if m["role"] == "assistant" and not m.get("tool_calls") and m["content"]
        ]
        for run in raw
    ]


def _mutated_index(run: Run, log: list[Log], mutation: str) -> int:
    """The index (into the run's calls) after which the mutated log entry sits, or the dropped call."""
    truthful = {(e.after, e.call_id, e.tool_name, e.outcome) for e in _truthful_log(run)}
    if mutation == "drop":
        logged = {e.call_id for e in log}
        return next(i for i, c in enumerate(run.calls) if c.call_id not in logged)
    counts = Counter((e.after, e.call_id, e.tool_name, e.outcome) for e in log)
    for entry in log:
        key = (entry.after, entry.call_id, entry.tool_name, entry.outcome)
        if key not in truthful or counts[key] > 1:
            return entry.after
    raise AssertionError(mutation)


@pytest.mark.slow  # replays 200 real runs through the whole chain: a run at scale, for CI (-m slow)
def test_the_first_failing_step_is_the_mutated_one(
    shared_data: Path, make_instrumented: MakeInstrumented, db_path: Path, tmp_path: Path
) -> None:
    runs, texts = _runs(shared_data), _texts(shared_data)
    assert len(runs) == 200
    instrumented = make_instrumented(instrumentors=["tallyspan_openai"])
    expected: dict[str, Replayed] = {}
    tools: dict[str, Any] = {}

    def execute(recorded: str, tool_call_id: str, **arguments: Any) -> str:
        if recorded.startswith("Error"):
            raise ToolError(recorded)
        return recorded

    with (
        OpenAICompatibleServer() as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):

        def model_turn(reply: ScriptedReply) -> None:
            server.add_reply(reply)
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "next"}])

        for number, run in enumerate(runs):
            mutation = MUTATIONS[number % len(MUTATIONS)]
            mutated = _mutate(run, mutation)
            if mutated is None:
                mutation, mutated = "none", _mutate(run, "none")
            assert mutated is not None
            log, _ = mutated
            target = _mutated_index(run, log, mutation) if mutation != "none" else None
            name = f"tau-bench {number}"
            step, wanted = 0, None
            with tallyspan.run(name):
                for i, call in enumerate(run.calls):
                    model_turn(
                        ScriptedReply(tool_calls=[ScriptedToolCall(call.name, call.arguments, call.call_id)])
                    )
                    step += 1
                    if call.name not in tools:
                        tools[call.name] = tallyspan.tool(name=call.name)(execute)
                    with contextlib.suppress(ToolError):
                        tools[call.name](call.result, tool_call_id=call.call_id, **call.arguments)
                    if mutation == "drop" and i == target:
                        wanted = step  # the unlogged tool call
                    step += 1
                    entries = [e for e in log if e.after == i]
                    if entries:
                        requested = [
                            ScriptedToolCall(
                                LOG_TOOL,
                                {
                                    "call_id": e.call_id,
                                    "tool_name": e.tool_name,
                                    "claimed_outcome": e.outcome,
                                },
                                f"log_{i}_{n}",
                            )
                            for n, e in enumerate(entries)
                        ]
                        model_turn(ScriptedReply(tool_calls=requested))
                        if mutation != "drop" and i == target:
                            wanted = step  # the model turn that asked for the wrong entry
                        step += 1
                for text in texts[number]:
                    model_turn(ScriptedReply(text=text))
                    step += 1
            expected[name] = Replayed(name, mutation, wanted)
    assert instrumented.instrumentation.force_flush(120_000)

    out = tmp_path / "runs.jsonl"
    result = CliRunner().invoke(
        main, ["--db", str(db_path), "export", "--format", "diagnosis", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    records = {r["run"]["name"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    mutated_runs = {name for name, e in expected.items() if e.mutation != "none"}
    assert set(records) == mutated_runs  # every mutated run, and only those, is a failed run
    wrong = {
        name: (expected[name].mutation, expected[name].step, record["diagnosis"]["step"])
        for name, record in records.items()
        if record["diagnosis"]["step"] != expected[name].step
    }
    assert wrong == {}
    for name, record in records.items():
        diagnosis = record["diagnosis"]
        assert diagnosis["agent"] == name
        assert diagnosis["failure_class"] == "ledger_discrepancy"
        step = record["steps"][diagnosis["step"]]
        assert step["kind"] == ("tool_call" if expected[name].mutation == "drop" else "model_call")
    per_mutation = Counter(expected[name].mutation for name in records)
    # how much real data the check exercised (a run whose calls allow no such mutation keeps its log)
    assert per_mutation == {"rename": 32, "duplicate": 31, "drop": 30, "invent": 29, "move": 26, "flip": 8}
