"""Loading a script of the repository (an example, a benchmark, a build script) as a module, and running
a benchmark in an interpreter of its own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path) -> ModuleType:
    """The script at ``path`` as a module named after its file, run once, not left in sys.modules.

    It is registered while it runs: a dataclass defined in it looks its module up there."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


BENCH = Path(__file__).resolve().parents[1] / "bench"
"""The repository's benchmarks."""


def run_bench(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``bench/<script>`` with ``args`` in a fresh interpreter; it must exit 0 (stderr shown if not)."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return done
