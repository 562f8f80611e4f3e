"""Take the screenshot of ``tallyspan report --html`` shown in the README, with headless Chromium, offline.

It runs ``tallyspan demo`` in an empty folder (the scripted agent against a local model on 127.0.0.1,
its store in ``./.tallyspan/tallyspan.db`` there), writes the HTML report of that store, and saves
what Debian's Chromium shows of it in a 1280-pixel-wide window:

    docs/img/report-html.png      the failing runs, the chart, the tables and the books of the run
                                  whose books do not balance

Usage (from the repository root, in the project's venv)::

    apt-get install -y chromium        # Debian's package; no browser download
    python scripts/take_report_screenshot.py [--out docs/img/report-html.png] [--height 2040]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser import png_size, screenshot  # noqa: E402

WIDTH = 1280


def _tallyspan(folder: Path, *args: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TALLYSPAN_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-m", "tallyspan", *args], cwd=folder, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(
            f"tallyspan {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "report-html.png")
    parser.add_argument("--height", type=int, default=2040, help="window height in CSS pixels")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tallyspan-demo-") as name:
        folder = Path(name)
        _tallyspan(folder, "demo")
        _tallyspan(folder, "--db", str(Path(".tallyspan", "demo.db")), "report", "--html", "report.html")
        screenshot(folder / "report.html", arguments.out, window=(WIDTH, arguments.height))
    width, height = png_size(arguments.out)
    print(f"{arguments.out}: {width}x{height}")


if __name__ == "__main__":
    main()
