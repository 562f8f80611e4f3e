"""What a user got wrong is said once, naming what to fix: before, each of these turned checks or spans off silently."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.stats import losses

import tallyspan
from tallyspan import semconv
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

CONTRACTS = {"contracts": {"weekly_report": {"language": "ja"}, "triage": {"min_chars": 5}}}


def _warnings(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and needle in r.getMessage()
    ]


def test_a_stage_without_a_contract_is_named_once_with_the_stages_that_have_one(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    misspelt = f"weekly_reprot_{uuid.uuid4().hex[:6]}"  # warnings are once per process: a fresh name
    instrumentation = tallyspan.instrument(
        contracts=CONTRACTS,
        tracer_provider=tracer_provider,
        store=None,
        instrumentors=[],
        span_processors=[SimpleSpanProcessor(span_exporter)],
    )
    tracer = tracer_provider.get_tracer("test")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            with tallyspan.stage(misspelt):
                tracer.start_span(
                    "chat m", attributes={semconv.GEN_AI_OPERATION_NAME: "chat", semconv.STAGE: misspelt}
                ).end()
        assert instrumentation.force_flush()
    [message] = _warnings(caplog, misspelt)
    assert "not checked" in message
    assert "contracts: triage, weekly_report" in message
    assert len(span_exporter.get_finished_spans()) == 3


def test_a_bare_library_name_means_our_instrumentor(tracer_provider: TracerProvider) -> None:
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider, store=None, instrumentors=["anthropic"]
    )
    assert [type(i).__name__ for i in instrumentation.instrumentors] == ["AnthropicInstrumentor"]


def test_an_unknown_instrumentor_name_is_warned_with_the_known_ones(
    tracer_provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"antrhopic_{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.WARNING):
        instrumentation = tallyspan.instrument(
            tracer_provider=tracer_provider, store=None, instrumentors=[name]
        )
    assert instrumentation.instrumentors == ()
    [message] = _warnings(caplog, name)
    assert "no instrumentor is named" in message
    assert "tallyspan_anthropic" in message
    assert "tallyspan_openai" in message


def test_an_instrumentor_whose_library_is_missing_is_warned_when_asked_for_by_name(
    tracer_provider: TracerProvider,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A real installed distribution (dist-info with an entry point) whose library is absent.
    suffix = uuid.uuid4().hex[:6]
    module = f"fake_instrumentor_{suffix}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            """
            from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

            class FakeInstrumentor(BaseInstrumentor):
                def instrumentation_dependencies(self):
                    return ("tallyspan-no-such-library >= 1.0",)

                def _instrument(self, **kwargs):
                    raise AssertionError("must not be called: the library is missing")

                def _uninstrument(self, **kwargs):
                    pass
            """
        )
    )
    dist_info = tmp_path / f"{module}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        f"[opentelemetry_instrumentor]\nfake_{suffix} = {module}:FakeInstrumentor\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        instrumentation = tallyspan.instrument(
            tracer_provider=tracer_provider, store=None, instrumentors=[f"fake_{suffix}"]
        )
    assert instrumentation.instrumentors == ()
    [message] = _warnings(caplog, f"fake_{suffix}")
    assert "is not instrumented" in message
    assert "tallyspan-no-such-library" in message


def test_a_provider_set_after_instrument_gets_the_fix_named(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import tallyspan
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        tallyspan.instrument(store=None, instrumentors=[])
        trace.set_tracer_provider(TracerProvider())
        trace.set_tracer_provider(TracerProvider())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Overriding of current TracerProvider is not allowed") == 2
    assert done.stderr.count("tallyspan.instrument(tracer_provider=provider)") == 1


def test_a_store_that_cannot_be_written_is_said_once_at_instrument_with_its_path_and_reason(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tracer_provider: TracerProvider,
) -> None:
    # Under a regular file: not even root can create it (the tests run as root, for whom no mode bit counts).
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = blocker / "t.db"
    monkeypatch.setenv("TALLYSPAN_DB", str(store))
    with caplog.at_level(logging.WARNING):
        # Our own provider: the process's global one can be set only once, and later tests rely on theirs.
        instrumentation = tallyspan.instrument(
            tracer_provider=tracer_provider, contracts=CONTRACTS, instrumentors=["tallyspan_openai"]
        )
        with (
            OpenAICompatibleServer(replies=[ScriptedReply(text="The report is done.")] * 2) as server,
            openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
            tallyspan.run("agent"),
            tallyspan.stage("weekly_report"),
        ):
            for _ in range(2):
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "週報"}])
        assert instrumentation.force_flush()
        tallyspan.uninstrument()

    [message] = _warnings(caplog, str(store))
    assert f"the store {store} cannot be written ({blocker} is not a directory)" in message
    assert "TALLYSPAN_DB" in message
    assert instrumentation.settings.db_path is None  # the chain runs on without it
    assert losses() == {"errors.store.unwritable": 1}  # and nothing else failed or was lost
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not store.exists()
