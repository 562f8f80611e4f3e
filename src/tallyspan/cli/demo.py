"""``tallyspan demo``: an instrumented agent workflow against a scripted local model, then the report.

The workflow: for each department, ``weekly-report-agent`` fetches the week's figures through tools,
logs each tool call through the ``log_action`` tool (double-entry ledger), and writes the weekly report
in Japanese under the ``weekly_report`` stage, whose contract ships in ``tallyspan/_demo_data``. The
model is a local OpenAI-compatible server on 127.0.0.1 replaying realistic outputs
(``_demo_data/weekly_reports.json``), some of them failing deliverables. No network, no API key.

The demo uses whatever parts of tallyspan are installed: without the OpenAI instrumentor, the checks
or the ledger it still runs, and says what was missing.

Each run starts from a fresh store, so a rerun shows the same report: by default a store of its own,
``./.tallyspan/demo.db`` (never the app's), else the one ``--db`` or ``TALLYSPAN_DB`` names. The last
demo's store there is replaced; a store holding anything else (another service's spans, another
agent's books, a file not ours) is refused and left as it is.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider

import tallyspan
from tallyspan._errors import TallyspanError
from tallyspan._store._store_queries import Report, open_store
from tallyspan._store._store_schema import LEDGER_RECONCILIATIONS, SPANS
from tallyspan.cli._render import emit
from tallyspan.cli._state import CliState, pass_state
from tallyspan.cli.report import build_report, format_report

if TYPE_CHECKING:
    import openai

__all__ = ["DemoResult", "command", "format_demo", "load_script", "run_demo"]

DATA_DIR: Final = resources.files(tallyspan.__name__).joinpath("_demo_data")
"""The demo's script and contracts, shipped inside the package."""
CONTRACTS_FILE: Final = "contracts.yaml"
SCRIPT_FILE: Final = "weekly_reports.json"
SERVICE: Final = "tallyspan-demo"
LOG_TOOL: Final = "log_action"
MAX_TOOL_TURNS: Final = 10
"""The agent's tool loop stops after this many turns, as a real agent's would."""
INSTRUMENTORS: Final = ("tallyspan_openai",)
"""The demo talks to an OpenAI-compatible server only; instrumenting other libraries would just cost time."""
INSTALL_HINT: Final = "`tallyspan demo` needs the openai package: pip install 'tallyspan[openai]'"
DEMO_STORE: Final = Path(".tallyspan", "demo.db")
"""The demo's own store when the user names none: the app's default store is never the demo's."""


class ToolUnavailableError(RuntimeError):
    """A demo tool whose backing service is down (the script says so)."""


@dataclass(frozen=True)
class DemoResult:
    """What the demo did and the report of the store it wrote."""

    store: str
    model_url: str
    agent: str
    runs: int
    instrumented: list[str]
    components: list[str]
    notes: list[str]
    report: Report = field(repr=False)


def load_script() -> dict[str, Any]:
    """The scripted workflow shipped with tallyspan (``_demo_data/weekly_reports.json``)."""
    text = DATA_DIR.joinpath(SCRIPT_FILE).read_text(encoding="utf-8")
    script: dict[str, Any] = json.loads(text)
    return script


def run_demo(db_path: Path) -> DemoResult:
    """Run the workflow fully instrumented, writing to the store at ``db_path``; return its report.

    Raises:
        TallyspanError: ``openai`` is not installed, or tallyspan is already instrumented in this process.
    """
    try:
        import openai
    except ImportError as exc:
        raise TallyspanError(INSTALL_HINT) from exc
    from tallyspan.testing import OpenAICompatibleServer

    if tallyspan.instrumentation() is not None:
        raise TallyspanError(
            "tallyspan is already instrumented in this process; the demo needs its own set-up"
        )
    script = load_script()
    _start_afresh(db_path, str(script["agent"]))
    notes: list[str] = []
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: SERVICE}))
    try:
        with _instrumented(provider, db_path, notes) as active:
            with OpenAICompatibleServer(replies=_replies(script)) as server:
                model_url = server.base_url
                with openai.OpenAI(base_url=server.base_url, api_key="demo", max_retries=0) as client:
                    for run in script["runs"]:
                        _run_agent(client, script, run)
            active.force_flush()
            instrumented = sorted(type(item).__name__ for item in active.instrumentors)
            components = list(active.components)
    finally:
        provider.shutdown()
    if not instrumented:
        notes.append("the OpenAI instrumentor is not installed: model calls were not traced")
    for part, what in (("checks", "deliverables were not checked"), ("ledger", "the books were not kept")):
        if part not in components:
            notes.append(f"the {part} processor is not installed: {what}")
    return DemoResult(
        store=str(db_path),
        model_url=model_url,
        agent=str(script["agent"]),
        runs=len(script["runs"]),
        instrumented=instrumented,
        components=components,
        notes=notes,
        report=build_report(db_path),
    )


def _start_afresh(db_path: Path, agent: str) -> None:
    """Delete the last demo's store at ``db_path`` (and its journal files), so the run starts from none.

    Raises:
        TallyspanError: the store holds more than a demo's spans and books (it is left untouched); also
            ``NotAStoreError`` (a ``ConfigError``) for a file that is not a tallyspan store.
    """
    if not db_path.exists():
        return
    with open_store(db_path) as db:
        spans = db.execute(f"SELECT COUNT(*) FROM {SPANS} WHERE service_name IS NOT ?", (SERVICE,))
        runs = db.execute(f"SELECT COUNT(*) FROM {LEDGER_RECONCILIATIONS} WHERE run_name IS NOT ?", (agent,))
        foreign = spans.fetchone()[0] + runs.fetchone()[0]
    if foreign:
        raise TallyspanError(
            f"{db_path} holds more than a demo's spans, so the demo leaves it alone (each demo starts "
            "from a fresh store and replaces only the last demo's): pass --db with a path of its own"
        )
    for path in (db_path, *(db_path.with_name(db_path.name + suffix) for suffix in ("-wal", "-shm"))):
        path.unlink(missing_ok=True)


