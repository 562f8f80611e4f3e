"""Whether tallyspan's optional C extensions are turned off: one switch for the whole process.

A leaf, below the check engine: it imports nothing of tallyspan and knows no configuration. The engine
asks it once, when it imports its scans (``tallyspan._engine._scripts``), so the engine itself reads no
environment and needs nothing from the runtime. Every other variable is read by ``tallyspan._config``.
"""

from __future__ import annotations

import os

__all__ = ["ENV_NO_EXTENSIONS", "extensions_disabled"]

ENV_NO_EXTENSIONS = "TALLYSPAN_NO_EXTENSIONS"
"""Set (to anything but empty) to use the pure-Python scans even where the optional C module
``tallyspan._engine._scan`` was built: the same verdicts, at about one and a half times the checks' cost. For
telling a fault of the module from one of the checks."""


def extensions_disabled() -> bool:
    """True when ``TALLYSPAN_NO_EXTENSIONS`` is set to anything but empty."""
    return bool(os.environ.get(ENV_NO_EXTENSIONS))
