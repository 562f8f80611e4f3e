"""Loading a script of the repository (an example, a benchmark, a build script) as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(path: Path) -> ModuleType:
    """The script at ``path`` as a module named after its file, run once, not registered in sys.modules."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
