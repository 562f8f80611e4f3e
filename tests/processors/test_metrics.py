"""In-process OpenTelemetry metrics: violations, reconciled runs and drops, through the app's meter provider.

The global meter provider can be set once per process, so each case runs in a child process: a real
MeterProvider with an in-memory reader, a real OpenAI client against the local scripted server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import openai
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    import tallyspan
    from tallyspan.testing import OpenAICompatibleServer, ScriptedReply, ScriptedToolCall

    reader = InMemoryMetricReader()
    if sys.argv[1] == "with-meter-provider":
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    contracts = {"contracts": {"answer": {"language": "ja", "forbidden": ["<\\\\|im_end\\\\|>"]}}}
    tallyspan.instrument(contracts=contracts, tracer_provider=TracerProvider(), store=None,
                         instrumentors=["tallyspan_openai"])
    replies = [ScriptedReply(text="The report is done.<|im_end|>"), ScriptedReply(text="The report is done.")]
    with OpenAICompatibleServer(replies=replies) as server, \\
            openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
        with tallyspan.run("writer"), tallyspan.stage("answer"):
            for _ in replies:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "報告して"}])

        @tallyspan.tool
        def search(query: str) -> str:
            return "found"

        with tallyspan.run("unlogged"):
            search("q")
    tallyspan.ledger.claim(None, "search", "succeeded")  # outside any span: dropped, and counted
    assert tallyspan.instrumentation().force_flush()
    points = []
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    points.append([metric.name, dict(point.attributes), point.value])
    print(json.dumps(sorted(points, key=json.dumps)))
    """
)


def _run(mode: str, tmp_path: Path) -> list[list[Any]]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_violations_runs_and_drops_are_counted_with_the_collectors_names_and_attributes(
    tmp_path: Path,
) -> None:
    points = _run("with-meter-provider", tmp_path)
    stage, kind, failure = "tallyspan.stage", "tallyspan.violation.type", "tallyspan.violation.failure_class"
    assert points == [
        ["tallyspan.dropped", {"tallyspan.cause": "dropped.ledger_claims"}, 1],
        ["tallyspan.ledger.runs", {"tallyspan.ledger.balanced": False}, 1],
        ["tallyspan.ledger.runs", {"tallyspan.ledger.balanced": True}, 1],
        ["tallyspan.ledger.unbalanced_runs", {"tallyspan.ledger.balanced": False}, 1],
        [
            "tallyspan.violations",
            {kind: "forbidden_present", failure: "contract_violation", stage: "answer"},
            1,
        ],
        ["tallyspan.violations", {kind: "not_japanese", failure: "language_corruption", stage: "answer"}, 2],
    ]


def test_without_a_meter_provider_nothing_is_recorded_and_nothing_breaks(tmp_path: Path) -> None:
    assert _run("without", tmp_path) == []
