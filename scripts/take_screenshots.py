"""Take the Phoenix screenshots shown in the README, with headless Chromium, fully offline.

It starts a real Arize Phoenix on 127.0.0.1 (installed by scripts/install-phoenix.sh), runs the
instrumented test agent of tests/e2e/violating_agent.py against it (a Japanese contract answered in
English, a refusal, a tool call the agent never logged), then opens Phoenix's UI in Debian's
Chromium and saves:

    docs/img/phoenix-root-spans.png                  the default view: the failing runs are red
    docs/img/phoenix-filter-by-violation-type.png   spans filtered by a violation type
    docs/img/phoenix-violating-span.png              the trace, the refusal span selected
    docs/img/phoenix-unbalanced-run.png              the agent run whose books do not balance

Usage (from the repository root, in the project's venv)::

    apt-get install -y chromium        # Debian's package; no browser download
    scripts/install-phoenix.sh
    python scripts/take_screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from phoenix_server import (  # noqa: E402
    PROJECT_RESOURCE_ATTRIBUTE,
    Phoenix,
    filter_path,
    phoenix_executable,
    running_phoenix,
)
from violating_agent import (  # noqa: E402
    CHAT_SPAN,
    RUN_SPAN,
    SINGLE_ANSWER_RUNS,
    run_single_answer_agents,
    run_weekly_agent,
)

from tallyspan import ViolationType, semconv  # noqa: E402

PROJECT = "weekly-agent"
WINDOW = "1600,1000"
#: Virtual time Chromium lets the single-page app run (fetch GraphQL, render) before the shot.
RENDER_BUDGET_MS = 20000
SHOT_TIMEOUT_S = 120
#: No network beyond the page itself: no updates, no sync, no QUIC, a fresh empty profile per shot.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    f"--window-size={WINDOW}",
    f"--virtual-time-budget={RENDER_BUDGET_MS}",
)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("Chromium not found: apt-get install -y chromium")


def screenshot(url: str, out: Path) -> None:
    """Save a PNG of ``url`` as Chromium renders it, in a new empty profile."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        subprocess.run(
            [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={out}", url],
            check=True,
            timeout=SHOT_TIMEOUT_S,
            capture_output=True,
        )
    if not out.is_file() or out.stat().st_size < 10_000:
        raise SystemExit(f"{out}: Chromium wrote no usable screenshot")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def _shoot(phoenix: Phoenix, out_dir: Path) -> None:
    exporter = OTLPSpanExporter(endpoint=phoenix.traces_endpoint, timeout=30)
    run_weekly_agent(
        [SimpleSpanProcessor(exporter)], resource_attributes={PROJECT_RESOURCE_ATTRIBUTE: PROJECT}
    )
    # A new exporter: the first run's provider shut the first one down with it.
    exporter = OTLPSpanExporter(endpoint=phoenix.traces_endpoint, timeout=30)
    run_single_answer_agents(
        [SimpleSpanProcessor(exporter)], resource_attributes={PROJECT_RESOURCE_ATTRIBUTE: PROJECT}
    )
    spans = phoenix.wait_for_spans(PROJECT, 5 + 2 * len(SINGLE_ANSWER_RUNS))
    (project_id,) = [p["id"] for p in phoenix.get("/v1/projects")["data"] if p["name"] == PROJECT]
    (run,) = [span for span in spans if span["name"] == RUN_SPAN]
    (refusal,) = [
        span
        for span in spans
        if span["name"] == CHAT_SPAN
        and span["context"]["trace_id"] == run["context"]["trace_id"]
        and ViolationType.REFUSAL.value in span["attributes"].get(semconv.VIOLATION_TYPES, [])
    ]
    trace_id = run["context"]["trace_id"]
    project_url = f"{phoenix.base_url}/projects/{urllib.parse.quote(project_id)}"

    screenshot(project_url, out_dir / "phoenix-root-spans.png")  # what Phoenix shows first: root spans
    condition = f"'{ViolationType.NOT_JAPANESE.value}' in {filter_path(semconv.VIOLATION_TYPES)}"
    screenshot(
        f"{project_url}/spans?{urllib.parse.urlencode({'spanFilterCondition': condition})}",
        out_dir / "phoenix-filter-by-violation-type.png",
    )
    for span, name in ((refusal, "phoenix-violating-span.png"), (run, "phoenix-unbalanced-run.png")):
        query = urllib.parse.urlencode({"selectedSpanNodeId": span["id"]})
        screenshot(f"{project_url}/traces/{trace_id}?{query}", out_dir / name)


def main() -> None:
    """Parse arguments, start Phoenix, send the agent's spans, take the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go")
    args = parser.parse_args()
    executable = phoenix_executable()
    if executable is None:
        raise SystemExit("Phoenix is not installed: run scripts/install-phoenix.sh")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="phoenix-") as working_dir:
        print("starting Phoenix (tens of seconds) ...")
        with running_phoenix(executable, Path(working_dir)) as phoenix:
            _shoot(phoenix, args.out.resolve())


if __name__ == "__main__":
    main()