@contextmanager
def _instrumented(
    provider: TracerProvider, db_path: Path, notes: list[str]
) -> Iterator[tallyspan.Instrumentation]:
    with resources.as_file(DATA_DIR.joinpath(CONTRACTS_FILE)) as contracts:
        try:
            active = tallyspan.instrument(
                contracts=contracts, tracer_provider=provider, store=db_path, instrumentors=INSTRUMENTORS
            )
        except ImportError:  # this build has no contract engine yet: run with the default checks
            notes.append("the contract engine is not installed: the demo contracts were not loaded")
            active = tallyspan.instrument(
                tracer_provider=provider, store=db_path, instrumentors=INSTRUMENTORS
            )
    try:
        yield active
    finally:
        tallyspan.uninstrument()


def _replies(script: Mapping[str, Any]) -> list[Any]:
    """The model's replies in the order the agent asks for them.

    Per run: each tool call, followed by its ``log_action`` when the script has the agent log it; then
    a short "ready" answer that ends the tool loop; then the deliverable (with its reasoning, if any).
    """
    from tallyspan.testing import ScriptedReply, ScriptedToolCall

    replies: list[Any] = []
    for run in script["runs"]:
        for call in run["tool_calls"]:
            requested = ScriptedToolCall(call["name"], call["arguments"], call["call_id"])
            replies.append(ScriptedReply(tool_calls=[requested]))
            if call["logged"]:
                log = ScriptedToolCall(LOG_TOOL, _log_arguments(call), f"{call['call_id']}_log")
                replies.append(ScriptedReply(tool_calls=[log]))
        replies.append(ScriptedReply(text=script["ready_reply"]))
        replies.append(ScriptedReply(text=run["report"], reasoning=run["reasoning"]))
    return replies


def _log_arguments(call: Mapping[str, Any]) -> dict[str, str]:
    return {
        "call_id": call["call_id"],
        "tool_name": call["name"],
        "claimed_outcome": call["claimed_outcome"],
        "summary": call["summary"],
    }


def _tools(run: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    """The run's tools, traced by ``@tallyspan.tool``; they answer what the script says."""
    scripted = {call["call_id"]: call for call in run["tool_calls"]}

    def answer(tool_call_id: str, **arguments: Any) -> Any:
        entry = scripted[tool_call_id]
        if "error" in entry:
            raise ToolUnavailableError(entry["error"])
        return entry["result"]

    return {name: tallyspan.tool(name=name)(answer) for name in {call["name"] for call in run["tool_calls"]}}


def _run_agent(client: openai.OpenAI, script: Mapping[str, Any], run: Mapping[str, Any]) -> None:
    """One agent run: a tool loop (calls and their ``log_action`` entries), then the report in its stage."""
    model, tools = script["model"], script["tools"]
    messages: list[Any] = [
        {"role": "system", "content": script["system_prompt"]},
        {"role": "user", "content": script["user_prompt"].format(department=run["department"])},
    ]
    functions = _tools(run)
    with tallyspan.run(script["agent"]):
        for _turn in range(MAX_TOOL_TURNS):
            message = (
                client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
            )
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break  # the model has what it needs
            for call in message.tool_calls:
                if call.type != "function":
                    continue
                arguments = json.loads(call.function.arguments)
                if call.function.name == LOG_TOOL:
                    # A claim about an action, not an action: the ledger reads it from the model's reply.
                    content = "記録しました"
                else:
                    try:
                        content = json.dumps(functions[call.function.name](tool_call_id=call.id, **arguments))
                    except ToolUnavailableError as exc:
                        content = f"エラー: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        messages.append({"role": "user", "content": script["write_prompt"]})
        with tallyspan.stage(script["stage"]):
            client.chat.completions.create(model=model, messages=messages)


def format_demo(result: DemoResult) -> str:
    """The demo's summary followed by the report."""
    tallyspan_db = f"tallyspan --db {shlex.quote(result.store)}"
    lines = [
        f"tallyspan demo: {result.runs} runs of {result.agent} against a scripted local model ({result.model_url})",
        f"  instrumented: {', '.join(result.instrumented) or 'nothing'}; "
        f"processors: {', '.join(result.components) or 'none'}",
        *(f"  note: {note}" for note in result.notes),
        "",
        format_report(result.report),
        "",
        f"Next: `{tallyspan_db} spans --violated` says why each failing call failed; `{tallyspan_db} ledger"
        " --unbalanced` shows the books that do not balance; every command takes --json for scripts. Each"
        " demo starts from a fresh store: a rerun shows the same report.",
    ]
    return "\n".join(lines)


@click.command("demo")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text.")
@pass_state
def command(state: CliState, as_json: bool) -> None:
    """Run a small instrumented agent workflow on a local scripted model and print the report.

    Each run starts from a fresh store (the last demo's is replaced): ./.tallyspan/demo.db unless --db
    or TALLYSPAN_DB names one; a store holding anything but a demo's is refused, untouched.
    """
    db_path = state.db_path if state.db_given else DEMO_STORE
    emit("demo", run_demo(db_path), as_json=as_json, text=format_demo)
