"""instrument(): idempotent, reuses or creates the provider, exports where asked, never needs a backend."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tallyspan


def test_second_call_returns_the_active_instrumentation_and_warns(
    tracer_provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    first = tallyspan.instrument(tracer_provider=tracer_provider, store=None)
    second = tallyspan.instrument(tracer_provider=tracer_provider, store=None)
    assert second is first
    assert tallyspan.instrumentation() is first
    assert "called again" in caplog.text


def test_uninstrument_is_safe_twice_and_stops_forwarding(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    tallyspan.instrument(
        tracer_provider=tracer_provider, store=None, span_processors=[SimpleSpanProcessor(span_exporter)]
    )
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("while-instrumented"):
        pass
    tallyspan.uninstrument()
    tallyspan.uninstrument()
    assert tallyspan.instrumentation() is None
    with tracer.start_as_current_span("after"):
        pass
    assert [span.name for span in span_exporter.get_finished_spans()] == ["while-instrumented"]


def test_user_span_processors_receive_spans_through_the_chain(
    instrumented: tallyspan.Instrumentation,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    with tracer_provider.get_tracer("test").start_as_current_span("work"):
        pass
    assert instrumented.force_flush()
    assert [span.name for span in span_exporter.get_finished_spans()] == ["work"]
    assert "worker" not in instrumented.components  # the head is not listed, the links are


def test_store_none_writes_no_database(tracer_provider: TracerProvider, db_path: Path) -> None:
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None)
    with tracer_provider.get_tracer("test").start_as_current_span("work"):
        pass
    instrumentation.force_flush()
    assert instrumentation.settings.db_path is None
    assert not db_path.exists()


def test_default_store_follows_the_environment(tracer_provider: TracerProvider, db_path: Path) -> None:
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider)
    assert instrumentation.settings.db_path == db_path


def test_capture_content_argument_beats_the_environment(
    tracer_provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None, capture_content=False)
    assert instrumentation.settings.capture_content is False


def test_bad_capture_content_argument_is_a_config_error(tracer_provider: TracerProvider) -> None:
    with pytest.raises(tallyspan.ConfigError, match="capture_content"):
        tallyspan.instrument(tracer_provider=tracer_provider, capture_content="yes")  # type: ignore[arg-type]
    assert tallyspan.instrumentation() is None


def test_a_non_sdk_tracer_provider_argument_is_a_config_error() -> None:
    with pytest.raises(tallyspan.ConfigError, match="TracerProvider"):
        tallyspan.instrument(tracer_provider=object())  # type: ignore[arg-type]


def test_exports_over_otlp_when_the_standard_variable_asks(
    tracer_provider: TracerProvider, otlp_receiver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None)
    assert "otlp" in instrumentation.components
    with tracer_provider.get_tracer("test").start_as_current_span("exported", attributes={"k": "v"}):
        pass
    assert instrumentation.force_flush()
    assert [span.name for span in otlp_receiver.spans] == ["exported"]
    assert "/v1/traces" in otlp_receiver.paths


def test_no_otlp_export_without_the_variables(tracer_provider: TracerProvider) -> None:
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=None)
    assert "otlp" not in instrumentation.components


def _run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "TALLYSPAN_DB": str(tmp_path / "t.db"), "OTEL_SERVICE_NAME": "svc-env"},
        check=False,
    )


def test_creates_and_sets_a_global_provider_named_from_the_environment(tmp_path: Path) -> None:
    result = _run_python(
        """
        from opentelemetry import trace
        import tallyspan
        instrumentation = tallyspan.instrument(store=None)
        assert trace.get_tracer_provider() is instrumentation.tracer_provider
        print(instrumentation.tracer_provider.resource.attributes["service.name"])
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "svc-env"


def test_reuses_the_sdk_provider_the_app_already_set(tmp_path: Path) -> None:
    result = _run_python(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        import tallyspan
        mine = TracerProvider()
        trace.set_tracer_provider(mine)
        assert tallyspan.instrument(store=None).tracer_provider is mine
        print("ok")
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_spans_queued_at_exit_are_flushed(tmp_path: Path) -> None:
    """The app never flushes: the atexit hook must still run the queued spans through the chain."""
    result = _run_python(
        """
        import sys
        from opentelemetry.sdk.trace import TracerProvider, ReadableSpan, SpanProcessor
        import tallyspan

        class Print(SpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                sys.stdout.write("exported " + span.name + "\\n")

        provider = TracerProvider(shutdown_on_exit=False)
        tallyspan.instrument(tracer_provider=provider, store=None, span_processors=[Print()])
        with provider.get_tracer("t").start_as_current_span("last-words"):
            pass
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exported last-words"


def test_an_app_that_exits_without_flushing_keeps_its_call_and_verdict_in_the_store(tmp_path: Path) -> None:
    """One model call, no flush, exit: the store holds the call and its violation on every Python. From
    3.12 the interpreter refuses new threads in the atexit hooks, where the chain's worker and the store's
    writer would start here (the call ends just before exit): their work must be done there instead."""
    (tmp_path / "contracts.yaml").write_text("contracts:\n  reply:\n    language: ja\n", encoding="utf-8")
    result = _run_python(
        """
        import openai
        import tallyspan
        from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

        tallyspan.instrument(contracts="contracts.yaml")
        server = OpenAICompatibleServer(replies=[ScriptedReply(text="The weather is fine today.")])
        server.start()
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        with tallyspan.stage("reply"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "天気は？"}])
        print("called")
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "called"
    assert "Traceback" not in result.stderr, result.stderr
    with closing(sqlite3.connect(tmp_path / "t.db")) as db:
        rows = db.execute("SELECT name, violation_types FROM spans").fetchall()
    assert rows == [("chat m", '["not_japanese"]')]


def test_set_aside_pauses_the_running_instrumentation_and_gives_it_back(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    app = tallyspan.instrument(
        tracer_provider=tracer_provider, store=None, span_processors=[SimpleSpanProcessor(span_exporter)]
    )
    tracer = tracer_provider.get_tracer("test")
    inner_spans = InMemorySpanExporter()
    with app.set_aside():
        assert tallyspan.instrumentation() is None
        inner = tallyspan.instrument(
            tracer_provider=tracer_provider, store=None, span_processors=[SimpleSpanProcessor(inner_spans)]
        )
        with tracer.start_as_current_span("aside"):
            pass
        assert inner.force_flush()
        refused = pytest.raises(
            tallyspan.ConfigError, match=r"^only the running instrumentation can be set aside$"
        )
        with refused, app.set_aside():
            pass
        # Left running: the end of the block undoes it.
    assert tallyspan.instrumentation() is app
    with tracer.start_as_current_span("back"):
        pass
    assert app.force_flush()
    assert [span.name for span in span_exporter.get_finished_spans()] == ["back"]
    assert [span.name for span in inner_spans.get_finished_spans()] == ["aside"]
    tallyspan.uninstrument()
