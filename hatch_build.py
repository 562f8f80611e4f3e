"""Build hook: compile the optional C module ``tallyspan._engine._scan`` (src/tallyspan/_engine/_scan.c) into the wheel.

The module runs the language checks' character scans in C (tallyspan/_engine/_scripts.py says which). It is
optional: where no C compiler or Python headers are found, the build warns and makes a pure-Python
wheel, and tallyspan uses its pure-Python scans, with the same verdicts at a higher cost. An editable
install (``pip install -e .``) puts the compiled module beside the sources, where Python imports them
from; reinstall after changing the C source. ``TALLYSPAN_NO_EXTENSIONS=1`` at build time skips it.

setuptools does the compiling (``build_ext``): it knows each platform's compiler and flags.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "tallyspan._engine._scan"
SOURCE = Path("src", "tallyspan", "_engine", "_scan.c")


class ScanModuleHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("TALLYSPAN_NO_EXTENSIONS"):
            return
        self._work = Path(tempfile.mkdtemp(prefix="tallyspan-build-"))
        try:
            built = self._compile()
        except Exception as error:  # no compiler or headers: the pure-Python scans do the work
            self.app.display_warning(
                f"tallyspan: the optional C module {MODULE} was not built ({type(error).__name__}: {error}); "
                "the checks use their pure-Python scans"
            )
            return
        target = f"tallyspan/_engine/{built.name}"
        if version == "editable":
            shutil.copy2(built, Path(self.root, "src", target))
        else:
            build_data["force_include"][str(built)] = target
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)

    def _compile(self) -> Path:
        from setuptools import Distribution, Extension
        from setuptools.command.build_ext import build_ext

        extension = Extension(MODULE, [str(Path(self.root, SOURCE))])
        command = build_ext(Distribution({"name": "tallyspan", "ext_modules": [extension]}))
        command.build_lib = str(self._work / "lib")
        command.build_temp = str(self._work / "temp")
        command.ensure_finalized()
        command.run()
        return Path(command.get_ext_fullpath(MODULE))
