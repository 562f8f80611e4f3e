"""Phoenix's own set-up first, as its documentation says, then tallyspan: ``register()`` (simple or batch
processor, with or without ``auto_instrument=True``) followed by ``tallyspan.instrument()`` sends the
checked spans to a real Phoenix.

phoenix.otel's TracerProvider shuts its default processor (the exporter ``register()`` made) down the
first time ``add_span_processor`` is called; tallyspan adopted that processor and then added its chain
that way, so Phoenix never even saw the project. Each case runs tests/e2e/phoenix_register_app.py as a
program (``register()`` sets the global provider, once per process).

With ``auto_instrument=True``, ``register()`` instruments every ``openinference_instrumentor`` entry
point. No OpenInference instrumentor is installed here (its ``openai`` entry point would stand beside
openai-v2's under ``opentelemetry-instrument`` in every other test), so a throwaway distribution on the
program's path registers opentelemetry-instrumentation-openai-v2 under that group: ``register()`` then
really instruments the client, before tallyspan does, and tallyspan joins its span.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.conftest import skip_or_fail_in_ci
from tests.e2e.phoenix_server import Phoenix

from tallyspan import semconv

APP = Path(__file__).with_name("phoenix_register_app.py")
REPO = Path(__file__).resolve().parents[2]
_AGENT = "phoenix-agent"
_CHAT_SPAN = "chat m"
_RUN_SPAN = f"invoke_agent {_AGENT}"
#: What the SDK logs when a processor or exporter is used after its shutdown: the trap's only trace.
_SHUT_DOWN = "already shutdown"
#: A stand-in OpenInference instrumentor (see the module docstring).
_AUTO_INSTRUMENTOR = (
    "[openinference_instrumentor]\nopenai = opentelemetry.instrumentation.openai_v2:OpenAIInstrumentor\n"
)


def _program_path(tmp_path: Path, instrumentation: str) -> str:
    paths = [str(REPO)]
    if instrumentation == "auto":
        info = tmp_path / "auto" / "openinference_stand_in-0.0.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: openinference-stand-in\nVersion: 0.0.0\n"
        )
        (info / "entry_points.txt").write_text(_AUTO_INSTRUMENTOR)
        paths.append(str(info.parent))
    return os.pathsep.join(paths)


@pytest.mark.parametrize("instrumentation", ["plain", "auto"])
@pytest.mark.parametrize("processor", ["simple", "batch"])
def test_register_then_instrument_sends_the_checked_spans_to_phoenix(
    phoenix: Phoenix, tmp_path: Path, processor: str, instrumentation: str
) -> None:
    if sys.version_info < (3, 11):  # CI runs this file on 3.10 too, where it cannot be installed
        pytest.skip("arize-phoenix-otel needs Python 3.11 or later")
    if importlib.util.find_spec("phoenix.otel") is None:  # the name phoenix is the server's fixture here
        skip_or_fail_in_ci("arize-phoenix-otel is not installed (it needs Python 3.11 or later)")
    project = f"tallyspan-register-{processor}-{instrumentation}-{uuid.uuid4().hex[:8]}"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "PHOENIX_", "TALLYSPAN_"))
    }
    env.update(
        TALLYSPAN_DB=str(tmp_path / "tallyspan.db"), PYTHONPATH=_program_path(tmp_path, instrumentation)
    )

    ran = subprocess.run(
        [sys.executable, str(APP), phoenix.traces_endpoint, project, processor, instrumentation],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert ran.returncode == 0, ran.stderr
    assert _SHUT_DOWN not in ran.stderr
    answer = json.loads(ran.stdout.strip().splitlines()[-1])
    assert answer["flushed"] is True
    assert not [key for key in answer["stats"] if key.startswith(("dropped.", "errors."))], answer["stats"]
    spans = phoenix.wait_for_spans(project, 2)
    assert sorted(span["name"] for span in spans) == [_CHAT_SPAN, _RUN_SPAN]  # one span per call
    (chat,) = [span for span in spans if span["name"] == _CHAT_SPAN]
    assert chat["attributes"][semconv.VIOLATION_TYPES] == ["not_japanese"]
    assert chat["status_code"] == "ERROR"
    (run,) = [span for span in spans if span["name"] == _RUN_SPAN]
    assert run["attributes"][semconv.RUN_VIOLATION_TYPES] == ["not_japanese"]
    assert run["status_code"] == "ERROR"
    assert run["status_message"] == "not_japanese in 1 of 1 call"
