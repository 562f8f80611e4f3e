"""Build hook: compile the optional C module ``tallyspan._engine._scan`` (src/tallyspan/_engine/_scan.c) into the wheel.

The module runs the language checks' character scans in C (tallyspan/_engine/_scripts.py says which). It is
optional: where no C compiler or Python headers are found, the build warns and makes a pure-Python
wheel, and tallyspan uses its pure-Python scans, with the same verdicts at a higher cost. An editable
install (``pip install -e .``) puts the compiled module beside the sources, where Python imports them
from; reinstall after changing the C source. ``TALLYSPAN_NO_EXTENSIONS=1`` at build time skips it.

A process that imported the module has it mapped into memory from that file: writing the file over in
place (as ``shutil.copy2`` does) changed the code under it and it died of a bus error or a segmentation
fault. So the editable install writes a new file beside the old one and renames it into place
(``install_atomically``): a running process keeps the file it opened, the next one imports the new.

setuptools does the compiling (``build_ext``): it knows each platform's compiler and flags.
"""

from __future__ import annotations

import contextlib
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
            install_atomically(built, Path(self.root, "src", target))
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


def install_atomically(built: Path, target: Path) -> None:
    """Put a copy of ``built`` at ``target`` as a new file renamed over the old one, never writing into it:
    a process that has the old one mapped keeps its copy (on POSIX, the old file lives on, unnamed, until
    the last process using it closes it); the file at ``target`` is always whole, old or new."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as copy, built.open("rb") as source:
            shutil.copyfileobj(source, copy)
        shutil.copystat(built, temporary)  # its mode (executable) and times, as copy2 kept them
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
