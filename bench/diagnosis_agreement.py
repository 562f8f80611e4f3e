"""How often the rule-based diagnosis names the labelled failing step and agent on public failure data.

Runs the diagnosis of ``tallyspan export --format diagnosis`` (``tallyspan._datasets._diagnosis``) on
failed runs labelled by people or by construction, without tuning anything to them:

* AgentRx tau-retail (``../shared/data/agentrx``): 29 failed runs of a retail agent (OpenAI tool-call
  format), each failure labelled with its step (the message ``index``) and agent; one is the root cause.
* Who&When (``../shared/data/who-and-when``): 184 failed multi-agent runs (58 Magentic-One "Hand-Crafted",
  126 AG2 "Algorithm-Generated"), each labelled with the decisive step (history index) and agent.

Each message becomes a step: an agent's message is a model call (``gen_ai.agent.name`` = the agent,
checked against the default contract: no refusal, no leaked reasoning); a tool result (tau ``tool``
messages, Who&When's computer terminal) is a tool call, failed when its text says so (``Error...``,
a non-zero exit code, a traceback) in the run of the agent that called it. The data has no action log,
so there is no ledger to reconcile. "Step within 1" allows for the labels naming the message that
asked for a failed call while the diagnosis names the call.

Two readings: "verdicts" is what the export decides on its own (a step with a violation); "failed
run" adds that the run is known to have failed, so failed calls name the step when no verdict does.
The baseline names the first agent step. Prints the tables; no threshold, nothing asserted.

Usage::

    python bench/diagnosis_agreement.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tallyspan import Contract, check, semconv
from tallyspan._datasets._diagnosis import diagnose
from tallyspan._store._store_traces import SpanData, ViolationData

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
DEFAULT_CONTRACT = Contract()
_FAILED_TOOL = re.compile(
    r"^Error|exitcode: [1-9]|execution failed|Traceback \(most recent call last\)", re.M
)


@dataclass(frozen=True)
class Message:
    """One message of a labelled run: its position as the labels count it, its agent, its kind."""

    position: int
    agent: str | None
    kind: str  # "model", "tool" or "other" (the user's question, a system prompt: not a step)
    text: str


@dataclass(frozen=True)
class Labelled:
    """A failed run and its labels."""

    key: str
    dataset: str
    messages: list[Message]
    step: int
    agent: str
    category: str
    all_steps: tuple[int, ...]


@dataclass(frozen=True)
class Prediction:
    step: int | None
    agent: str | None
    evidence: tuple[str, ...]


def _spans(run: Labelled) -> tuple[SpanData, list[SpanData], dict[str, int]]:
    """The run as spans: one invoke_agent root, one span per step, one second apart."""
    trace = f"{abs(hash(run.key)):032x}"[:32]
    root = SpanData(trace, "f" * 16, None, f"invoke_agent {run.key}", semconv.OPERATION_INVOKE_AGENT,
                    0, 10**12, "UNSET", is_run=True)  # fmt: skip
    spans: list[SpanData] = []
    position_of: dict[str, int] = {}
    for n, message in enumerate(run.messages):
        if message.kind == "other":
            continue
        span_id = f"{n + 1:016x}"
        start = (n + 1) * 10**9
        if message.kind == "tool":
            failed = bool(_FAILED_TOOL.search(message.text))
            span = SpanData(trace, span_id, root.span_id, "execute_tool", semconv.OPERATION_EXECUTE_TOOL,
                            start, start + 1, "ERROR" if failed else "UNSET", agent_name=message.agent,
                            tool_name="tool", error_type="ToolError" if failed else None)  # fmt: skip
        else:
            result = check(message.text, DEFAULT_CONTRACT)
            violations = tuple(
                ViolationData(v.type.value, v.failure_class.value, v.detail) for v in result.violations
            )
            span = SpanData(trace, span_id, root.span_id, f"chat {message.agent}", semconv.OPERATION_CHAT,
                            start, start + 1, "UNSET", agent_name=message.agent, violations=violations)  # fmt: skip
        spans.append(span)
        position_of[span_id] = message.position
    return root, spans, position_of


def predict(run: Labelled, known_failed: bool) -> Prediction:
    root, spans, position_of = _spans(run)
    if known_failed:
        root = replace(root, error_type="TaskFailed")
    diagnosed = diagnose(root, spans, {})
    if diagnosed is None:
        return Prediction(None, None, ())
    steps, diagnosis = diagnosed
    evidence = tuple(e["type"] for e in diagnosis["evidence"] if e["span_id"] != root.span_id)
    if diagnosis["step"] is None:
        return Prediction(None, None, evidence)
    return Prediction(position_of[steps[diagnosis["step"]].span_id], diagnosis["agent"], evidence)


def baseline(run: Labelled) -> Prediction:
    first = next((m for m in run.messages if m.kind == "model"), None)
    return Prediction(first.position if first else None, first.agent if first else None, ())


# --- the data -------------------------------------------------------------------------------------


def _tool_calls(raw: Any) -> list[Any]:
    if isinstance(raw, list):
        return raw
    if isinstance(raw, str) and raw not in ("", "None"):
        parsed = ast.literal_eval(raw)  # the file spells them as Python reprs
        return parsed if isinstance(parsed, list) else []
    return []


def agentrx(data: Path) -> list[Labelled]:
    runs = json.loads((data / "agentrx" / "tau_retail" / "tau_dataset_failed.json").read_text())
    labels = {
        g["trajectory_id"]: g
        for g in json.loads((data / "agentrx" / "ground_truth" / "tau_ground_truth.json").read_text())
    }
    found = []
    for run in runs:
        label = labels.get(run["task_id"])
        if label is None:
            continue
        messages = []
        for m in run["traj"]:
            text = "" if m.get("content") in (None, "None") else str(m["content"])
            role = m["role"]
            if role == "tool":
                kind, agent = "tool", "Assistant"
            elif role == "assistant":
                kind, agent = "model", "Assistant"
                calls = _tool_calls(m.get("tool_calls"))
                text = text or " ".join(c["function"]["name"] for c in calls if isinstance(c, dict))
            elif role == "user":
                kind, agent = "model", "User"  # tau-bench's user is a simulated (LLM) agent
            else:
                kind, agent = "other", None
            messages.append(Message(int(m["index"]), agent, kind, text))
        root = next(f for f in label["failures"] if f["failure_id"] == label["root_cause"]["failure_id"])
        found.append(
            Labelled(
                f"tau-{run['task_id']}",
                "AgentRx tau-retail",
                messages,
                int(root["step_number"]),
                root["failed_agent"],
                root["failure_category"],
                tuple(int(f["step_number"]) for f in label["failures"]),
            )
        )
    return found


def _who_agent(message: dict[str, Any]) -> str:
    name = message.get("name") or message.get("role") or ""
    return re.sub(r"\s*\(.*\)$", "", str(name)).strip()


def who_and_when(data: Path) -> list[Labelled]:
    found = []
    for folder in ("Hand-Crafted", "Algorithm-Generated"):
        for path in sorted((data / "who-and-when" / folder).glob("*.json")):
            run = json.loads(path.read_text())
            messages = []
            for position, m in enumerate(run["history"]):
                agent = _who_agent(m)
                text = str(m.get("content") or "")
                if agent.lower() in ("human", "user") and m.get("role") == "human":
                    kind = "other"
                elif agent.replace("_", "").lower() == "computerterminal":
                    # the terminal runs the code an agent wrote: its span sits in that agent's run
                    kind, agent = (
                        "tool",
                        next((m.agent for m in reversed(messages) if m.kind == "model"), agent),
                    )
                else:
                    kind = "model"
                messages.append(Message(position, agent, kind, text))
            found.append(
                Labelled(
                    f"{folder}/{path.stem}",
                    f"Who&When {folder}",
                    messages,
                    int(run["mistake_step"]),
                    str(run["mistake_agent"]),
                    folder,
                    (int(run["mistake_step"]),),
                )
            )
    return found


# --- the tables -----------------------------------------------------------------------------------


def _same_agent(a: str | None, b: str) -> bool:
    def norm(name: str) -> str:
        return re.sub(r"[^a-z]", "", name.lower())

    return a is not None and norm(a) == norm(b)


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f} %)" if d else "0/0"


def report(name: str, runs: Sequence[Labelled]) -> None:
    print(f"\n## {name}: {len(runs)} failed runs\n")
    print("| reading | says something | step = label | step within 1 | step = any labelled failure "
          "| step before label | agent = label |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for reading, predictions in (
        ("verdicts", [predict(r, False) for r in runs]),
        ("failed run", [predict(r, True) for r in runs]),
        ("baseline: first agent step", [baseline(r) for r in runs]),
    ):
        said = [(r, p) for r, p in zip(runs, predictions, strict=True) if p.step is not None]
        exact = sum(p.step == r.step for r, p in said)
        near = sum(p.step is not None and abs(p.step - r.step) <= 1 for r, p in said)
        any_label = sum(p.step in r.all_steps for r, p in said)
        early = sum(p.step is not None and p.step < r.step for r, p in said)
        agent = sum(_same_agent(p.agent, r.agent) for r, p in said)
        print(f"| {reading} | {_pct(len(said), len(runs))} | {_pct(exact, len(runs))} | {_pct(near, len(runs))} | "
              f"{_pct(any_label, len(runs))} | {_pct(early, len(runs))} | {_pct(agent, len(runs))} |")  # fmt: skip
    print(
        '\nBy labelled category (reading "failed run"): runs, says something, step = label, agent = label\n'
    )
    by_category: dict[str, list[tuple[Labelled, Prediction]]] = defaultdict(list)
    for run in runs:
        by_category[run.category].append((run, predict(run, True)))
    for category, pairs in sorted(by_category.items(), key=lambda item: -len(item[1])):
        said = [(r, p) for r, p in pairs if p.step is not None]
        step = sum(p.step == r.step for r, p in said)
        agent = sum(_same_agent(p.agent, r.agent) for r, p in said)
        print(f"- {category}: {len(pairs)} runs, {len(said)} with a finding, {step} step, {agent} agent")
    fired: Counter[str] = Counter()
    for run in runs:
        fired.update(set(predict(run, True).evidence))
    print(f"\nFindings (runs with at least one): {dict(fired.most_common()) or 'none'}")


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    options = parser.parse_args(list(argv) if argv is not None else None)
    report("AgentRx tau-retail", agentrx(options.data))
    who = who_and_when(options.data)
    report("Who&When (all)", who)
    for dataset in ("Who&When Hand-Crafted", "Who&When Algorithm-Generated"):
        report(dataset, [r for r in who if r.dataset == dataset])


if __name__ == "__main__":
    main()
