"""The build hook (hatch_build.py) replaces the compiled ``_scan`` module so that a running process keeps its copy.

``pip install -e .`` runs the hook, which compiles ``src/tallyspan/_engine/_scan.c`` and puts the module
beside the sources. It used to write the new module over the old file in place: an app that had
imported the module had that file mapped into memory, and died of a bus error (exit 135) or a
segmentation fault the moment the reinstall wrote it. Here the real hook compiles the real source twice
into a scratch tree while another process, which imported the first build, keeps calling it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tests.modules import load_script

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path("src", "tallyspan", "_engine", "_scan.c")

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="Windows refuses to replace a loaded module at all"),
    pytest.mark.skipif(
        shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None,
        reason="no C compiler here: the hook builds no module",
    ),
]

#: Imports the module from the file given, says so, then calls it until the stop file appears; every
#: answer must be the first one. Prints how many rounds it made.
_USER = textwrap.dedent(
    """
    import importlib.util
    import os
    import sys

    path, stop = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("tallyspan._engine._scan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "かなカナ漢字 and some words. " * 40
    expected = (module.without_whitespace(text), module.repeat_units(text, 4, 8, 16, 4))
    print("ready", flush=True)
    rounds = 0
    while not os.path.exists(stop):
        assert (module.without_whitespace(text), module.repeat_units(text, 4, 8, 16, 4)) == expected
        rounds += 1
    print("alive", rounds, flush=True)
    """
)


def _build(root: Path) -> dict[str, Any]:
    """Run the real build hook for an editable install of the tree at ``root``; its build data."""
    from hatchling.bridge.app import Application

    hook_module = load_script(ROOT / "hatch_build.py")
    hook = hook_module.ScanModuleHook(str(root), {}, None, None, str(root / "dist"), "wheel", Application())
    build_data: dict[str, Any] = {"force_include": {}}
    hook.initialize("editable", build_data)
    hook.finalize("editable", build_data, str(root / "dist"))
    return build_data


def _mapped_inodes(pid: int, path: Path) -> set[int]:
    """The inodes of the files named ``path`` that process ``pid`` has mapped (Linux's /proc)."""
    inodes = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].removesuffix(" (deleted)") == str(path):
            inodes.add(int(fields[4]))
    return inodes


def test_a_process_running_the_module_keeps_running_while_it_is_built_again(tmp_path: Path) -> None:
    (tmp_path / SOURCE).parent.mkdir(parents=True)
    shutil.copy(ROOT / SOURCE, tmp_path / SOURCE)
    assert _build(tmp_path)["pure_python"] is False
    (built,) = (tmp_path / SOURCE).parent.glob("_scan*" + sysconfig.get_config_var("EXT_SUFFIX"))
    first = built.stat().st_ino
    stop = tmp_path / "stop"
    with subprocess.Popen(
        [sys.executable, "-c", _USER, str(built), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as user:
        try:
            assert user.stdout is not None
            assert user.stdout.readline() == "ready\n"
            _build(tmp_path)  # the reinstall, while the user's process calls the module in a loop
            assert user.poll() is None
            if Path("/proc").is_dir():
                assert _mapped_inodes(user.pid, built) == {first}  # its own copy, the file it opened
            stop.touch()
            out, err = user.communicate(timeout=60)
        finally:
            if user.poll() is None:
                user.kill()
    assert user.returncode == 0, err
    assert out.startswith("alive ")
    assert int(out.split()[1]) > 0
    # The new module stands whole at the path, as a new file, and no scratch file is left beside it.
    assert built.stat().st_ino != first
    assert sorted(path.name for path in built.parent.iterdir()) == ["_scan.c", built.name]
    again = subprocess.run(
        [sys.executable, "-c", _USER, str(built), str(stop)], capture_output=True, text=True, timeout=60
    )
    assert (again.returncode, again.stdout) == (0, "ready\nalive 0\n"), again.stderr
