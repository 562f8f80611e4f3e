"""Another vendor's one-line set-up first, then ``tallyspan.instrument()``: the vendor's exporter receives
the checked spans. Each runs as a program, since such a set-up sets the global TracerProvider (once per
process).

``logfire.configure()`` sets a ``ProxyTracerProvider`` of Logfire's own as the global provider, not an
SDK one, and keeps the SDK provider it made (with Logfire's processors) inside it; Logfire's root
processor drops every span that ends while instrumentation is suppressed, as it is on our worker. Before,
``instrument()`` made a provider of its own, which OpenTelemetry refused as the global one, and Logfire
received nothing. Phoenix's ``register()`` is tested against a real Phoenix in
tests/e2e/test_phoenix_register.py; Langfuse's client, ``openlit.init()`` and ``Traceloop.init()`` put
their processors on a plain SDK provider and were not affected (README, "Next to other one-line
set-ups").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from opentelemetry.trace import StatusCode
from tests.conftest import OTLPReceiver
from tests.stats import without_backpressure

from tallyspan import semconv

REPO = Path(__file__).resolve().parents[2]

LOGFIRE_APP = textwrap.dedent(
    """
    import json
    import sys

    import logfire
    import openai
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    import tallyspan
    from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

    exporter = OTLPSpanExporter(endpoint=sys.argv[1])
    logfire.configure(send_to_logfire=False, console=False, additional_span_processors=[SimpleSpanProcessor(exporter)])
    active = tallyspan.instrument(contracts={"weekly_report": {"language": "ja"}})
    with (
        OpenAICompatibleServer(replies=[ScriptedReply(text="The weekly report is done.")]) as server,
        openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0) as client,
        logfire.span("handle request"),
        tallyspan.run("agent"),
        tallyspan.stage("weekly_report"),
    ):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "週報を書いて"}])
    print(json.dumps({"flushed": active.force_flush(), "stats": tallyspan.stats()}))
    """
)


def _run(program: str, receiver: OTLPReceiver, tmp_path: Path) -> dict[str, object]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "TALLYSPAN_", "LOGFIRE_", "OPENAI_"))
    }
    env.update(TALLYSPAN_DB=str(tmp_path / "tallyspan.db"), PYTHONPATH=str(REPO))
    app = tmp_path / "app.py"  # a file, as an app is: Logfire reads the source of its span() calls
    app.write_text(program)
    ran = subprocess.run(
        [sys.executable, str(app), f"{receiver.endpoint}/v1/traces"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Overriding of current TracerProvider" not in ran.stderr
    answer: dict[str, object] = json.loads(ran.stdout.strip().splitlines()[-1])
    return answer


def _assert_nothing_lost(answer: dict[str, object]) -> None:
    """Flushed, and no drop or error counted. Hand-overs of the GIL that timed out (``backpressure.*``)
    say how busy the host was, not that anything was lost."""
    assert answer["flushed"] is True
    stats = answer["stats"]
    assert isinstance(stats, dict)
    assert without_backpressure(stats) == {}


def test_logfire_configure_then_instrument_sends_the_checked_spans_to_logfires_exporter(
    otlp_receiver: OTLPReceiver, tmp_path: Path
) -> None:
    answer = _run(LOGFIRE_APP, otlp_receiver, tmp_path)

    _assert_nothing_lost(answer)
    with otlp_receiver.lock:  # the program has exited: its SimpleSpanProcessor sent everything
        spans = {span.name: span for span in otlp_receiver.spans}
    assert sorted(spans) == ["chat m", "handle request", "invoke_agent agent"]
    chat = spans["chat m"]
    attributes = {attribute.key: attribute.value for attribute in chat.attributes}
    assert [value.string_value for value in attributes[semconv.VIOLATION_TYPES].array_value.values] == [
        "not_japanese"
    ]
    assert chat.status.code == StatusCode.ERROR.value
    assert spans["invoke_agent agent"].parent_span_id == spans["handle request"].span_id
