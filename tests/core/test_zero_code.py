"""Zero-code: ``opentelemetry-instrument python examples/zero_code_agent.py``, a real subprocess against a
local scripted OpenAI server, gives checked spans, ledger records and a store, configured by ``TALLYSPAN_*``
variables, with and without opentelemetry-distro (installed by the test extra; "without" is
``OTEL_PYTHON_DISTRO`` and ``OTEL_PYTHON_CONFIGURATOR`` naming none of the installed ones, which is what
``opentelemetry-instrument`` does where it is not installed). Under the distro, the README's set-up works
as written: an OTLP/HTTP endpoint gets the checked spans once, and a backend that never answers does not
hold the exit past the shutdown budget. Then the parts in process: the hook, an app's own
``instrument()`` call, the rules it relies on.

The hook is the ``opentelemetry_pre_instrument`` entry point ``tallyspan`` of pyproject.toml. Where the
installed metadata predates it, the subprocess gets it from a throwaway dist-info folder on its path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from tests.conftest import OTLPReceiver, skip_or_fail_in_ci
from tests.modules import load_script

import tallyspan
from tallyspan import semconv
from tallyspan._store._store_queries import ledger_runs, list_spans, open_store, report
from tallyspan._zero_code import instrument_from_environment
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "zero_code_agent.py"
EXAMPLE_CONTRACTS = REPO / "examples" / "zero_code_contracts.yaml"
SOURCE_ROOTS = [REPO / root for root in ("src", "instrumentors", "processors", "exporters")]
HOOK_GROUP = "opentelemetry_pre_instrument"
HOOK = "tallyspan = tallyspan._zero_code:instrument_from_environment"
#: ``opentelemetry-instrument`` without a distro or a configurator: it loads only those these name.
WITHOUT_DISTRO = {"OTEL_PYTHON_DISTRO": "no-distro", "OTEL_PYTHON_CONFIGURATOR": "no-configurator"}
#: Variables of the parent environment the subprocess must not inherit.
_FOREIGN_PREFIXES = ("OTEL_", "TALLYSPAN_", "OPENAI_")


def example_module() -> Any:
    """examples/zero_code_agent.py as a module (its scripted replies are the test's too)."""
    return load_script(EXAMPLE)


def dist_info(folder: Path, name: str, entry_points_text: str) -> Path:
    """A minimal installed distribution with entry points, in ``folder`` (put it on PYTHONPATH)."""
    info = folder / f"{name}-0.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(entry_points_text)
    return folder


def hook_installed() -> bool:
    return any(True for _ in entry_points(group=HOOK_GROUP, name="tallyspan"))


@dataclass(frozen=True)
class Ran:
    """A program run under ``opentelemetry-instrument``: the process, its store, the model calls it made."""

    completed: subprocess.CompletedProcess[str]
    store: Path
    model_requests: int


@pytest.fixture
def run_instrumented(tmp_path: Path) -> Callable[..., Ran]:
    """Run a program (the example by default) under ``opentelemetry-instrument`` against a scripted
    server (the example's replies by default), with the example's contracts and a store in ``tmp_path``;
    ``variables`` add to or override that environment."""
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    if not launcher.is_file():
        found = shutil.which("opentelemetry-instrument")
        assert found, "opentelemetry-instrument (opentelemetry-instrumentation) is a dependency"
        launcher = Path(found)
    paths = [str(root) for root in SOURCE_ROOTS]
    if not hook_installed():  # metadata installed before the entry point was added: provide it
        hook = dist_info(tmp_path / "hook", "tallyspan_zero_code_hook", f"[{HOOK_GROUP}]\n{HOOK}\n")
        paths.append(str(hook))
    store = tmp_path / "zero-code.db"

    def run(
        variables: Mapping[str, str] | None = None,
        *,
        replies: list[ScriptedReply] | None = None,
        extra_paths: tuple[Path, ...] = (),
        script: Path = EXAMPLE,
        distro: bool = False,
    ) -> Ran:
        env = {key: value for key, value in os.environ.items() if not key.startswith(_FOREIGN_PREFIXES)}
        if distro:
            assert importlib.util.find_spec("opentelemetry.distro"), (
                "opentelemetry-distro is in the test extra"
            )
        else:
            env.update(WITHOUT_DISTRO)
        env["PYTHONPATH"] = os.pathsep.join([*paths, *map(str, extra_paths)])
        env.update(TALLYSPAN_CONTRACTS=str(EXAMPLE_CONTRACTS), TALLYSPAN_DB=str(store))
        with OpenAICompatibleServer(
            replies=example_module().scripted_replies() if replies is None else replies
        ) as server:
            env.update(OPENAI_BASE_URL=server.base_url, **(variables or {}))
            completed = subprocess.run(
                [str(launcher), sys.executable, str(script)],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=180,
            )
            requests = len(server.requests)
        assert completed.returncode == 0, completed.stderr
        return Ran(completed, store, requests)

    return run


@pytest.mark.parametrize("distro", [False, True], ids=["without the distro", "with the distro"])
@pytest.mark.parametrize("disabled", ["", "openai"], ids=["with openai-v2", "openai-v2 disabled"])
def test_opentelemetry_instrument_gives_checked_spans_a_ledger_and_a_store(
    run_instrumented: Callable[..., Ran], disabled: str, distro: bool
) -> None:
    ran = run_instrumented({"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled}, distro=distro)
    assert ran.model_requests == 4
    assert "Done, the report was sent." in ran.completed.stdout
    with open_store(ran.store) as db:
        summary = report(db)
        runs = ledger_runs(db)
        spans = list_spans(db)
    assert len([span for span in spans if span.operation == semconv.OPERATION_CHAT]) == 4  # one span a call
    assert summary.model_calls == 4
    assert summary.tool_calls == 3
    (final,) = [span for span in spans if span.violation_types]
    assert final.violation_types == ["not_japanese", "too_short"]  # the default contract of the file
    assert final.status_code == "ERROR"
    (run,) = runs  # the agent run; the SDK's workflow around it is no second run
    assert run.run_name == "weekly-reporter"
    assert run.balanced is False
    assert run.discrepancy_types == ["unlogged_call"]
    assert summary.runs == 1


@pytest.mark.parametrize(
    "variables",
    [
        # The README's Phoenix set-up: an OTLP/HTTP URL and nothing else. The distro's own default
        # (gRPC) sent its spans nowhere.
        {},
        # Everything said: the configurator's OTLP exporter would send them; ours does, once.
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        },
    ],
    ids=["the endpoint alone", "exporter and protocol said"],
)
def test_with_the_distro_an_otlp_http_endpoint_gets_the_checked_spans_once(
    run_instrumented: Callable[..., Ran], otlp_receiver: OTLPReceiver, variables: dict[str, str]
) -> None:
    ran = run_instrumented(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{otlp_receiver.endpoint}/v1/traces", **variables},
        distro=True,
    )
    with otlp_receiver.lock:  # the program has exited: everything it sent has arrived
        received = list(otlp_receiver.spans)
    assert len({span.span_id for span in received}) == len(received)  # nothing exported twice
    chats = [span for span in received if span.name.startswith("chat ")]
    assert len(chats) == 4
    violating = [span for span in chats if semconv.VIOLATION_TYPES in attributes_of(span)]
    assert len(violating) == 1  # the configurator's exporter got the checked copies
    with open_store(ran.store) as db:
        assert report(db).model_calls == 4


@pytest.fixture
def black_hole() -> Iterator[str]:
    """An endpoint on 127.0.0.1 that accepts connections and never answers (a backend that hangs), for
    OTLP over HTTP and gRPC alike."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        acceptor.join()
        for connection in held:
            connection.close()
        listener.close()


def test_with_the_distro_a_backend_that_never_answers_does_not_hold_the_exit(
    run_instrumented: Callable[..., Ran], black_hole: str
) -> None:
    """Every exporter waits up to OTEL_EXPORTER_OTLP_TIMEOUT (60 s) for an answer that never comes: the
    distro's meter and logger providers over gRPC, tallyspan's traces and ledger over HTTP. The program
    still exits within the shutdown budget of its end (2 s; the run itself takes a few seconds), not
    after a minute of waiting."""
    started = time.monotonic()
    ran = run_instrumented(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": black_hole,
            "OTEL_EXPORTER_OTLP_TIMEOUT": "60",
            "TALLYSPAN_SHUTDOWN_TIMEOUT_S": "2",
        },
        distro=True,
    )
    elapsed = time.monotonic() - started
    assert elapsed < 40, f"the program took {elapsed:.0f} s: an exporter held its exit"
    assert "Done, the report was sent." in ran.completed.stdout
    with open_store(ran.store) as db:
        assert report(db).model_calls == 4  # the store does not wait for the backend


def test_a_bad_contracts_file_is_logged_and_the_app_runs_on(
    run_instrumented: Callable[..., Ran], tmp_path: Path
) -> None:
    broken = tmp_path / "contracts.yaml"
    broken.write_text("contracts:\n  weekly_report:\n    min_chars: -5\n")
    ran = run_instrumented({"TALLYSPAN_CONTRACTS": str(broken)})
    assert "min_chars" in ran.completed.stderr
    assert "TALLYSPAN_CONTRACTS" in ran.completed.stderr
    with open_store(ran.store) as db:
        assert report(db).model_calls == 4
        assert [run.run_name for run in ledger_runs(db)] == ["weekly-reporter"]  # the ledger still runs


#: An app that sets up its own tracing in code, as with Phoenix's register(), and makes one model call.
APP_WITH_ITS_OWN_PROVIDER = """
import json, os
import openai
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider(resource=Resource.create({"service.name": "the-apps-own"}))
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

with openai.OpenAI(api_key="k") as client:  # at OPENAI_BASE_URL
    client.chat.completions.create(model="m1", messages=[{"role": "user", "content": "週報を書いて"}])
import tallyspan

assert trace.get_tracer_provider() is provider, "the app's provider was refused"
assert tallyspan.instrumentation().tracer_provider is provider
tallyspan.instrumentation().force_flush()
print(json.dumps([
    {"name": s.name, "service": s.resource.attributes["service.name"], "attributes": dict(s.attributes)}
    for s in exporter.get_finished_spans()
], default=list))
"""


def test_an_app_that_sets_up_its_own_provider_keeps_it_and_its_exporter_gets_checked_spans(
    run_instrumented: Callable[..., Ran], tmp_path: Path
) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP_WITH_ITS_OWN_PROVIDER)
    ran = run_instrumented(replies=[ScriptedReply(text="Done.")], script=app)
    (span,) = json.loads(ran.completed.stdout.strip().splitlines()[-1])
    assert span["name"] == "chat m1"
    assert span["service"] == "the-apps-own"
    assert span["attributes"][semconv.VIOLATION_TYPES] == ["not_japanese", "too_short"]


def attributes_of(span: Any) -> dict[str, Any]:
    """A received OTLP span's attributes as plain values (protobuf AnyValue: the set field)."""
    decoded = {}
    for pair in span.attributes:
        field = pair.value.WhichOneof("value")
        value = getattr(pair.value, field)
        decoded[pair.key] = (
            [getattr(item, item.WhichOneof("value")) for item in value.values]
            if field == "array_value"
            else value
        )
    return decoded


# --- in process -----------------------------------------------------------------------------------------


@pytest.fixture
def contracts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "contracts.yaml"
    path.write_text(json.dumps({"contracts": {"weekly_report": {"language": "ja"}}}))
    monkeypatch.setenv("TALLYSPAN_CONTRACTS", str(path))
    return path


def test_the_hook_builds_the_chain_from_the_environment_and_instruments_no_library(
    contracts_file: Path, tracer_provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("opentelemetry.trace._TRACER_PROVIDER", tracer_provider)
    instrumentation = instrument_from_environment()
    assert instrumentation is not None
    assert instrumentation.zero_code is True
    assert instrumentation.tracer_provider is tracer_provider  # adopted, not replaced
    assert instrumentation.instrumentors == ()  # opentelemetry-instrument loads them next
    assert instrumentation.settings.contracts is not None
    assert sorted(instrumentation.settings.contracts.contracts) == ["weekly_report"]
    assert {"checks", "ledger", "store"} <= set(instrumentation.components)


def test_the_apps_own_instrument_call_replaces_the_zero_code_one(
    contracts_file: Path, tracer_provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("opentelemetry.trace._TRACER_PROVIDER", tracer_provider)
    first = instrument_from_environment()
    second = tallyspan.instrument({"summary": {"language": "en"}}, store=None, instrumentors=())
    assert second is not first
    assert second.zero_code is False
    assert second.settings.contracts is not None
    assert sorted(second.settings.contracts.contracts) == ["summary"]  # arguments win over the environment
    assert tallyspan.instrument() is second  # from now on, the usual rule: the first call stays


def test_a_bad_contracts_file_leaves_the_chain_running_without_contracts(
    tmp_path: Path,
    tracer_provider: TracerProvider,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = tmp_path / "contracts.yaml"
    broken.write_text("contracts: [not, a, mapping]\n")
    monkeypatch.setenv("TALLYSPAN_CONTRACTS", str(broken))
    monkeypatch.setattr("opentelemetry.trace._TRACER_PROVIDER", tracer_provider)
    with caplog.at_level(logging.ERROR, logger="tallyspan._zero_code"):
        instrumentation = instrument_from_environment()
    assert instrumentation is not None
    assert "ledger" in instrumentation.components
    assert any(str(broken) in record.getMessage() for record in caplog.records)
    assert {k: v for k, v in tallyspan.stats().items() if k.startswith("errors.")} == {}


def test_an_adopted_otlp_exporter_is_not_doubled_by_ours(
    tracer_provider: TracerProvider, otlp_receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{otlp_receiver.endpoint}/v1/traces")
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None, instrumentors=())
    assert instrumentation.settings.otlp_traces is False
    assert "otlp" not in instrumentation.components
    with tracer_provider.get_tracer("app").start_as_current_span("work"):
        pass
    assert instrumentation.force_flush()
    assert [span.name for span in otlp_receiver.spans] == ["work"]


def test_libraries_instrumented_already_are_left_to_their_owner(tracer_provider: TracerProvider) -> None:
    from tallyspan_instrumentors.openai import OpenAIInstrumentor

    owned = OpenAIInstrumentor()
    owned.instrument(tracer_provider=tracer_provider)
    try:
        instrumentation = tallyspan.instrument(
            tracer_provider=tracer_provider, store=None, instrumentors=["tallyspan_openai"]
        )
        assert instrumentation.instrumentors == ()
        tallyspan.uninstrument()
        assert owned.is_instrumented_by_opentelemetry  # our uninstrument() did not take it away
    finally:
        owned.uninstrument()


REGISTER_APP = """
import os

import openai
from phoenix.otel import register

register(project_name="weekly-agent", endpoint=os.environ["REGISTER_ENDPOINT"], batch=True, verbose=False)
with openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="test-key", max_retries=0) as client:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "今週の週報を書いてください"}])
"""


def test_phoenix_register_in_the_app_under_opentelemetry_instrument_exports_the_checked_span(
    run_instrumented: Callable[..., Ran], otlp_receiver: OTLPReceiver, tmp_path: Path
) -> None:
    """The app sets Phoenix's provider up in code; the hook takes it at the first span. The exporter
    ``register()`` made must still be alive then: Phoenix's provider shuts it down at the first
    ``add_span_processor``."""
    if sys.version_info < (3, 11):  # CI runs this file on 3.10 too, where it cannot be installed
        pytest.skip("arize-phoenix-otel needs Python 3.11 or later")
    if importlib.util.find_spec("phoenix.otel") is None:
        skip_or_fail_in_ci("arize-phoenix-otel is not installed (it needs Python 3.11 or later)")
    app = tmp_path / "register_app.py"
    app.write_text(REGISTER_APP, encoding="utf-8")
    ran = run_instrumented(
        {
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "openai",
            "REGISTER_ENDPOINT": f"{otlp_receiver.endpoint}/v1/traces",
        },
        replies=[ScriptedReply(text="The weekly report: all tickets were closed on time this week.")],
        script=app,
    )

    assert ran.model_requests == 1
    assert "already shutdown" not in ran.completed.stderr
    with otlp_receiver.lock:  # the program has exited: its batch processor sent everything at exit
        spans = list(otlp_receiver.spans)
    assert [span.name for span in spans] == ["chat m"]
    attributes = {attribute.key: attribute.value for attribute in spans[0].attributes}
    assert [value.string_value for value in attributes[semconv.VIOLATION_TYPES].array_value.values] == [
        "not_japanese"
    ]
